//! The record: one entry for every request that reached the resource API,
//! in the order the receiver decided them.
//!
//! The entry is written in the same critical section that decides and
//! applies the request, so `seq` order *is* the order in which effects
//! happened; the checker ([`crate::check`]) relies on that.

use std::fmt;
use std::io::BufRead;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What the receiver did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A mutation applied for the first time.
    Applied,
    /// A repeated idempotency key: the stored answer was returned and
    /// nothing was applied.
    Replayed,
    /// Its epoch was below the highest accepted for its lease: refused with
    /// 409, nothing applied.
    Stale,
    /// Refused for any other reason (missing or malformed headers, key
    /// reused for a different request, bad body, unknown bucket): nothing
    /// applied.
    Rejected,
    /// A read (`GET`): not fenced, never an effect, ignored by the checker.
    Read,
}

impl Outcome {
    /// Whether the receiver accepted the request's fence: it was applied or
    /// replayed.
    pub fn is_accepted(self) -> bool {
        matches!(self, Outcome::Applied | Outcome::Replayed)
    }

    /// The name used in JSON and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Replayed => "replayed",
            Outcome::Stale => "stale",
            Outcome::Rejected => "rejected",
            Outcome::Read => "read",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One request as the receiver saw and judged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordEntry {
    /// Position in decision order, from 1, without gaps.
    pub seq: u64,
    /// When the request was decided (receiver's clock; for people, the
    /// checker orders by `seq`).
    pub arrived_at: DateTime<Utc>,
    /// `GET`, `PUT` or `DELETE`.
    pub method: String,
    /// The request path, e.g. `/buckets/photos`.
    pub path: String,
    /// The `Leasehold-Lease` header, when present and well formed.
    pub lease: Option<String>,
    /// The `Leasehold-Epoch` header, when present and well formed.
    pub epoch: Option<u64>,
    /// The `Leasehold-Holder` header, when present and well formed.
    pub holder: Option<String>,
    /// The `Idempotency-Key` header, when present and well formed.
    pub idempotency_key: Option<String>,
    /// What the receiver did.
    pub outcome: Outcome,
    /// The status the receiver decided on (a fault may have kept it from
    /// reaching the client).
    pub status: u16,
    /// The resource the effect touched (`buckets/NAME`), for applied and
    /// replayed mutations.
    pub resource: Option<String>,
    /// The resource's generation after the effect (for a replay: the
    /// generation its original application produced).
    pub generation: Option<u64>,
    /// Why it was refused, for stale and rejected requests.
    pub detail: Option<String>,
    /// The test fault that shaped the answer's delivery, if any (see
    /// [`crate::Fault`]).
    pub fault: Option<String>,
}

/// A record file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordFileError {
    /// The file could not be opened or read.
    #[error("cannot read the record file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A line is not a record entry.
    #[error("line {line} of the record file {path} is not a record entry: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// Read a record file written with `--record-file` (one JSON entry per
/// line). A last line without its newline is a write in progress and is
/// skipped, so a test may read the file while the receiver runs.
pub fn read_record_file(path: &Path) -> Result<Vec<RecordEntry>, RecordFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| RecordFileError::Io {
        path: shown.clone(),
        source,
    })?;
    let complete = match text.iter().rposition(|b| *b == b'\n') {
        Some(last) => &text[..=last],
        None => &[][..],
    };
    let mut entries = Vec::new();
    for (index, line) in complete.lines().enumerate() {
        let line = line.map_err(|source| RecordFileError::Io {
            path: shown.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let entry = serde_json::from_str(&line).map_err(|source| RecordFileError::Parse {
            path: shown.clone(),
            line: index + 1,
            source,
        })?;
        entries.push(entry);
    }
    Ok(entries)
}
