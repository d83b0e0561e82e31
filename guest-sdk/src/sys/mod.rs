//! The one seam between the SDK and whatever answers its calls: the
//! generated WIT imports on `wasm32` (`wasm.rs`), the host a test installs
//! on the calling thread elsewhere (`native.rs`; the crate's `FakeHost`
//! installs itself there). Both sides speak the plain types of `wire.rs`;
//! nothing above this module knows which one runs.
//!
//! Owns: the wire types, the ten calls (`get`, `list`, `list_selected`,
//! `commit`, `fence`, `shard`,
//! `log`, `settings`, `now` (the wall clock, `wasi:clocks/wall-clock`), and
//! `http_send`, one outbound request through `wasi:http/outgoing-handler`)
//! and, on `wasm32`, the generated bindings.
//! Must never: import a module of this crate above it (everything else
//! builds on `sys`, so an import upward would be a cycle;
//! `tests/layering.rs` checks it), or decide anything for the author (typed
//! decoding, error policy, the meaning of an HTTP `error-code`).

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native;
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm;
mod wire;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use native::{
    commit, fence, get, http_send, list, list_selected, log, now, settings, shard,
};
#[cfg(target_arch = "wasm32")]
pub(crate) use wasm::{
    commit, fence, get, http_send, list, list_selected, log, now, settings, shard,
};

#[cfg(any(target_arch = "wasm32", test))]
pub(crate) use wire::FieldSize;
pub use wire::{
    Committed, Fence, Level, Metadata, Method, NewEvent, ObjectKey, Op, Selector, Shard,
};
pub(crate) use wire::{
    ErrorCode, RawObject, RawPage, Scheme, WireError, WireHttpError, WireRequest, WireResponse,
};
