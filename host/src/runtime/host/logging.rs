//! `leasehold:controller/logging`: guest log lines into the host's tracing
//! output, tagged with the controller and epoch, bounded in length.
//! Lines are escaped by [`crate::text::escape`].

use crate::fence::Epoch;
use crate::text::{escape, truncate};

/// Severity of a guest's log line: `logging.level` of every WIT version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The logging slice of a guest's host state.
pub struct LoggingHost {
    controller: String,
    epoch: Epoch,
    max_line: usize,
}

impl LoggingHost {
    /// Lines of `controller` at `epoch`, truncated to `max_line` bytes.
    pub fn new(controller: String, epoch: Epoch, max_line: usize) -> Self {
        Self {
            controller,
            epoch,
            max_line,
        }
    }
}

impl LoggingHost {
    /// `logging.log` of every WIT version: one guest line at `level`,
    /// truncated and escaped, tagged with the controller and epoch.
    pub fn log_line(&mut self, level: Level, message: &str) {
        let message = escape(truncate(message, self.max_line));
        let controller = self.controller.as_str();
        let epoch = self.epoch.0;
        match level {
            Level::Trace => tracing::trace!(target: "guest", controller, epoch, "{message}"),
            Level::Debug => tracing::debug!(target: "guest", controller, epoch, "{message}"),
            Level::Info => tracing::info!(target: "guest", controller, epoch, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", controller, epoch, "{message}"),
            Level::Error => tracing::error!(target: "guest", controller, epoch, "{message}"),
        }
    }
}
