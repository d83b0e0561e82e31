//! Log lines that go to the host, which tags them with the controller and
//! epoch. The level macros live at the crate root.
//!
//! Owns: [`log`], the one function the macros call. Must never: panic when
//! no host is there (natively, a line logged outside a test's fake goes to
//! stderr instead; see `sys/native.rs`).

use crate::sys;

// The level is a wire type; it is re-exported here, where the author meets
// it.
pub use crate::sys::Level;

/// Write one log line through the host. The host truncates lines longer
/// than [`crate::LOG_LINE_BYTES`]. The macros ([`crate::info!`], ...) call
/// this.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::log(Level::Warn, "node n3 has no capacity field");
/// assert_eq!(host.logs()[0].message, "node n3 has no capacity field");
/// ```
pub fn log(level: Level, message: &str) {
    sys::log(level, message);
}
