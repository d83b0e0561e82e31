//! Leasehold host: runs controllers as WebAssembly components, each under
//! its own fenced lease.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of modules and
//! the invariants they keep.

#![warn(missing_docs)]

pub mod api;
pub mod author;
pub mod authority;
pub mod config;
pub mod db;
pub mod db_tls;
pub mod embedded;
pub mod fence;
pub mod limits;
pub mod log_clamp;
pub mod names;
pub mod notify;
pub mod outbound;
pub mod quota;
pub mod runtime;
pub mod service;
pub mod session;
pub mod settings_schema;
pub mod shard;
pub mod sim;
pub mod status;
pub mod store;
pub mod supervisor;
pub mod telemetry;
pub mod testing;
pub mod text;
pub mod timeouts;
pub mod tls;
