//! The value syntaxes a config file uses beyond plain TOML: durations
//! (`"10s"`, `"500ms"`, `"1m 30s"`) and sizes (`"64MiB"` or a number of
//! bytes). Each parser returns a message that says what to write instead.

use std::time::Duration;

use super::raw::IntOrText;

/// Parse a duration string with humantime's syntax.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration ({e}); write it like \"10s\", \"500ms\" or \"1m 30s\"")
    })
}

/// Units a size string may carry, lower-cased, with their factor. Binary
/// units are what memory limits are usually thought in; the decimal ones
/// are accepted because people write them too, and mean what they say.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
];

/// Parse a size: a non-negative integer number of bytes, or a string of an
/// integer and a unit (`"64MiB"`, `"512 KiB"`, `"1GiB"`, `"1000000"`).
pub(super) fn parse_size(value: &IntOrText) -> Result<u64, String> {
    let hint = "write it like \"64MiB\", \"512KiB\", \"1GiB\" or a number of bytes";
    match value {
        IntOrText::Int(n) => {
            u64::try_from(*n).map_err(|_| format!("{n} is not a size: it is negative; {hint}"))
        }
        IntOrText::Text(text) => {
            let trimmed = text.trim();
            let digits_end = trimmed
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(trimmed.len());
            let (number, unit) = trimmed.split_at(digits_end);
            if number.is_empty() {
                return Err(format!("{text:?} is not a size; {hint}"));
            }
            let number: u64 = number
                .parse()
                .map_err(|_| format!("{text:?} is not a size: the number is too large; {hint}"))?;
            let unit = unit.trim().to_ascii_lowercase();
            let factor = if unit.is_empty() {
                1
            } else {
                SIZE_UNITS
                    .iter()
                    .find(|(name, _)| *name == unit)
                    .map(|(_, factor)| *factor)
                    .ok_or_else(|| {
                        format!(
                            "{text:?} is not a size: unknown unit {unit:?} (use B, KiB, MiB, GiB, kB, MB or GB); {hint}"
                        )
                    })?
            };
            number
                .checked_mul(factor)
                .ok_or_else(|| format!("{text:?} is not a size: it is too large; {hint}"))
        }
    }
}

/// Parse an integer that may also be written as a string, for values such
/// as PostgreSQL's system identifier that can exceed TOML's signed 64-bit
/// integers.
pub(super) fn parse_u64(value: &IntOrText) -> Result<u64, String> {
    match value {
        IntOrText::Int(n) => u64::try_from(*n).map_err(|_| format!("{n} must not be negative")),
        IntOrText::Text(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not an unsigned 64-bit integer")),
    }
}

/// The 1-based line of byte `offset` in `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A size shown to people: exact binary units when they divide evenly.
pub(super) fn show_size(bytes: u64) -> String {
    const UNITS: &[(&str, u64)] = &[("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, factor) in UNITS {
        if bytes >= *factor && bytes.is_multiple_of(*factor) {
            return format!("{}{name}", bytes / factor);
        }
    }
    format!("{bytes} bytes")
}
