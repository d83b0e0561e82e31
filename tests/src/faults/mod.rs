//! The fault suite's support: an invariant checker over the database's own
//! record ([`checker`]), a rig of real `leasehold` processes each behind its
//! own fault proxy ([`rig`]), seeded random fault schedules
//! ([`schedule`]), which seeds a run plays ([`seeds`]) and readers of the
//! change stream whose records the checker's feed rule judges
//! ([`reader`]).
//!
//! The scenarios themselves are in `tests/faults.rs`.

pub mod checker;
pub mod reader;
pub mod rig;
pub mod schedule;
pub mod seeds;
pub mod watch;
