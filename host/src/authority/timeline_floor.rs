//! The highest WAL timeline this host saw each database on, kept across
//! restarts in the host's data directory ([`keep_in`]), so that a host
//! restarted against a former primary brought back without a rewind
//! refuses it as the process that saw the new timeline did
//! ([`super::sight_timeline`]). The database keeps its own record too
//! (migration 20, `leasehold_database.highest_timeline`); this one also
//! covers the former primary, whose own row never saw the new timeline.
//!
//! The file `timelines` holds one line per database: its system
//! identifier, its oid and the highest timeline, separated by spaces. It
//! is rewritten whole (a temporary file renamed over it), merging what
//! other hosts sharing the folder wrote, and only ever raised. Without a
//! folder (none configured that exists) nothing is kept and nothing read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The file's name inside the data directory.
pub const FILE: &str = "timelines";

/// Where the record lives, once [`keep_in`] named an existing folder.
static FOLDER: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Keep the record in `folder` (the host's `data_dir`) if it is an
/// existing directory; returns whether it is. Called once at start,
/// before the first identity check.
pub fn keep_in(folder: &Path) -> bool {
    let exists = folder.is_dir();
    *FOLDER.lock().unwrap_or_else(PoisonError::into_inner) = exists.then(|| folder.to_path_buf());
    exists
}

/// Parse the file's text: `(system identifier, oid) → timeline`, the
/// highest of repeated lines; lines that do not parse are skipped.
fn parse(text: &str) -> HashMap<(u64, u32), u32> {
    let mut seen = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(sys), Some(oid), Some(timeline), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(sys), Ok(oid), Ok(timeline)) = (sys.parse(), oid.parse(), timeline.parse()) else {
            continue;
        };
        let highest: &mut u32 = seen.entry((sys, oid)).or_insert(timeline);
        *highest = (*highest).max(timeline);
    }
    seen
}

fn read(folder: &Path) -> HashMap<(u64, u32), u32> {
    std::fs::read_to_string(folder.join(FILE))
        .map(|text| parse(&text))
        .unwrap_or_default()
}

/// The highest timeline recorded for the database, if any.
pub fn recorded(system_identifier: u64, database_oid: u32) -> Option<u32> {
    let folder = FOLDER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()?;
    read(&folder)
        .get(&(system_identifier, database_oid))
        .copied()
}

/// Record that the database was seen on `timeline` (a no-op unless that
/// raises the record). A failure to write is logged and otherwise
/// ignored: the process still refuses lower timelines until it restarts.
pub fn record(system_identifier: u64, database_oid: u32, timeline: u32) {
    let guard = FOLDER.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(folder) = guard.as_ref() else {
        return;
    };
    let mut seen = read(folder);
    let highest = seen.entry((system_identifier, database_oid)).or_insert(0);
    if *highest >= timeline {
        return;
    }
    *highest = timeline;
    let mut lines: Vec<String> = seen
        .iter()
        .map(|((sys, oid), timeline)| format!("{sys} {oid} {timeline}\n"))
        .collect();
    lines.sort();
    let temporary = folder.join(format!(".{FILE}.{}", std::process::id()));
    let written = std::fs::write(&temporary, lines.concat())
        .and_then(|()| std::fs::rename(&temporary, folder.join(FILE)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        tracing::warn!(
            folder = %folder.display(),
            "could not record timeline {timeline} of database (system identifier \
             {system_identifier}, oid {database_oid}) in {FILE}: {e}; a restarted host will not \
             know it saw this timeline unless the database's own record does"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_keeps_the_highest_timeline_of_each_database() {
        assert_eq!(
            parse("1 2 3\n1 2 5\n1 2 4\nnonsense\n7 8 1 extra\n9 10 2\n"),
            HashMap::from([((1, 2), 5), ((9, 10), 2)])
        );
    }
}
