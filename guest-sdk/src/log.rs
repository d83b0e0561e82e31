//! Log lines that go to the host, which tags them with the controller and
//! epoch. The level macros live at the crate root.

use std::fmt;

use crate::sys;

/// Severity of a log line.
///
/// # Example
///
/// ```
/// use leasehold_guest::Level;
///
/// assert!(Level::Warn > Level::Info);
/// assert_eq!(Level::Error.to_string(), "ERROR");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected but handled.
    Warn,
    /// A failure.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        })
    }
}

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
