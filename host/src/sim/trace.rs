//! A run's trace: one line per thing that happened (a step, a host call
//! with its arguments and answer, a fault, a request and its answer, a
//! commit), and the SHA-256 digest of every line. Two runs with the same
//! digest did the same things in the same order.

use ring::digest::{Context, SHA256};

use crate::limits::SIM_TRACE_VALUE_BYTES;

/// The lines of one run and their running digest.
#[derive(Clone)]
pub struct Trace {
    lines: Vec<String>,
    digest: Context,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            lines: Vec::new(),
            digest: Context::new(&SHA256),
        }
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("lines", &self.lines.len())
            .finish_non_exhaustive()
    }
}

impl Trace {
    /// Add a line (the digest covers it, and where lines end).
    pub fn line(&mut self, line: String) {
        self.digest.update(line.as_bytes());
        self.digest.update(b"\n");
        self.lines.push(line);
    }

    /// Every line so far.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The digest of every line so far, in lower-case hex.
    pub fn digest(&self) -> String {
        self.digest
            .clone()
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// `text` cut to [`SIM_TRACE_VALUE_BYTES`] at a character boundary, for a
/// trace line.
pub fn clip(text: &str) -> String {
    if text.len() <= SIM_TRACE_VALUE_BYTES {
        return text.to_string();
    }
    let mut end = SIM_TRACE_VALUE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_covers_every_line_and_its_end() {
        let trace = |lines: &[&str]| {
            let mut t = Trace::default();
            for line in lines {
                t.line(line.to_string());
            }
            t.digest()
        };
        assert_eq!(trace(&["a", "b"]), trace(&["a", "b"]));
        assert_ne!(trace(&["a", "b"]), trace(&["ab"]));
        assert_ne!(trace(&["a", "b"]), trace(&["b", "a"]));
        assert_eq!(trace(&[]).len(), 64);
        assert!(clip(&"é".repeat(SIM_TRACE_VALUE_BYTES)).len() <= SIM_TRACE_VALUE_BYTES + 3);
    }
}
