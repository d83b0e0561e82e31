//! `leasehold:controller/logging`: guest log lines into the host's tracing
//! output, tagged with the controller and epoch, bounded in length.

use crate::fence::Epoch;
use crate::runtime::bindings::logging::{self, Level};

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

/// Cut `message` to at most `max` bytes on a character boundary.
pub(crate) fn truncate(message: &str, max: usize) -> &str {
    if message.len() <= max {
        return message;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

impl logging::Host for LoggingHost {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let message = truncate(&message, self.max_line);
        let controller = self.controller.as_str();
        let epoch = self.epoch.0;
        match level {
            Level::Trace => tracing::trace!(target: "guest", controller, epoch, "{message}"),
            Level::Debug => tracing::debug!(target: "guest", controller, epoch, "{message}"),
            Level::Info => tracing::info!(target: "guest", controller, epoch, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", controller, epoch, "{message}"),
            Level::Error => tracing::error!(target: "guest", controller, epoch, "{message}"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
