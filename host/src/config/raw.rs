//! The config file as written, before any checking.
//!
//! Every struct denies unknown keys, so a misspelt key is an error that
//! names it instead of a setting silently ignored. Everything a user may
//! get wrong is kept as written (with its position, via [`Spanned`]) and
//! checked afterwards in [`super::resolve`], so that one run reports every
//! problem with its line instead of stopping at the first. Only what the
//! TOML reader itself refuses (syntax, unknown keys, wrong value types)
//! stops early.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub cluster: Option<Spanned<String>>,
    pub holder: Option<Spanned<String>>,
    /// The default of every controller's `crash_detection`.
    pub crash_detection: Option<Spanned<String>>,
    /// Where the embedded backend keeps its database (no `[database] url`).
    pub data_dir: Option<Spanned<String>>,
    #[serde(default)]
    pub database: RawDatabase,
    #[serde(default)]
    pub http: RawHttp,
    #[serde(default)]
    pub runtime: RawRuntime,
    #[serde(default)]
    pub telemetry: RawTelemetry,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub placement: RawPlacement,
    #[serde(default)]
    pub controllers: Vec<Spanned<RawController>>,
}

/// `[database]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub url: Option<Spanned<String>>,
    pub session_url: Option<Spanned<String>>,
    pub pooler: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub expected_database_id: Option<Spanned<String>>,
    pub expected_system_identifier: Option<Spanned<IntOrText>>,
}

/// `[http]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub listen: Option<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    pub tls_cert: Option<Spanned<String>>,
    pub tls_key: Option<Spanned<String>>,
    pub tls_client_ca: Option<Spanned<String>>,
    /// `[[http.tokens]]`.
    #[serde(default)]
    pub tokens: Vec<Spanned<RawToken>>,
}

/// One `[[http.tokens]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToken {
    pub name: Option<Spanned<String>>,
    pub file: Option<Spanned<String>>,
    pub role: Option<Spanned<String>>,
    pub kinds: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[runtime]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRuntime {
    pub pooling: Option<bool>,
    pub cache_dir: Option<Spanned<String>>,
}

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub otlp_endpoint: Option<Spanned<String>>,
    pub sample_ratio: Option<Spanned<f64>>,
}

/// `[store]`: retention of the event log, the change stream and tenure
/// history.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub event_retention: Option<Spanned<DurationText>>,
    pub tenure_retention: Option<Spanned<i64>>,
}

/// `[placement]`: fair placement of leases across the live hosts.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlacement {
    pub enabled: Option<bool>,
    pub slack: Option<Spanned<i64>>,
    pub min_tenure: Option<Spanned<DurationText>>,
}

/// One `[[controllers]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawController {
    pub name: Option<Spanned<String>>,
    pub component: Option<Spanned<String>>,
    pub lease_ttl: Option<Spanned<DurationText>>,
    pub renew_interval: Option<Spanned<DurationText>>,
    pub renew_deadline: Option<Spanned<DurationText>>,
    pub reconcile_deadline: Option<Spanned<DurationText>>,
    pub backoff_min: Option<Spanned<DurationText>>,
    pub backoff_max: Option<Spanned<DurationText>>,
    pub memory_limit: Option<Spanned<IntOrText>>,
    pub max_instances: Option<Spanned<i64>>,
    pub max_tables: Option<Spanned<i64>>,
    pub max_memories: Option<Spanned<i64>>,
    pub max_queue: Option<Spanned<i64>>,
    pub max_creates_per_second: Option<Spanned<i64>>,
    pub create_burst: Option<Spanned<i64>>,
    pub max_objects_per_kind: Option<Spanned<i64>>,
    pub crash_detection: Option<Spanned<String>>,
    #[serde(default)]
    pub dirs: Vec<Spanned<RawDir>>,
    /// Each entry spanned, so a bad one is reported on its own line.
    pub http_allow: Option<Spanned<Vec<Spanned<String>>>>,
    /// A PEM bundle of CAs the guest's outbound HTTPS trusts beside the
    /// public roots.
    pub http_ca: Option<Spanned<String>>,
    /// Forwarding headers (`Forwarded`, `X-Forwarded-*`) the guest may send.
    pub http_forwarded_headers: Option<Spanned<Vec<Spanned<String>>>>,
    /// `[controllers.settings]`: any table, checked in `resolve` (so a
    /// value that is not a table is reported with the other problems).
    pub settings: Option<Spanned<toml::Value>>,
    /// `shards = N`: run the controller as N leases.
    pub shards: Option<Spanned<i64>>,
    /// Failed reconciles in a row that make the controller degraded.
    pub degraded_after_failures: Option<Spanned<i64>>,
    /// Failing without a success for this long makes it degraded.
    pub degraded_after: Option<Spanned<DurationText>>,
}

/// One `[[controllers.dirs]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDir {
    pub host: Option<Spanned<String>>,
    pub guest: Option<Spanned<String>>,
    #[serde(default)]
    pub writable: bool,
}

/// A duration as written. Its own type only so that a wrong TOML type
/// (`lease_ttl = 10`) is reported as "expected a duration string such as
/// ..." rather than "expected a string".
#[derive(Debug, Clone)]
pub(super) struct DurationText(pub String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"10s\" or \"500ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// An integer, or the same written as a string (sizes with units, and
/// identifiers beyond TOML's signed 64-bit range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IntOrText {
    Int(i64),
    Text(String),
}

impl<'de> Deserialize<'de> for IntOrText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a string such as \"64MiB\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrText, E> {
                Ok(IntOrText::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrText, E> {
                Ok(match i64::try_from(v) {
                    Ok(v) => IntOrText::Int(v),
                    Err(_) => IntOrText::Text(v.to_string()),
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrText, E> {
                Ok(IntOrText::Text(v.to_string()))
            }
        }
        deserializer.deserialize_any(V)
    }
}
