//! The fault suite's support: an invariant checker over the database's own
//! record ([`checker`]), a rig of real `leasehold` processes each behind its
//! own fault proxy ([`rig`]), seeded random fault schedules
//! ([`schedule`]) and which seeds a run plays ([`seeds`]).
//!
//! The scenarios themselves are in `tests/faults.rs`.

pub mod checker;
pub mod rig;
pub mod schedule;
pub mod seeds;
