//! `leasehold:controller/logging`: guest log lines into the host's tracing
//! output, tagged with the controller and epoch, bounded in length.
//!
//! Also owns [`escape`], the one escaping of untrusted text (guest log
//! lines and output, user input) before it reaches any log format: a log
//! line always ends where the host ended it, so nobody can forge one.

use std::borrow::Cow;

use crate::fence::Epoch;

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

/// `text` with every character that could end a log line, rewrite the
/// terminal or reorder what a reader sees written out as an escape: `\n`,
/// `\r`, `\t`, and `\u{..}` for the other C0 controls (ESC included), DEL,
/// the C1 controls, the Unicode line and paragraph separators (U+2028,
/// U+2029) and the bidirectional overrides and isolates (U+202A–U+202E,
/// U+2066–U+2069). Everything else, backslashes included, is kept as it is:
/// the result is for reading, not for decoding. Borrowed when there is
/// nothing to escape, which is the common case.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            c if needs_escape(c) => escaped.extend(c.escape_unicode()),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
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

#[cfg(test)]
mod tests {
    use super::{escape, truncate};

    #[test]
    fn nothing_that_ends_or_rewrites_a_line_survives_escaping() {
        let forged = "done\n2026-12-01T00:00:00Z  INFO leasehold: lease granted\r\u{1b}[2K\u{85}x\u{2028}y\u{2029}\u{202e}z\u{7f}\t";
        let escaped = escape(forged);
        assert_eq!(
            escaped,
            "done\\n2026-12-01T00:00:00Z  INFO leasehold: lease granted\\r\\u{1b}[2K\\u{85}x\\u{2028}y\\u{2029}\\u{202e}z\\u{7f}\\t"
        );
        assert!(!escaped.chars().any(super::needs_escape));
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        let plain = "reconciled nodes/n1 in 3 ms: ok \\ \"quoted\" é 日本";
        assert!(matches!(escape(plain), std::borrow::Cow::Borrowed(p) if p == plain));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
