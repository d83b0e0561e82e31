//! The wall clock, and timers built on the requeue.
//!
//! On `wasm32` the clock is the host machine's wall clock, read through
//! the world's `wasi:clocks/wall-clock` import (UTC, since the Unix
//! epoch); natively it is the [`crate::FakeHost`]'s clock, which a test
//! sets and advances. Owns: [`now`] and [`until`]. Must never: be used to
//! order writes of different tenures (the database's versions and epochs
//! do that), or cache a reading (a test moves the fake's clock under the
//! guest).

use std::time::{Duration, SystemTime};

use crate::sys;

/// The current wall-clock time.
///
/// # Example
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// host.set_now(UNIX_EPOCH + Duration::from_secs(1_000));
/// assert_eq!(leasehold_guest::clock::now(), UNIX_EPOCH + Duration::from_secs(1_000));
/// host.advance(Duration::from_secs(5));
/// assert_eq!(leasehold_guest::clock::now(), UNIX_EPOCH + Duration::from_secs(1_005));
/// ```
pub fn now() -> SystemTime {
    sys::now()
}

/// How long from [`now`] until `at`; zero if `at` has passed.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// let at = host.now() + Duration::from_secs(90);
/// assert_eq!(leasehold_guest::clock::until(at), Duration::from_secs(90));
/// host.advance(Duration::from_secs(120));
/// assert_eq!(leasehold_guest::clock::until(at), Duration::ZERO);
/// ```
pub fn until(at: SystemTime) -> Duration {
    at.duration_since(now()).unwrap_or(Duration::ZERO)
}
