//! `leasehold sim`: deterministic fault simulation of a real controller
//! component.
//!
//! A *world file* names a controller's component, the objects it starts
//! with, the services it may call, what users do and when, the
//! properties that must hold, and how often each fault strikes. The
//! simulation runs the component in the real runtime (the same engine,
//! WIT bindings, store host calls, fence and outbound hooks as
//! production), against the memory store and lease authority, a virtual
//! clock, randomness seeded from the run's seed and simulated services
//! instead of the network, many times, each run with its own seeded
//! faults:
//!
//! - at the guest's host calls: the lease lost (the guest aborted as in
//!   production, a new tenure at the next epoch resyncs), a conflicting
//!   write before a commit, the store unavailable, a commit's reply lost,
//!   a request refused before it is sent, timed out before the service
//!   saw it, applied with its reply lost, answered 5xx, answered late;
//! - between reconciles: the lease lost, a duplicate or merged wake-up, a
//!   clock jump, a fresh guest instance.
//!
//! Then it checks the built-in properties ([`QUIESCENCE`],
//! [`NO_STALE_EFFECT`], [`NO_TRAP`]) and the file's invariants (CEL over
//! `objects` and `services`). Every run prints its seed and the digest of
//! its trace; `--seed S --runs 1` repeats a run exactly. A failed run is
//! shrunk to the fewest faults that still break the same property.
//!
//! Determinism: one thread runs the guest and the world; the guest's
//! clocks and randomness are the run's; nothing reads the machine's time
//! or network into what the guest sees. (The engine's epoch ticker thread
//! only lets a guest yield; the real-time reconcile deadline ends only a
//! guest that spins.)
//!
//! The seams this takes from the rest of the host are explicit:
//! [`crate::runtime::GuestEnvironment`] (clocks, randomness, where an
//! admitted request goes) and [`crate::store::memory::MemoryStore::with_clock`].
//! Production keeps [`crate::runtime::GuestEnvironment::Host`]; nothing
//! here changes the fence, the allow list, the bounds or the abort.
//!
//! Must never: open a socket, read the machine's clock into the world, or
//! depend on the order of a hash map.

mod cli;
mod faults;
mod invariants;
mod run;
mod service;
mod trace;
mod world;
mod world_state;

pub use cli::{EXIT_BAD_FILE, EXIT_FAILED, EXIT_PASSED, SimArgs, command, engine};
pub use faults::{FaultKind, Injected, Opportunity, Weights};
pub use invariants::When;
pub use run::{Failure, NO_STALE_EFFECT, NO_TRAP, QUIESCENCE, RunReport, Simulator};
pub use service::FENCED_RECEIVER;
pub use world::{World, WorldError};
pub use world_state::SIM_EPOCH_UNIX_SECS;
