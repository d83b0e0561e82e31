//! Hostile cases: limits.
