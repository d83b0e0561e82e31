//! The evidence and the rules of the watch guarantees: every committed
//! change of a watched kind wakes its controller ([`judge_wake_ups`]), and
//! an object is never removed while a finalizer is on it
//! ([`judge_finalizers`]).
//!
//! # Wake-ups: what the host promises, and what is judged
//!
//! A controller's worker (one per guest instance: a tenure, or a restart
//! inside one) takes its change-stream cursor before anything else: where
//! the lease *settled* (recorded by the earlier tenures' renewals and
//! releases: every change up to there was reconciled), or, when none is on
//! record, the stream's head. It reads the stream from there, lists every
//! existing object of its watched kinds (a resync), and from then on
//! queues the key of every change after the cursor. So every change
//! committed after the lease settled reaches the next worker through the
//! stream, a deletion included, and every existing object through the
//! resync.
//!
//! So the rule: every change of a watched kind was followed by a reconcile
//! of its key by that controller that *started* after the change's write
//! (by some tenure, on any host). A deletion the host does not promise is
//! excused, not judged: one written before a worker that started at the
//! head (its `guest ready` line says `resumed: false`: the lease's first
//! worker, or one whose predecessors never recorded a settled position),
//! one in a range of the stream retention trimmed before a worker read it
//! (the worker logs the range and resyncs), and any deletion of a
//! controller whose work queue overflowed (it dropped keys and resynced;
//! it logs that); and with such a deletion, the object's changes before it
//! (since its previous deletion): the object was gone before a resync
//! could list it. Every other change is judged. Evidence of reconciles comes from the hosts' own
//! logs: the worker's `reconciled` line (level trace, JSON log; the rig
//! turns it on for the random schedules), with the controller, object,
//! reason and elapsed time, written when the reconcile ended; its start is
//! the line's time less the elapsed time. Which kinds a controller watches
//! comes from the same logs (`guest ready`, with `watches`), so the rule
//! follows a controller that changes what it watches. A shard of a sharded
//! controller (its `guest ready` line names its `shard`, `I of N`, and the
//! kinds it watches on `every_shard`) is judged only on its own objects:
//! those FNV-1a 64 of `kind/name` puts in shard I, and every object of an
//! every-shard kind. (The rig's controllers declare no shard label.)
//!
//! Times: a change's `at` is the database clock when its write ran, before
//! its `COMMIT`; the hosts stamp their lines with their own clock. The rig
//! runs every process and the server on one machine, so both read the
//! same clock. Comparing with the write's time rather than its commit only
//! weakens the rule (a reconcile that started between the two counts,
//! though it cannot have seen the change); it never raises a false alarm.
//!
//! The end of a run: a change committed a moment before the checker reads
//! may not be reconciled yet. The rig waits, bounded, until every judged
//! change is covered before it checks ([`super::rig::Rig::check`]).
//!
//! # Finalizers
//!
//! The rig's finalizer workload ([`super::rig::Rig::finalizer_workload`])
//! creates objects with a finalizer, deletes them (which must only mark
//! them) and later removes the finalizer (which must remove them), and
//! records what it saw acknowledged ([`Hold`]). The rule, from the change
//! stream (the database's, and the checker's copy of what retention
//! trimmed) and the objects as they are:
//!
//! - an object whose finalizer the workload never set out to remove is
//!   never deleted (no `deleted` change) and still exists;
//! - an object is deleted only after every version the workload saw
//!   acknowledged while its finalizer was on it (a change at that version
//!   comes before the `deleted` one: a store that removed the object when
//!   the delete was asked, yet answered that it was marked, fails here);
//! - no object is left marked for deletion with no finalizer on it (the
//!   write removing its last finalizer must have removed it), whoever set
//!   its finalizers (a guest's too).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

/// One reconcile a host logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    /// The host (holder name) whose log shows it.
    pub host: String,
    /// The controller.
    pub controller: String,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// Why it ran (`change`, `resync`, `requeue`, `retry`).
    pub reason: String,
    /// When it started, microseconds since the Unix epoch (host clock).
    pub started_micros: i64,
}

/// What the hosts' logs show: every reconcile, the kinds each controller
/// watches, and where the host said it could not promise deletions.
#[derive(Debug, Clone, Default)]
pub struct HostLogs {
    /// Every reconcile, host after host.
    pub reconciles: Vec<Reconcile>,
    /// Watched kinds per controller (the union over its guests' `guest
    /// ready` lines).
    pub watches: BTreeMap<String, Vec<String>>,
    /// Per controller, when the latest of its guests that read the change
    /// stream from the head (not resumed from a settled position) was
    /// ready, microseconds since the Unix epoch (host clock).
    pub head_starts: BTreeMap<String, i64>,
    /// Per controller, the ranges of the change stream retention trimmed
    /// before a worker read them: positions strictly between the two.
    pub trimmed: BTreeMap<String, Vec<(u64, u64)>>,
    /// Controllers whose work queue overflowed.
    pub overflowed: BTreeSet<String>,
    /// Per controller (a shard's lease), the shard it runs, `(index,
    /// count)`, from its `guest ready` lines; absent: unsharded.
    pub shards: BTreeMap<String, (u32, u32)>,
    /// Per sharded controller, the kinds every shard watches.
    pub every_shard: BTreeMap<String, Vec<String>>,
}

impl HostLogs {
    /// Add the JSON log of host `host`.
    pub fn add(&mut self, host: &str, log: &str) {
        for line in log.lines() {
            let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(line) else {
                continue;
            };
            let text = |k: &str| fields.get(k).and_then(|v| v.as_str());
            match text("message") {
                Some("reconciled") => {
                    let (Some(controller), Some(object), Some(reason), Some(at), Some(elapsed)) = (
                        text("controller"),
                        text("object"),
                        text("reason"),
                        text("timestamp").and_then(parse_timestamp),
                        text("elapsed").and_then(parse_debug_duration_micros),
                    ) else {
                        continue;
                    };
                    let Some((kind, name)) = object.split_once('/') else {
                        continue;
                    };
                    self.reconciles.push(Reconcile {
                        host: host.to_string(),
                        controller: controller.to_string(),
                        kind: kind.to_string(),
                        name: name.to_string(),
                        reason: reason.to_string(),
                        started_micros: at - elapsed,
                    });
                }
                Some("guest ready") => {
                    let (Some(controller), Some(watches)) = (text("controller"), text("watches"))
                    else {
                        continue;
                    };
                    let resumed = fields.get("resumed").and_then(|v| v.as_bool());
                    if resumed != Some(true)
                        && let Some(at) = text("timestamp").and_then(parse_timestamp)
                    {
                        let latest = self.head_starts.entry(controller.to_string()).or_default();
                        *latest = (*latest).max(at);
                    }
                    let kinds = self.watches.entry(controller.to_string()).or_default();
                    for kind in debug_list(watches) {
                        if !kinds.iter().any(|k| k == kind) {
                            kinds.push(kind.to_string());
                        }
                    }
                    if let Some(shard) = text("shard").and_then(parse_shard) {
                        self.shards.insert(controller.to_string(), shard);
                        let every = self.every_shard.entry(controller.to_string()).or_default();
                        for kind in text("every_shard").map(debug_list).into_iter().flatten() {
                            if !every.iter().any(|k| k == kind) {
                                every.push(kind.to_string());
                            }
                        }
                    }
                }
                Some(
                    "the change stream no longer keeps what followed this worker's cursor; resyncing",
                ) => {
                    let number = |k: &str| fields.get(k).and_then(|v| v.as_u64());
                    if let (Some(controller), Some(cursor), Some(kept)) =
                        (text("controller"), number("cursor"), number("oldest_kept"))
                    {
                        self.trimmed
                            .entry(controller.to_string())
                            .or_default()
                            .push((cursor, kept));
                    }
                }
                Some("the work queue was full and dropped keys; resyncing") => {
                    if let Some(controller) = text("controller") {
                        self.overflowed.insert(controller.to_string());
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether `controller` is woken for the change `c` at all: every
    /// change, unless it is a shard and the object belongs to another shard
    /// (and is not of a kind every shard watches).
    pub fn watches_object(&self, controller: &str, c: &ChangeFact) -> bool {
        let Some(&(index, count)) = self.shards.get(controller) else {
            return true;
        };
        self.every_shard
            .get(controller)
            .is_some_and(|kinds| kinds.contains(&c.kind))
            || leasehold_host::shard::Shard::of(&c.kind, &c.name, count) == index
    }

    /// Why the host does not promise `controller` the deletion `c`, if it
    /// does not (see the module documentation).
    fn excuse(&self, controller: &str, c: &ChangeFact) -> Option<&'static str> {
        if self
            .head_starts
            .get(controller)
            .is_some_and(|at| *at >= c.at_micros)
        {
            Some("before a worker that started at the head")
        } else if self.trimmed.get(controller).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|(after, before)| *after < c.position && c.position < *before)
        }) {
            Some("trimmed before a worker read it")
        } else if self.overflowed.contains(controller) {
            Some("its work queue overflowed")
        } else {
            None
        }
    }
}

/// The items of a list the host logs in `Debug` form, `["a", "b"]`.
fn debug_list(text: &str) -> impl Iterator<Item = &str> {
    text.trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|k| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty())
}

/// A shard as the host logs it, `shard I of N`: `(I, N)`.
fn parse_shard(text: &str) -> Option<(u32, u32)> {
    let (index, count) = text.strip_prefix("shard ")?.split_once(" of ")?;
    Some((index.parse().ok()?, count.parse().ok()?))
}

/// A JSON log line's `timestamp` (RFC 3339, UTC, as the host writes it:
/// `2026-12-01T21:40:00.123456Z`) in microseconds since the Unix epoch.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    let digits: String = fraction.chars().take(6).collect();
    let micros = digits.parse::<i64>().ok()? * 10_i64.pow(6 - digits.len() as u32);
    // Days from the civil date (proleptic Gregorian), after H. Hinnant.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000_000 + s * 1_000_000 + micros)
}

/// A `Duration`'s `Debug` text (`812ns`, `12.5µs`, `1.234567ms`, `2.5s`) in
/// microseconds, rounded up (a start time is never placed later than it
/// was).
pub fn parse_debug_duration_micros(text: &str) -> Option<i64> {
    let (number, per_micro) = if let Some(n) = text.strip_suffix("ns") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("µs") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        return None;
    };
    let value: f64 = number.parse().ok()?;
    Some((value * per_micro).ceil() as i64)
}

/// One change, as the rules need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeFact {
    /// Its position.
    pub position: u64,
    /// When its write ran (database clock), microseconds since the Unix
    /// epoch.
    pub at_micros: i64,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// `created`, `updated` or `deleted`.
    pub change: String,
    /// The version it recorded.
    pub version: u64,
}

/// What [`judge_wake_ups`] found.
#[derive(Debug, Clone, Default)]
pub struct WakeUps {
    /// Changes judged (of a watched kind), deletions included.
    pub judged: usize,
    /// Of those, deletions.
    pub deletions: usize,
    /// Changes of a watched kind the host does not promise, not judged:
    /// deletions (see the module documentation), and the changes before
    /// such a deletion of the same object since its previous one.
    pub excused: usize,
    /// One line per change no reconcile followed.
    pub missed: Vec<String>,
}

/// The wake-up rule (see the module documentation) over `changes` (any
/// order) and what the hosts logged.
pub fn judge_wake_ups(changes: &[ChangeFact], logs: &HostLogs) -> WakeUps {
    // Latest start per (controller, kind, name).
    let mut latest: BTreeMap<(&str, &str, &str), &Reconcile> = BTreeMap::new();
    for r in &logs.reconciles {
        let key = (r.controller.as_str(), r.kind.as_str(), r.name.as_str());
        if latest
            .get(&key)
            .is_none_or(|l| l.started_micros < r.started_micros)
        {
            latest.insert(key, r);
        }
    }
    // Deletions per (kind, name), by position.
    let mut deletions: BTreeMap<(&str, &str), Vec<&ChangeFact>> = BTreeMap::new();
    for c in changes.iter().filter(|c| c.change == "deleted") {
        deletions
            .entry((c.kind.as_str(), c.name.as_str()))
            .or_default()
            .push(c);
    }
    for list in deletions.values_mut() {
        list.sort_by_key(|c| c.position);
    }
    let mut found = WakeUps::default();
    for (controller, kinds) in &logs.watches {
        for c in changes
            .iter()
            .filter(|c| kinds.contains(&c.kind) && logs.watches_object(controller, c))
        {
            // The object's deletion at or after this change: if the host
            // does not promise it, nor this change (the object was gone
            // before a resync could list it).
            let gone = deletions
                .get(&(c.kind.as_str(), c.name.as_str()))
                .and_then(|list| list.iter().find(|d| d.position >= c.position));
            if gone.is_some_and(|d| logs.excuse(controller, d).is_some()) {
                found.excused += 1;
                continue;
            }
            if c.change == "deleted" {
                found.deletions += 1;
            }
            found.judged += 1;
            match latest.get(&(controller.as_str(), c.kind.as_str(), c.name.as_str())) {
                Some(r) if r.started_micros >= c.at_micros => {}
                Some(r) => found.missed.push(format!(
                    "{controller} was not woken by change {} ({} {}/{} v{}, written at {} µs): \
                     its last reconcile of that key ({}, on {}) started {} µs before",
                    c.position,
                    c.change,
                    c.kind,
                    c.name,
                    c.version,
                    c.at_micros,
                    r.reason,
                    r.host,
                    c.at_micros - r.started_micros
                )),
                None => found.missed.push(format!(
                    "{controller} was not woken by change {} ({} {}/{} v{}): no host logged a \
                     reconcile of that key",
                    c.position, c.change, c.kind, c.name, c.version
                )),
            }
        }
    }
    found
}

/// What the finalizer workload did to one object, and saw acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The finalizer it was created with.
    pub finalizer: String,
    /// Versions acknowledged while the finalizer was on it (its creation,
    /// its deletion mark).
    pub held: Vec<u64>,
    /// Whether the workload set out to remove the finalizer (set before
    /// the request is sent: it may land unacknowledged).
    pub removal_sent: bool,
}

/// The finalizer workload's records, shared with its task.
#[derive(Debug, Clone, Default)]
pub struct Holds(Arc<Mutex<BTreeMap<(String, String), Hold>>>);

impl Holds {
    /// Change (or start) the record of `kind/name`.
    pub fn update(&self, kind: &str, name: &str, finalizer: &str, f: impl FnOnce(&mut Hold)) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let hold = all
            .entry((kind.to_string(), name.to_string()))
            .or_insert_with(|| Hold {
                kind: kind.to_string(),
                name: name.to_string(),
                finalizer: finalizer.to_string(),
                held: Vec::new(),
                removal_sent: false,
            });
        f(hold);
    }

    /// Every record.
    pub fn all(&self) -> Vec<Hold> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

/// An object as it is, for [`judge_finalizers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFact {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Its version.
    pub version: u64,
    /// Its finalizers.
    pub finalizers: Vec<String>,
    /// Whether a delete marked it.
    pub marked: bool,
}

/// The finalizer rule (see the module documentation). `whole`: `changes`
/// holds every change committed (false when the checker's copy of what
/// retention trimmed has gaps): only then is an acknowledged version with
/// no change before the deletion and none after it a violation (its change
/// may lie in a gap); one whose change comes after the deletion always
/// is.
pub fn judge_finalizers(
    holds: &[Hold],
    changes: &[ChangeFact],
    objects: &[ObjectFact],
    whole: bool,
) -> Vec<String> {
    let mut found = Vec::new();
    let by_key: BTreeMap<(&str, &str), &ObjectFact> = objects
        .iter()
        .map(|o| ((o.kind.as_str(), o.name.as_str()), o))
        .collect();
    for hold in holds {
        let key = format!("{}/{}", hold.kind, hold.name);
        let mut own: Vec<&ChangeFact> = changes
            .iter()
            .filter(|c| c.kind == hold.kind && c.name == hold.name)
            .collect();
        own.sort_by_key(|c| c.position);
        let deleted = own.iter().position(|c| c.change == "deleted");
        let object = by_key.get(&(hold.kind.as_str(), hold.name.as_str()));
        if !hold.removal_sent {
            if let Some(i) = deleted {
                found.push(format!(
                    "{key} was deleted (change {}) while its finalizer {} was on it: nobody \
                     removed it",
                    own[i].position, hold.finalizer
                ));
            } else if object.is_none() && !hold.held.is_empty() {
                found.push(format!(
                    "{key} is gone while its finalizer {} was on it: nobody removed it",
                    hold.finalizer
                ));
            }
            if let Some(o) = object
                && !o.finalizers.contains(&hold.finalizer)
            {
                found.push(format!(
                    "{key} (version {}) lost its finalizer {}, which nobody removed: it shows {:?}",
                    o.version, hold.finalizer, o.finalizers
                ));
            }
            continue;
        }
        let Some(i) = deleted else {
            continue;
        };
        for v in &hold.held {
            let before = own[..i].iter().any(|c| c.version == *v);
            let after = own[i + 1..].iter().any(|c| c.version == *v);
            if !before && (after || whole) {
                found.push(format!(
                    "{key} was deleted (change {}, at version {}) before version {v}, which was \
                     acknowledged with its finalizer {} on it",
                    own[i].position, own[i].version, hold.finalizer
                ));
            }
        }
    }
    for o in objects {
        if o.marked && o.finalizers.is_empty() {
            found.push(format!(
                "{}/{} (version {}) is marked for deletion with no finalizer left, yet still \
                 exists",
                o.kind, o.name, o.version
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(position: u64, at: i64, name: &str, change: &str, version: u64) -> ChangeFact {
        ChangeFact {
            position,
            at_micros: at,
            kind: "tasks".into(),
            name: name.into(),
            change: change.into(),
            version,
        }
    }

    fn reconcile(name: &str, started: i64) -> Reconcile {
        Reconcile {
            host: "host-0".into(),
            controller: "scheduler".into(),
            kind: "tasks".into(),
            name: name.into(),
            reason: "change".into(),
            started_micros: started,
        }
    }

    fn logs(reconciles: Vec<Reconcile>) -> HostLogs {
        HostLogs {
            reconciles,
            watches: BTreeMap::from([("scheduler".into(), vec!["tasks".into()])]),
            ..HostLogs::default()
        }
    }

    #[test]
    fn host_log_lines_are_read() {
        let log = concat!(
            r#"{"timestamp":"2026-12-01T21:40:00.500000Z","level":"INFO","message":"guest ready","controller":"scheduler","epoch":3,"watches":"[\"nodes\", \"tasks\"]","target":"leasehold_host::supervisor::worker"}"#,
            "\n",
            r#"{"timestamp":"2026-12-01T21:40:01.000000Z","level":"TRACE","message":"reconciled","controller":"scheduler","object":"tasks/t-1","reason":"resync","elapsed":"1.5ms","target":"leasehold_host::supervisor::worker"}"#,
            "\nnot json\n"
        );
        let mut logs = HostLogs::default();
        logs.add("host-1", log);
        assert_eq!(
            logs.watches["scheduler"],
            vec!["nodes".to_string(), "tasks".to_string()]
        );
        let at = parse_timestamp("2026-12-01T21:40:01Z").unwrap();
        assert_eq!(
            logs.reconciles,
            vec![Reconcile {
                host: "host-1".into(),
                controller: "scheduler".into(),
                kind: "tasks".into(),
                name: "t-1".into(),
                reason: "resync".into(),
                started_micros: at - 1_500,
            }]
        );
        // 2026-12-01T00:00:00Z, by `date -d ... +%s`.
        assert_eq!(
            parse_timestamp("2026-12-01T00:00:00.000001Z"),
            Some(1_796_083_200_000_001)
        );
        assert_eq!(parse_debug_duration_micros("812ns"), Some(1));
        assert_eq!(parse_debug_duration_micros("12.5µs"), Some(13));
        assert_eq!(parse_debug_duration_micros("2.5s"), Some(2_500_000));
    }

    #[test]
    fn a_change_followed_by_a_reconcile_of_its_key_is_clean() {
        let changes = [
            change(3, 100, "a", "created", 3),
            change(5, 200, "a", "updated", 5),
        ];
        let found = judge_wake_ups(&changes, &logs(vec![reconcile("a", 250)]));
        assert!(found.missed.is_empty(), "{:?}", found.missed);
        assert_eq!(found.judged, 2);
    }

    /// The hand-made broken history: a change whose key was reconciled
    /// only before it was written (a worker that lost the wake-up), and one
    /// never reconciled at all.
    #[test]
    fn a_missed_wake_up_is_caught() {
        let changes = [
            change(3, 100, "a", "created", 3),
            change(5, 200, "a", "updated", 5),
            change(7, 300, "b", "created", 7),
        ];
        let found = judge_wake_ups(&changes, &logs(vec![reconcile("a", 150)]));
        assert_eq!(found.missed.len(), 2, "{:?}", found.missed);
        assert!(found.missed[0].contains("change 5"), "{:?}", found.missed);
        assert!(found.missed[1].contains("change 7"), "{:?}", found.missed);
        assert!(
            found.missed[1].contains("no host logged"),
            "{:?}",
            found.missed
        );
    }

    /// A deletion is judged like any change: the hand-made broken history
    /// is a successor that resynced (the object was gone) but never read
    /// the stream from where its predecessor settled.
    #[test]
    fn a_deletion_no_reconcile_followed_is_caught() {
        let changes = [
            change(3, 100, "a", "created", 3),
            change(5, 200, "a", "deleted", 3),
        ];
        let found = judge_wake_ups(&changes, &logs(vec![reconcile("a", 150)]));
        assert_eq!(found.missed.len(), 1, "{:?}", found.missed);
        assert!(found.missed[0].contains("deleted"), "{:?}", found.missed);
        let found = judge_wake_ups(&changes, &logs(vec![reconcile("a", 250)]));
        assert!(found.missed.is_empty(), "{:?}", found.missed);
        assert_eq!((found.judged, found.deletions, found.excused), (2, 1, 0));
    }

    /// What the host does not promise: a deletion before a worker that
    /// started at the head, one in a range retention trimmed before a
    /// worker read it, and any once the work queue overflowed.
    #[test]
    fn deletions_the_host_does_not_promise_are_excused() {
        let changes = [
            change(3, 100, "a", "created", 3),
            change(5, 200, "a", "deleted", 3),
            change(9, 400, "b", "deleted", 7),
        ];
        let mut l = logs(vec![reconcile("a", 150), reconcile("b", 150)]);
        assert_eq!(judge_wake_ups(&changes, &l).missed.len(), 2);
        l.head_starts.insert("scheduler".into(), 300);
        let found = judge_wake_ups(&changes, &l);
        assert_eq!(
            found.excused, 2,
            "a's deletion came before the head start, and its creation with it"
        );
        assert_eq!(found.missed.len(), 1, "{:?}", found.missed);
        assert!(found.missed[0].contains("change 9"), "{:?}", found.missed);
        l.trimmed.insert("scheduler".into(), vec![(8, 10)]);
        let found = judge_wake_ups(&changes, &l);
        assert!(found.missed.is_empty(), "{:?}", found.missed);
        assert_eq!(found.excused, 3);
        let mut l = logs(vec![reconcile("a", 150), reconcile("b", 150)]);
        l.overflowed.insert("scheduler".into());
        assert_eq!(judge_wake_ups(&changes, &l).excused, 3);
        // An object created and deleted before a worker that started at the
        // head was never reconciled: its creation is excused with its
        // deletion; a later creation of the same name is judged.
        let changes = [
            change(3, 100, "c", "created", 3),
            change(4, 120, "c", "deleted", 3),
            change(6, 500, "c", "created", 6),
        ];
        let mut l = logs(Vec::new());
        l.head_starts.insert("scheduler".into(), 300);
        let found = judge_wake_ups(&changes, &l);
        assert_eq!(found.excused, 2);
        assert_eq!(found.missed.len(), 1, "{:?}", found.missed);
        assert!(found.missed[0].contains("change 6"), "{:?}", found.missed);
    }

    /// A shard is judged only on its own objects (by kind/name) and on
    /// every object of an every-shard kind, as its `guest ready` line
    /// says; a change of its own object it missed is caught.
    #[test]
    fn a_shard_is_judged_on_its_own_objects_only() {
        let log = concat!(
            r#"{"timestamp":"2026-12-01T21:40:00.500000Z","level":"INFO","message":"guest ready","controller":"scheduler-0","epoch":1,"resumed":false,"from":1,"head":1,"shard":"shard 0 of 4","every_shard":"[\"nodes\"]","watches":"[\"tasks\", \"nodes\"]"}"#,
            "\n"
        );
        let mut l = HostLogs::default();
        l.add("host-0", log);
        assert_eq!(l.shards["scheduler-0"], (0, 4));
        assert_eq!(l.every_shard["scheduler-0"], ["nodes"]);
        // tasks/t-1 is in shard 0 of 4, tasks/t-2 in shard 1, and every
        // node is every shard's.
        let mut node = change(7, 2_000_000_000_000_000, "n-1", "updated", 7);
        node.kind = "nodes".into();
        let changes = [
            change(3, 2_000_000_000_000_000, "t-1", "created", 3),
            change(5, 2_000_000_000_000_000, "t-2", "created", 5),
            node,
        ];
        let found = judge_wake_ups(&changes, &l);
        assert_eq!(found.judged, 2, "t-1 and the node; t-2 is shard 1's");
        assert_eq!(found.missed.len(), 2, "{:?}", found.missed);
        assert!(found.missed[0].contains("change 3"), "{:?}", found.missed);
        assert!(found.missed[1].contains("change 7"), "{:?}", found.missed);
        // An unsharded controller is judged on every object.
        let mut whole = l.clone();
        whole.shards.clear();
        assert_eq!(judge_wake_ups(&changes, &whole).judged, 3);
    }

    #[test]
    fn the_lines_that_excuse_deletions_are_read() {
        let log = concat!(
            r#"{"timestamp":"2026-12-01T21:40:00.500000Z","level":"INFO","message":"guest ready","controller":"scheduler","epoch":3,"resumed":false,"from":7,"head":7,"watches":"[\"tasks\"]"}"#,
            "\n",
            r#"{"timestamp":"2026-12-01T21:40:02.000000Z","level":"INFO","message":"guest ready","controller":"scheduler","epoch":4,"resumed":true,"from":12,"head":30,"watches":"[\"tasks\"]"}"#,
            "\n",
            r#"{"timestamp":"2026-12-01T21:40:03.000000Z","level":"WARN","message":"the change stream no longer keeps what followed this worker's cursor; resyncing","controller":"scheduler","cursor":12,"oldest_kept":20}"#,
            "\n",
            r#"{"timestamp":"2026-12-01T21:40:04.000000Z","level":"WARN","message":"the work queue was full and dropped keys; resyncing","controller":"other","max_queue":10}"#,
        );
        let mut l = HostLogs::default();
        l.add("host-1", log);
        assert_eq!(
            l.head_starts["scheduler"],
            parse_timestamp("2026-12-01T21:40:00.5Z").unwrap(),
            "only the worker that started at the head"
        );
        assert_eq!(l.trimmed["scheduler"], [(12, 20)]);
        assert!(l.overflowed.contains("other") && l.overflowed.len() == 1);
    }

    fn claim(position: u64, change: &str, version: u64) -> ChangeFact {
        ChangeFact {
            kind: "claims".into(),
            ..self::change(position, 0, "c", change, version)
        }
    }

    fn hold(held: Vec<u64>, removal_sent: bool) -> Hold {
        Hold {
            kind: "claims".into(),
            name: "c".into(),
            finalizer: "test/hold".into(),
            held,
            removal_sent,
        }
    }

    fn object(finalizers: &[&str], marked: bool) -> ObjectFact {
        ObjectFact {
            kind: "claims".into(),
            name: "c".into(),
            version: 4,
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            marked,
        }
    }

    #[test]
    fn finalizers_kept_until_removed_are_clean() {
        // Created, marked, still held.
        let changes = [claim(2, "created", 2), claim(4, "updated", 4)];
        let found = judge_finalizers(
            &[hold(vec![2, 4], false)],
            &changes,
            &[object(&["test/hold"], true)],
            true,
        );
        assert!(found.is_empty(), "{found:?}");
        // Then the finalizer removed, and the object with it.
        let changes = [
            claim(2, "created", 2),
            claim(4, "updated", 4),
            claim(6, "deleted", 4),
        ];
        let found = judge_finalizers(&[hold(vec![2, 4], true)], &changes, &[], true);
        assert!(found.is_empty(), "{found:?}");
    }

    /// The hand-made broken histories: the delete removed the object at
    /// once though it answered "marked" (no change at the marked version
    /// before the deletion); an object deleted, or gone, while nobody
    /// removed its finalizer; one marked with no finalizer left.
    #[test]
    fn an_object_removed_while_a_finalizer_was_on_it_is_caught() {
        let early = [claim(2, "created", 2), claim(4, "deleted", 2)];
        let found = judge_finalizers(&[hold(vec![2, 4], true)], &early, &[], true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("before version 4"), "{found:?}");

        let found = judge_finalizers(&[hold(vec![2, 4], false)], &early, &[], true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("nobody removed it"), "{found:?}");

        // The changes trimmed away: the object table still tells.
        let found = judge_finalizers(&[hold(vec![2], false)], &[], &[], true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("is gone"), "{found:?}");

        let found = judge_finalizers(&[], &[], &[object(&[], true)], true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("no finalizer left"), "{found:?}");
    }

    /// With gaps in the changes (a copy whose reader fell behind
    /// retention), an acknowledged version with no change at all may lie
    /// in a gap and is not judged; one whose change comes after the
    /// deletion is still caught.
    #[test]
    fn a_gap_excuses_only_a_missing_version() {
        // Version 4's change is in a gap; the deletion follows.
        let gapped = [claim(2, "created", 2), claim(6, "deleted", 4)];
        let found = judge_finalizers(&[hold(vec![2, 4], true)], &gapped, &[], false);
        assert!(found.is_empty(), "{found:?}");
        let found = judge_finalizers(&[hold(vec![2, 4], true)], &gapped, &[], true);
        assert_eq!(found.len(), 1, "{found:?}");
        // Version 4 known, but after the deletion: caught, gaps or not.
        let late = [
            claim(2, "created", 2),
            claim(3, "deleted", 2),
            claim(5, "updated", 4),
        ];
        let found = judge_finalizers(&[hold(vec![2, 4], true)], &late, &[], false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("before version 4"), "{found:?}");
    }
}
