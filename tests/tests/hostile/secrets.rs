//! Hostile cases: secrets.
