//! Leasehold's store rules, written once for every store and every fake.
//!
//! What a write means does not depend on where it is stored: the host's
//! memory, PostgreSQL and embedded backends and the Rust SDK's native
//! `FakeHost` all validate requests ([`validate`]), canonicalize JSON
//! ([`json`]) and decide what a commit does to a set of objects
//! ([`plan`]) with this crate, under the bounds of [`limits`]. Backends
//! only read the objects a plan asks for and apply what it decided.
//!
//! The Python and JavaScript fakes cannot link this crate; they keep their
//! own copies of these rules, and the conformance table
//! (`tests/conformance/`) holds every store and fake to the same outcomes.
//!
//! Must never: do I/O, read a clock (the time a commit stamps is a type
//! parameter the backend supplies), or know about PostgreSQL, Wasm, HTTP
//! or the guest SDK.

#![warn(missing_docs)]

mod error;
pub mod json;
pub mod limits;
pub mod names;
pub mod plan;
mod types;
pub mod validate;

pub use error::Error;
pub use types::{ApiWrite, Metadata, NewEvent, Object, ObjectKey, Op, Selector, Written};
