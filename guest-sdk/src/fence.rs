//! The fence of the tenure this guest runs in, and its shard.
//!
//! Owns: [`fence`] and [`shard`], reading them from the host. Must never: cache it (a
//! native test moves tenures under the guest; on `wasm32` a new tenure is
//! a new instance anyway) or let a guest change it (G2).

use crate::sys;

// The fence and the shard are wire types; they are re-exported here, where
// the author meets them.
pub use crate::sys::{Fence, Shard};

/// The current fence, read from the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// host.new_tenure();
/// assert_eq!(leasehold_guest::fence().epoch, 2);
/// ```
pub fn fence() -> Fence {
    sys::fence()
}

/// The shard of its controller this tenure runs, read from the host:
/// shard 0 of 1 ([`Shard::WHOLE`]) unless the controller's config entry
/// sets `shards`.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Shard};
///
/// let host = FakeHost::new();
/// assert_eq!(leasehold_guest::shard(), Shard::WHOLE);
/// host.set_shard(Shard { index: 1, count: 4 });
/// assert!(leasehold_guest::shard().owns_key("tasks", "t-2"));
/// ```
pub fn shard() -> Shard {
    sys::shard()
}
