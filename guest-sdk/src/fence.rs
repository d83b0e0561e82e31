//! The fence of the tenure this guest runs in.
//!
//! Owns: [`fence`], reading it from the host. Must never: cache it (a
//! native test moves tenures under the guest; on `wasm32` a new tenure is
//! a new instance anyway) or let a guest change it (G2).

use crate::sys;

// The fence is a wire type; it is re-exported here, where the author meets
// it.
pub use crate::sys::Fence;

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
