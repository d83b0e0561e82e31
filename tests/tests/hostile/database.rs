//! Hostile cases: database.
