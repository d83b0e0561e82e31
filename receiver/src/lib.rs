//! A fenced receiver: a small HTTP service that plays an external "cloud"
//! API for Leasehold controllers and enforces the **fenced-receiver rule**.
//!
//! Leasehold's fence stops a deposed leader's *store* writes inside the
//! database. An effect on the outside world has no such transaction: a
//! request sent just before the lease was lost can still arrive after the
//! successor's. So the receiver takes part in the fence:
//!
//! - **Epochs.** Every mutating request carries `Leasehold-Lease`,
//!   `Leasehold-Epoch` and `Leasehold-Holder` (the Leasehold host sets them
//!   on every outbound request, replacing whatever the guest set). The
//!   receiver keeps the highest epoch it has accepted per lease and refuses
//!   a lower one with `409 {"error": "stale epoch", "highest": N}`,
//!   applying nothing. An equal or higher epoch is accepted; a higher one
//!   raises the mark. Per lease is this receiver's granularity: after the
//!   successor's first accepted request nothing of the old tenure is
//!   accepted. Per resource (a mark per bucket) is the alternative; it
//!   needs no notion of a lease but lets an old leader keep changing
//!   resources its successor has not touched yet.
//! - **Idempotency.** Every mutating request carries an `Idempotency-Key`
//!   naming the effect, stable across retries and tenures (never the
//!   epoch). A key already applied returns the stored status and body with
//!   `Idempotency-Replayed: true` and applies nothing; a key reused for a
//!   different method, path or body is refused with 422. Only applied
//!   effects are stored under their key: a refused request can be retried
//!   with the same key.
//! - **Order of checks: stale first.** A stale request is refused with 409
//!   even when its key was already applied, so a deposed leader can never
//!   mistake a replay for permission to go on. A successor replaying its
//!   predecessor's key is accepted (it is at the current epoch).
//!
//! Missing or malformed fence or key headers are `400`. Every request to
//! the resource API is recorded ([`RecordEntry`]), and [`check`] judges a
//! record by the rule.
//!
//! # API
//!
//! - `PUT /buckets/{name}` with `{"size_gb": N, "region": "..."}`: create
//!   (201) or update (200); the answer is the bucket.
//! - `DELETE /buckets/{name}`: 200 `{"name", "deleted": true,
//!   "generation", "applied_epoch"}`, or 404.
//! - `GET /buckets/{name}`: `{"name", "spec", "generation",
//!   "applied_epoch"}` or 404; `GET /buckets`: `{"items": [...]}`.
//! - `GET /_record`: every request to `/buckets…` in decision order;
//!   `GET /_effects`: the applied ones only.
//! - TEST/DEMO ONLY, with `--test-hooks`: `POST /_faults` (see [`Fault`]),
//!   `GET /_faults`, `DELETE /_faults`.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold_receiver::ReceiverError> {
//! use leasehold_receiver::{Receiver, ReceiverConfig, check};
//!
//! let receiver = Receiver::start(ReceiverConfig::default()).await?;
//! println!("cloud at {}", receiver.url());
//! // ... run a controller against it ...
//! assert!(check(&receiver.record()).is_empty());
//! # Ok(()) }
//! ```
//!
//! The record and all state are in memory and grow with every request:
//! this is a test and demo service.

#![warn(missing_docs)]

mod check;
mod faults;
mod record;
mod server;
mod state;

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use check::{Violation, check};
pub use faults::{Fault, FaultSpec, MAX_FAULT_DELAY, MAX_FAULT_REQUESTS};
pub use record::{Outcome, RecordEntry, RecordFileError, read_record_file};
pub use server::MAX_REQUEST_BODY_BYTES;
pub use state::{Bucket, BucketSpec, MAX_BUCKET_NAME_LEN, MAX_HEADER_VALUE_BYTES, headers};

/// How to run a receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverConfig {
    /// Where to listen; port 0 picks a free port
    /// ([`RunningReceiver::local_addr`] tells which).
    pub addr: SocketAddr,
    /// TEST/DEMO ONLY: enable `/_faults` and [`RunningReceiver::set_fault`].
    pub test_hooks: bool,
    /// Append every record entry to this file as a JSON line, flushed per
    /// line, so another process can follow the record
    /// ([`read_record_file`]).
    pub record_file: Option<PathBuf>,
}

impl Default for ReceiverConfig {
    /// Loopback, a free port, no test hooks, no record file.
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            test_hooks: false,
            record_file: None,
        }
    }
}

impl ReceiverConfig {
    /// Listen on `addr`, without test hooks or a record file.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            ..Self::default()
        }
    }

    /// TEST/DEMO ONLY: enable or disable the fault hooks.
    pub fn with_test_hooks(mut self, enabled: bool) -> Self {
        self.test_hooks = enabled;
        self
    }

    /// Append the record to `path` as JSON lines.
    pub fn with_record_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.record_file = Some(path.into());
        self
    }
}

/// Why a receiver could not start, or refused a call.
#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The record file could not be opened for appending.
    #[error("cannot open the record file {path}: {source}")]
    RecordFile {
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A test hook was used on a receiver started without them.
    #[error("test hooks are disabled on this receiver; start it with test_hooks (--test-hooks)")]
    HooksDisabled,
    /// A fault spec out of bounds.
    #[error("invalid fault: {0}")]
    InvalidFault(String),
}

/// Starts receivers.
#[derive(Debug)]
pub struct Receiver;

impl Receiver {
    /// Listen on `config.addr` and serve in a background task of the
    /// current tokio runtime until the returned handle is dropped or shut
    /// down.
    pub async fn start(config: ReceiverConfig) -> Result<RunningReceiver, ReceiverError> {
        let record_file = match &config.record_file {
            Some(path) => {
                let shown = path.display().to_string();
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| ReceiverError::RecordFile {
                        path: shown.clone(),
                        source,
                    })?;
                Some((file, shown))
            }
            None => None,
        };
        let listener =
            TcpListener::bind(config.addr)
                .await
                .map_err(|source| ReceiverError::Bind {
                    addr: config.addr,
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ReceiverError::Bind {
                addr: config.addr,
                source,
            })?;
        if config.test_hooks {
            tracing::warn!("test hooks enabled: POST /_faults can make this receiver misbehave");
        }
        let shared = Arc::new(server::Shared::new(
            state::State::new(record_file),
            config.test_hooks,
        ));
        let task = tokio::spawn(server::serve(listener, server::router(shared.clone())));
        Ok(RunningReceiver {
            local_addr,
            shared,
            task: Some(task),
        })
    }
}

/// A receiver serving in the background. Dropping it stops it and closes
/// every connection, hanging ones included.
#[derive(Debug)]
pub struct RunningReceiver {
    local_addr: SocketAddr,
    shared: Arc<server::Shared>,
    /// `None` once [`RunningReceiver::shutdown`] took it.
    task: Option<JoinHandle<()>>,
}

impl RunningReceiver {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://<local_addr>`, the base URL of its API.
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// Every request to the resource API so far, in decision order.
    pub fn record(&self) -> Vec<RecordEntry> {
        self.shared.lock().record().to_vec()
    }

    /// The applied effects so far, in order.
    pub fn effects(&self) -> Vec<RecordEntry> {
        self.shared
            .lock()
            .record()
            .iter()
            .filter(|e| e.outcome == Outcome::Applied)
            .cloned()
            .collect()
    }

    /// [`check`] of the record so far.
    pub fn check(&self) -> Vec<Violation> {
        check(self.shared.lock().record())
    }

    /// The bucket `name` as it is now.
    pub fn bucket(&self, name: &str) -> Option<Bucket> {
        self.shared.lock().bucket(name).cloned()
    }

    /// The highest epoch accepted for `lease` (`<cluster>/<lease>`).
    pub fn highest_epoch(&self, lease: &str) -> Option<u64> {
        self.shared.lock().mark(lease)
    }

    /// TEST ONLY: shape the answers to the next `spec.requests` requests
    /// (see [`Fault`]), replacing any fault pending.
    pub fn set_fault(&self, spec: FaultSpec) -> Result<(), ReceiverError> {
        if !self.shared.test_hooks {
            return Err(ReceiverError::HooksDisabled);
        }
        spec.validate().map_err(ReceiverError::InvalidFault)?;
        self.shared.lock().faults.set(spec);
        Ok(())
    }

    /// TEST ONLY: drop the pending fault.
    pub fn clear_fault(&self) -> Result<(), ReceiverError> {
        if !self.shared.test_hooks {
            return Err(ReceiverError::HooksDisabled);
        }
        self.shared.lock().faults.clear();
        Ok(())
    }

    /// Stop serving and wait until every connection is closed.
    pub async fn shutdown(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Aborted: its result is the cancellation, nothing to report.
            let _ = task.await;
        }
    }
}

impl Drop for RunningReceiver {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
