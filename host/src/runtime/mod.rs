//! The Wasm runtime: one shared engine, controllers compiled once into an
//! `InstancePre`, a fresh `Store` and instance per tenure (G1), host
//! bindings that stamp every write with the tenure's fence (G2), hard abort
//! on revocation (G3), limits (G4) and no ambient authority (G5).
//!
//! Must never: know about PostgreSQL or lease protocols. It receives a
//! [`Fence`](crate::fence::Fence), a [`Store`](crate::store::Store) backend
//! and a [`Revocation`], and obeys the revocation.

pub mod compile_lock;
mod engine;
mod environment;
mod guest;
pub mod host;
mod revocation;
mod state;
mod stdio;
mod worlds;

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

pub use engine::{CacheStats, EngineConfig};
pub use environment::{
    GuestEnvironment, SimulatedRequest, SimulatedResponse, SimulatedSend, Simulation,
};
pub use guest::{
    CompiledController, Description, GuestInstance, MAX_RELATED_WATCHES, ReconcileReason,
    Reconciled, RelatedMap, RelatedWatch, Runtime,
};
pub use host::settings::Settings;
pub use host::store::CommitCounters;
pub use revocation::{Lapse, Revocation};
pub use worlds::{PACKAGE as WIT_PACKAGE, WorldVersion, detect as detect_world};

/// Per-guest limits. Every field has a default in [`crate::limits`] or
/// [`crate::timeouts`].
#[derive(Debug, Clone)]
pub struct GuestLimits {
    /// Largest linear memory.
    pub memory_bytes: usize,
    /// Longest single reconcile (and describe, and instantiation).
    pub reconcile_deadline: Duration,
    /// Largest payload of one host call.
    pub payload_bytes: usize,
    /// Most table elements.
    pub table_elements: usize,
    /// Most core instances.
    pub instances: usize,
    /// Most tables.
    pub tables: usize,
    /// Most linear memories.
    pub memories: usize,
    /// Longest log line.
    pub log_line_bytes: usize,
    /// Bytes of stdout + stderr captured per tenure.
    pub stdio_bytes: usize,
    /// Write quotas of the controller. Their state lives with the compiled
    /// controller, not with an instance, so a restarted guest does not get
    /// a fresh budget.
    pub quota: crate::quota::QuotaLimits,
    /// Where the guest may send HTTP requests (`http_allow`); empty: no
    /// network at all.
    pub http_allow: std::sync::Arc<crate::outbound::AllowList>,
    /// The bounds of each outbound request.
    pub http: crate::outbound::HttpLimits,
    /// A PEM bundle of CAs its outbound HTTPS trusts beside the public
    /// roots (`http_ca`), read when the controller is compiled.
    pub http_ca: Option<std::path::PathBuf>,
    /// The forwarding headers its guest may send
    /// (`http_forwarded_headers`, lowercase).
    pub http_forwarded_headers: std::sync::Arc<Vec<String>>,
    /// The controller's settings (`[controllers.settings]`), read by the
    /// guest through `settings.get` (0.2.0 on). Kept with the limits so a
    /// reload that changes them restarts the controller like any other
    /// change of what its guest runs under. `{}` by default.
    pub settings: Settings,
}

impl Default for GuestLimits {
    fn default() -> Self {
        use crate::limits;
        Self {
            memory_bytes: limits::GUEST_MEMORY_BYTES,
            reconcile_deadline: crate::timeouts::RECONCILE_DEADLINE,
            payload_bytes: limits::HOST_CALL_PAYLOAD_BYTES,
            table_elements: 100_000,
            instances: limits::GUEST_INSTANCES,
            tables: limits::GUEST_TABLES,
            memories: limits::GUEST_MEMORIES,
            log_line_bytes: limits::LOG_LINE_BYTES,
            stdio_bytes: limits::GUEST_STDIO_BYTES,
            quota: crate::quota::QuotaLimits::default(),
            http_allow: Default::default(),
            http: crate::outbound::HttpLimits::default(),
            http_ca: None,
            http_forwarded_headers: Default::default(),
            settings: Settings::default(),
        }
    }
}

/// A directory granted to a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// Directory on the host.
    pub host_path: PathBuf,
    /// Where the guest sees it.
    pub guest_path: String,
    /// Whether the guest may write (default: read-only).
    pub writable: bool,
}

/// Failures of the engine itself.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The engine could not be configured.
    #[error("cannot build the Wasm engine: {0}")]
    Engine(String),
}

/// A component that cannot run as a controller.
#[derive(Debug, Error)]
#[error("controller {controller}: component {path}: {problem}")]
pub struct ComponentError {
    /// The controller's name.
    pub controller: String,
    /// The component file (or `<bytes>`).
    pub path: String,
    /// What is wrong and what to do about it.
    pub problem: String,
}

/// Why a guest instance was torn down. Each names the controller and the
/// tenure's fence.
#[derive(Debug, Error)]
pub enum GuestError {
    /// The lease was lost; the guest was hard-aborted.
    #[error("controller {controller} ({fence}): guest aborted: the lease was lost")]
    Aborted {
        /// The controller.
        controller: String,
        /// The tenure's fence, as text.
        fence: String,
    },
    /// A call ran past its deadline.
    #[error("controller {controller} ({fence}): guest ran past its deadline of {deadline:?}")]
    DeadlineExceeded {
        /// The controller.
        controller: String,
        /// The tenure's fence, as text.
        fence: String,
        /// The deadline.
        deadline: Duration,
    },
    /// The guest tried to grow its memory past the limit.
    #[error("controller {controller} ({fence}): guest exceeded its memory limit of {limit} bytes")]
    OutOfMemory {
        /// The controller.
        controller: String,
        /// The tenure's fence, as text.
        fence: String,
        /// The limit.
        limit: usize,
    },
    /// The guest trapped (a panic, `unreachable`, a bad host call).
    #[error("controller {controller} ({fence}): guest trapped: {message}")]
    Trap {
        /// The controller.
        controller: String,
        /// The tenure's fence, as text.
        fence: String,
        /// The trap, with its wasm backtrace when available.
        message: String,
    },
    /// The guest's `describe` answered something the host cannot run it
    /// by (a shard label or an every-shard kind of the wrong syntax).
    #[error("controller {controller} ({fence}): its describe answer cannot be used: {problem}")]
    Described {
        /// The controller.
        controller: String,
        /// The tenure's fence, as text.
        fence: String,
        /// What is wrong, naming the value.
        problem: String,
    },
    /// The guest can no longer be called: it was torn down earlier in this
    /// tenure.
    #[error("controller {controller} ({fence}): guest instance is no longer usable")]
    Poisoned {
        /// The controller.
        controller: String,
        /// The tenure's fence, as text.
        fence: String,
    },
}
