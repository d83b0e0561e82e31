//! Text from outside before it reaches a log line: the one escaping of
//! untrusted text (guest log lines and output, user input, error texts),
//! so a log line always ends where the host ended it and nobody can forge
//! one, and the cut of a long message on a character boundary.
//!
//! A leaf: it imports nothing of the crate, so every layer may use it.

use std::borrow::Cow;

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
pub fn truncate(message: &str, max: usize) -> &str {
    if message.len() <= max {
        return message;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
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
