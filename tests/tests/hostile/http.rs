//! Hostile cases: http.
