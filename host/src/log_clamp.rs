//! Third-party log output that can carry values, statements or URLs,
//! clamped whatever level the operator asks for (`--log-level`,
//! `RUST_LOG`).
//!
//! Owns: the table of clamped targets ([`CLAMPED`]) and the filter that
//! applies it beside the operator's. Why each is clamped: at `debug`,
//! `tokio_postgres` logs every statement with its parameters (whole object
//! values, settings); at `trace`, `wasmtime_wasi_http` logs each request's
//! path with its query (`/hooks/x?token=…`), denied ones included; the
//! HTTP and TLS stacks log headers and handshakes. The host's own lines
//! are written never to hold a secret; these crates make no such promise.
//! Must never: let a clamped target through above its level, however the
//! filter is written (`trace`, `tokio_postgres=trace`, ...).

use tracing::{Level, Metadata};

/// `(target, most verbose level let through)`: a target matches itself and
/// its submodules (`tokio_postgres` matches `tokio_postgres::query`).
pub const CLAMPED: &[(&str, Level)] = &[
    ("tokio_postgres", Level::INFO),
    ("postgres_protocol", Level::INFO),
    ("deadpool", Level::INFO),
    ("deadpool_postgres", Level::INFO),
    ("wasmtime_wasi_http", Level::WARN),
    ("wasmtime_wasi", Level::INFO),
    ("hyper", Level::INFO),
    ("hyper_util", Level::INFO),
    ("h2", Level::INFO),
    ("rustls", Level::INFO),
    ("tokio_rustls", Level::INFO),
    ("tokio_postgres_rustls", Level::INFO),
    ("axum", Level::INFO),
    ("tower", Level::INFO),
    ("opentelemetry", Level::INFO),
    ("opentelemetry_sdk", Level::INFO),
    ("opentelemetry_otlp", Level::INFO),
    ("opentelemetry_http", Level::INFO),
];

/// The most verbose level `target` may log at, if it is clamped.
pub fn limit(target: &str) -> Option<Level> {
    CLAMPED.iter().find_map(|(name, level)| {
        let matches = target
            .strip_prefix(name)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"));
        matches.then_some(*level)
    })
}

/// Whether a log line of `metadata` may be written at all.
pub fn allows(metadata: &Metadata<'_>) -> bool {
    limit(metadata.target()).is_none_or(|max| *metadata.level() <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamped_targets_and_their_submodules_are_held_to_their_level() {
        assert_eq!(limit("tokio_postgres"), Some(Level::INFO));
        assert_eq!(limit("tokio_postgres::query"), Some(Level::INFO));
        assert_eq!(limit("wasmtime_wasi_http::p2::types"), Some(Level::WARN));
        // A name that only starts the same is another crate.
        assert_eq!(limit("tokio_postgres_extra"), None);
        assert_eq!(limit("leasehold_host::api"), None);
        assert!(Level::DEBUG > Level::INFO, "more verbose compares greater");
    }
}
