//! Hostile cases: logs.
