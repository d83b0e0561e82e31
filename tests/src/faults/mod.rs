//! The fault suite's support: an invariant checker over the database's own
//! record ([`checker`]), a rig of real `leasehold` processes each behind its
//! own fault proxy ([`rig`]), and seeded random fault schedules
//! ([`schedule`]).
//!
//! The scenarios themselves are in `tests/faults.rs`.

pub mod checker;
pub mod rig;
pub mod schedule;
