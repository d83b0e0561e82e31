//! The invariant checker: reads one cluster's record straight from
//! PostgreSQL (leases, tenures, objects, events — never a host's API or
//! memory) and lists every way it breaks the guarantees Leasehold makes.
//!
//! What it checks, and why each check is sound:
//!
//! - **Tenures** ([`Rule::Tenures`], [`Rule::Overlap`]): each lease's
//!   tenures carry epochs 1, 2, ... without a gap (L1), only the newest may
//!   be open, the lease row shows the newest, and a tenure ends no later
//!   than the next one is granted (L2), all in database time.
//! - **Epoch current at commit** ([`Rule::StaleEpoch`]): every write a
//!   guest made — each event and object stamped with a lease and epoch, and
//!   each tenure's `last_write_at` — happened at or after its own epoch's
//!   grant and strictly before the next epoch's grant, by the holder of that
//!   epoch. The write's time is `clock_timestamp()` inside its own
//!   transaction, before its `COMMIT`; a grant waits for in-flight fenced
//!   writes (L4), so a write stamped at or after the next grant committed
//!   after it: the one thing fencing exists to prevent.
//! - **History is accurate** ([`Rule::WriteCount`]): a tenure's `writes`
//!   counts at least the commits attributed to it (L6).
//! - **Event log** ([`Rule::EventLog`]): sequence numbers are 1..n.
//! - **Scheduler** ([`Rule::DoubleAssignment`], [`Rule::Assignment`],
//!   [`Rule::Capacity`]): a task has at most one `Assigned` event; a task
//!   shown assigned has exactly one, naming the same node, and a task with
//!   one is shown assigned; no node holds more tasks than its capacity,
//!   counted both from the task objects and from the `Assigned` events (the
//!   suite never finishes tasks, so every event still holds its slot).
//! - **Acknowledged writes** ([`Rule::LostAck`]): every API write the test
//!   saw acknowledged is present, at its acknowledged version or later,
//!   with every field it wrote except those the scheduler owns (`status`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

/// One API write the test saw acknowledged (`200` or `201`).
#[derive(Debug, Clone)]
pub struct Ack {
    /// Object kind.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// The version the API answered.
    pub version: u64,
    /// The value written.
    pub value: Value,
}

/// The acknowledgements of one test, shared with its workload tasks.
#[derive(Debug, Clone, Default)]
pub struct Acks(Arc<Mutex<Vec<Ack>>>);

impl Acks {
    /// Record one.
    pub fn record(&self, ack: Ack) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ack);
    }

    /// Everything recorded so far.
    pub fn all(&self) -> Vec<Ack> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many were recorded.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether none was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which guarantee a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// Epochs not 1..n, more than one open tenure, or the lease row
    /// disagreeing with the newest tenure.
    Tenures,
    /// A tenure ended after the next one was granted.
    Overlap,
    /// A guest write whose epoch was not current when it was made.
    StaleEpoch,
    /// A tenure's write count below the commits attributed to it.
    WriteCount,
    /// Event sequence numbers with a gap.
    EventLog,
    /// A task assigned more than once.
    DoubleAssignment,
    /// A task object and the `Assigned` events disagree.
    Assignment,
    /// A node holding more tasks than its capacity.
    Capacity,
    /// An acknowledged API write is missing or was overwritten.
    LostAck,
}

/// One broken guarantee, with the rows that show it.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which guarantee.
    pub rule: Rule,
    /// What the database shows.
    pub detail: String,
}

/// Everything the checker found, and what it looked at.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Broken guarantees; empty when the record is clean.
    pub violations: Vec<Violation>,
    /// Tenures per lease.
    pub tenures: BTreeMap<String, usize>,
    /// Events and objects stamped with a lease and epoch.
    pub guest_writes: usize,
    /// Events in the log.
    pub events: usize,
    /// Task objects.
    pub tasks: usize,
    /// Task objects shown assigned.
    pub assigned: usize,
    /// Acknowledged API writes checked.
    pub acks: usize,
}

impl Report {
    /// Whether some violation breaks `rule`.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    /// Panic, listing every violation, unless the record is clean.
    pub fn assert_clean(&self, context: &str) {
        assert!(
            self.violations.is_empty(),
            "{context}: the invariant checker found violations:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked tenures {:?}, {} events, {} guest writes, {} tasks ({} assigned), {} acknowledged writes: {} violation(s)",
            self.tenures,
            self.events,
            self.guest_writes,
            self.tasks,
            self.assigned,
            self.acks,
            self.violations.len()
        )?;
        for v in &self.violations {
            writeln!(f, "  [{:?}] {}", v.rule, v.detail)?;
        }
        Ok(())
    }
}

/// A database time: microseconds since the Unix epoch (for comparing) and
/// the server's own text (for messages).
#[derive(Debug, Clone)]
struct At {
    micros: i64,
    text: String,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn at(row: &tokio_postgres::Row, micros: usize) -> At {
    At {
        micros: row.get(micros),
        text: row.get(micros + 1),
    }
}

fn at_opt(row: &tokio_postgres::Row, micros: usize) -> Option<At> {
    Some(At {
        micros: row.get::<_, Option<i64>>(micros)?,
        text: row.get::<_, Option<String>>(micros + 1)?,
    })
}

/// `column` as (microseconds, text): two result columns.
fn time_columns(column: &str) -> String {
    format!(
        "(extract(epoch FROM {column}) * 1000000)::int8, \
         to_char({column} AT TIME ZONE 'UTC', 'HH24:MI:SS.US')"
    )
}

#[derive(Debug)]
struct Tenure {
    epoch: i64,
    holder: String,
    acquired_at: At,
    ended_at: Option<At>,
    end_reason: Option<String>,
    writes: i64,
    last_write_at: Option<At>,
}

#[derive(Debug)]
struct LeaseRow {
    holder: String,
    epoch: i64,
    acquired_at: At,
}

/// A write stamped with a lease and epoch.
struct GuestWrite<'a> {
    what: String,
    lease: &'a str,
    epoch: i64,
    holder: &'a str,
    at: &'a At,
}

/// Check `cluster` in the database at `url` against everything in the
/// module documentation; `acks` are the API writes the test saw
/// acknowledged.
pub async fn check(url: &str, cluster: &str, acks: &[Ack]) -> Report {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the checker connects to the test database");
    let connection = tokio::spawn(connection);
    let report = Checker::load(&client, cluster).await.run(acks);
    drop(client);
    let _ = connection.await;
    report
}

struct EventRow {
    seq: i64,
    revision: i64,
    at: At,
    kind: String,
    name: String,
    reason: String,
    message: String,
    lease: Option<String>,
    epoch: Option<i64>,
    holder: Option<String>,
}

struct ObjectRow {
    kind: String,
    name: String,
    version: i64,
    value: Value,
    updated_at: At,
    lease: Option<String>,
    epoch: Option<i64>,
    holder: Option<String>,
}

struct Checker {
    leases: BTreeMap<String, LeaseRow>,
    tenures: BTreeMap<String, Vec<Tenure>>,
    events: Vec<EventRow>,
    objects: Vec<ObjectRow>,
    report: Report,
}

impl Checker {
    async fn load(client: &tokio_postgres::Client, cluster: &str) -> Self {
        let leases = client
            .query(
                &format!(
                    "SELECT name, holder, epoch, {} FROM leasehold_leases WHERE cluster = $1",
                    time_columns("acquired_at")
                ),
                &[&cluster],
            )
            .await
            .expect("read leases")
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    LeaseRow {
                        holder: r.get(1),
                        epoch: r.get(2),
                        acquired_at: at(r, 3),
                    },
                )
            })
            .collect();
        let mut tenures: BTreeMap<String, Vec<Tenure>> = BTreeMap::new();
        for r in client
            .query(
                &format!(
                    "SELECT lease, epoch, holder, {}, {}, end_reason, writes, {}
                       FROM leasehold_tenures WHERE cluster = $1 ORDER BY lease, epoch",
                    time_columns("acquired_at"),
                    time_columns("ended_at"),
                    time_columns("last_write_at"),
                ),
                &[&cluster],
            )
            .await
            .expect("read tenures")
        {
            tenures.entry(r.get(0)).or_default().push(Tenure {
                epoch: r.get(1),
                holder: r.get(2),
                acquired_at: at(&r, 3),
                ended_at: at_opt(&r, 5),
                end_reason: r.get(7),
                writes: r.get(8),
                last_write_at: at_opt(&r, 9),
            });
        }
        let events = client
            .query(
                &format!(
                    "SELECT seq, revision, {}, kind, name, reason, message, lease, epoch, holder
                       FROM leasehold_events WHERE cluster = $1 ORDER BY seq",
                    time_columns("at")
                ),
                &[&cluster],
            )
            .await
            .expect("read events")
            .iter()
            .map(|r| EventRow {
                seq: r.get(0),
                revision: r.get(1),
                at: at(r, 2),
                kind: r.get(4),
                name: r.get(5),
                reason: r.get(6),
                message: r.get(7),
                lease: r.get(8),
                epoch: r.get(9),
                holder: r.get(10),
            })
            .collect();
        let objects = client
            .query(
                &format!(
                    "SELECT kind, name, version, value, {}, lease, epoch, holder
                       FROM leasehold_objects WHERE cluster = $1 ORDER BY kind, name",
                    time_columns("updated_at")
                ),
                &[&cluster],
            )
            .await
            .expect("read objects")
            .iter()
            .map(|r| ObjectRow {
                kind: r.get(0),
                name: r.get(1),
                version: r.get(2),
                value: serde_json::from_str(r.get::<_, &str>(3)).unwrap_or(Value::Null),
                updated_at: at(r, 4),
                lease: r.get(6),
                epoch: r.get(7),
                holder: r.get(8),
            })
            .collect();
        Self {
            leases,
            tenures,
            events,
            objects,
            report: Report::default(),
        }
    }

    fn violation(&mut self, rule: Rule, detail: String) {
        self.report.violations.push(Violation { rule, detail });
    }

    fn run(mut self, acks: &[Ack]) -> Report {
        self.check_tenures();
        self.check_writes();
        self.check_event_log();
        self.check_scheduler();
        self.check_acks(acks);
        self.report.tenures = self
            .tenures
            .iter()
            .map(|(lease, t)| (lease.clone(), t.len()))
            .collect();
        self.report.events = self.events.len();
        self.report.violations.sort_by_key(|v| v.rule);
        self.report
    }

    fn check_tenures(&mut self) {
        let mut found = Vec::new();
        for (lease, tenures) in &self.tenures {
            for (i, t) in tenures.iter().enumerate() {
                if t.epoch != i as i64 + 1 {
                    found.push((
                        Rule::Tenures,
                        format!(
                            "lease {lease}: tenure #{} has epoch {} (epochs must be 1, 2, ... without gaps)",
                            i + 1,
                            t.epoch
                        ),
                    ));
                }
                let Some(next) = tenures.get(i + 1) else {
                    continue;
                };
                if next.acquired_at.micros <= t.acquired_at.micros {
                    found.push((
                        Rule::Overlap,
                        format!(
                            "lease {lease}: epoch {} was granted at {}, not after epoch {} at {}",
                            next.epoch, next.acquired_at, t.epoch, t.acquired_at
                        ),
                    ));
                }
                match &t.ended_at {
                    None => found.push((
                        Rule::Overlap,
                        format!(
                            "lease {lease}: epoch {} ({}) is still open although epoch {} was granted at {}",
                            t.epoch, t.holder, next.epoch, next.acquired_at
                        ),
                    )),
                    Some(end) if end.micros > next.acquired_at.micros => found.push((
                        Rule::Overlap,
                        format!(
                            "lease {lease}: epoch {} ({}) ended at {end} ({}), after epoch {} ({}) was granted at {}",
                            t.epoch,
                            t.holder,
                            t.end_reason.as_deref().unwrap_or("?"),
                            next.epoch,
                            next.holder,
                            next.acquired_at
                        ),
                    )),
                    Some(_) => {}
                }
            }
            match (self.leases.get(lease), tenures.last()) {
                (Some(row), Some(newest))
                    if row.epoch != newest.epoch
                        || row.holder != newest.holder
                        || row.acquired_at.micros != newest.acquired_at.micros =>
                {
                    found.push((
                        Rule::Tenures,
                        format!(
                            "lease {lease}: the lease row shows epoch {} ({}, granted {}), the newest tenure epoch {} ({}, granted {})",
                            row.epoch,
                            row.holder,
                            row.acquired_at,
                            newest.epoch,
                            newest.holder,
                            newest.acquired_at
                        ),
                    ));
                }
                (None, Some(_)) => found.push((
                    Rule::Tenures,
                    format!("lease {lease} has tenures but no lease row"),
                )),
                _ => {}
            }
        }
        for (lease, row) in &self.leases {
            if !self.tenures.contains_key(lease) {
                found.push((
                    Rule::Tenures,
                    format!(
                        "lease {lease}: the row shows epoch {} ({}) but no tenure was recorded",
                        row.epoch, row.holder
                    ),
                ));
            }
        }
        for (rule, detail) in found {
            self.violation(rule, detail);
        }
    }

    /// Judge one guest write against the tenures of its lease.
    fn judge(&self, write: &GuestWrite<'_>) -> Option<String> {
        let GuestWrite {
            what,
            lease,
            epoch,
            holder,
            at,
        } = write;
        let Some(tenures) = self.tenures.get(*lease) else {
            return Some(format!(
                "{what} by {lease} epoch {epoch} ({holder}) at {at}: lease {lease} was never granted"
            ));
        };
        let Some(tenure) = tenures.iter().find(|t| t.epoch == *epoch) else {
            return Some(format!(
                "{what} by {lease} epoch {epoch} ({holder}) at {at}: epoch {epoch} was never granted"
            ));
        };
        if tenure.holder != *holder {
            return Some(format!(
                "{what} by {lease} epoch {epoch} at {at} is attributed to {holder}, but {} held epoch {epoch}",
                tenure.holder
            ));
        }
        if at.micros < tenure.acquired_at.micros {
            return Some(format!(
                "{what} by {lease} epoch {epoch} ({holder}) at {at}, before epoch {epoch} was granted at {}",
                tenure.acquired_at
            ));
        }
        if let Some(next) = tenures.iter().find(|t| t.epoch == epoch + 1)
            && at.micros >= next.acquired_at.micros
        {
            return Some(format!(
                "{what} by {lease} epoch {epoch} ({holder}) at {at}, after epoch {} was granted to {} at {}",
                next.epoch, next.holder, next.acquired_at
            ));
        }
        None
    }

    fn check_writes(&mut self) {
        let mut writes: Vec<GuestWrite<'_>> = Vec::new();
        // Distinct commits (revisions) attributed to each tenure.
        let mut commits: HashMap<(&str, i64), BTreeSet<i64>> = HashMap::new();
        let mut found = Vec::new();
        for e in &self.events {
            match (&e.lease, e.epoch, &e.holder) {
                (Some(lease), Some(epoch), Some(holder)) => {
                    commits
                        .entry((lease.as_str(), epoch))
                        .or_default()
                        .insert(e.revision);
                    writes.push(GuestWrite {
                        what: format!(
                            "event {} ({} {}/{}, revision {})",
                            e.seq, e.reason, e.kind, e.name, e.revision
                        ),
                        lease,
                        epoch,
                        holder,
                        at: &e.at,
                    });
                }
                (None, None, None) => {}
                _ => found.push((
                    Rule::StaleEpoch,
                    format!("event {} has a partial attribution", e.seq),
                )),
            }
        }
        for o in &self.objects {
            match (&o.lease, o.epoch, &o.holder) {
                (Some(lease), Some(epoch), Some(holder)) => {
                    commits
                        .entry((lease.as_str(), epoch))
                        .or_default()
                        .insert(o.version);
                    writes.push(GuestWrite {
                        what: format!("object {}/{} version {}", o.kind, o.name, o.version),
                        lease,
                        epoch,
                        holder,
                        at: &o.updated_at,
                    });
                }
                (None, None, None) => {}
                _ => found.push((
                    Rule::StaleEpoch,
                    format!("object {}/{} has a partial attribution", o.kind, o.name),
                )),
            }
        }
        let mut tenure_writes = 0;
        for (lease, tenures) in &self.tenures {
            for t in tenures {
                if let Some(last) = &t.last_write_at {
                    tenure_writes += 1;
                    writes.push(GuestWrite {
                        what: format!("the last of {} write(s) counted for the tenure", t.writes),
                        lease,
                        epoch: t.epoch,
                        holder: &t.holder,
                        at: last,
                    });
                }
                let attributed = commits
                    .get(&(lease.as_str(), t.epoch))
                    .map_or(0, BTreeSet::len);
                if (t.writes as usize) < attributed {
                    found.push((
                        Rule::WriteCount,
                        format!(
                            "lease {lease} epoch {} ({}) counts {} write(s), but {attributed} commit(s) are attributed to it",
                            t.epoch, t.holder, t.writes
                        ),
                    ));
                }
            }
        }
        // Events and objects; the tenures' own counters came last.
        self.report.guest_writes = writes.len() - tenure_writes;
        for write in &writes {
            if let Some(detail) = self.judge(write) {
                found.push((Rule::StaleEpoch, detail));
            }
        }
        drop(writes);
        for (rule, detail) in found {
            self.violation(rule, detail);
        }
    }

    fn check_event_log(&mut self) {
        let gaps: Vec<String> = self
            .events
            .iter()
            .enumerate()
            .filter(|(i, e)| e.seq != *i as i64 + 1)
            .take(5)
            .map(|(i, e)| format!("event #{} has seq {}", i + 1, e.seq))
            .collect();
        for gap in gaps {
            self.violation(Rule::EventLog, gap);
        }
    }

    fn check_scheduler(&mut self) {
        let mut found = Vec::new();
        // Assigned events per task.
        let mut assigned: BTreeMap<&str, Vec<Assignment>> = BTreeMap::new();
        for e in &self.events {
            if e.kind == "tasks" && e.reason == "Assigned" {
                assigned.entry(&e.name).or_default().push((
                    e.seq,
                    e.epoch,
                    assigned_node(&e.message).unwrap_or_default(),
                ));
            }
        }
        for (task, events) in &assigned {
            if events.len() > 1 {
                // What the API did to the task meanwhile (a client that
                // re-submitted it as pending, say), to tell a scheduler
                // bug from a client's doing.
                let (first, last) = (events[0].0, events[events.len() - 1].0);
                let meanwhile: Vec<String> = self
                    .events
                    .iter()
                    .filter(|e| {
                        e.kind == "tasks"
                            && e.name == *task
                            && e.lease.is_none()
                            && e.seq > first
                            && e.seq < last
                    })
                    .map(|e| format!("event {} {} by the API", e.seq, e.reason))
                    .collect();
                found.push((
                    Rule::DoubleAssignment,
                    format!(
                        "task {task} was assigned {} times: {}{}",
                        events.len(),
                        events
                            .iter()
                            .map(|(seq, epoch, node)| format!(
                                "event {seq} at epoch {} to {node}",
                                epoch.unwrap_or_default()
                            ))
                            .collect::<Vec<_>>()
                            .join(", "),
                        if meanwhile.is_empty() {
                            String::new()
                        } else {
                            format!(" (in between: {})", meanwhile.join(", "))
                        }
                    ),
                ));
            }
        }
        let capacity: BTreeMap<&str, (u64, Option<u64>)> = self
            .objects
            .iter()
            .filter(|o| o.kind == "nodes")
            .filter_map(|o| {
                Some((
                    o.name.as_str(),
                    (o.value["capacity"].as_u64()?, o.value["assigned"].as_u64()),
                ))
            })
            .collect();
        let mut by_objects: BTreeMap<String, u64> = BTreeMap::new();
        let tasks: Vec<&ObjectRow> = self.objects.iter().filter(|o| o.kind == "tasks").collect();
        self.report.tasks = tasks.len();
        for task in &tasks {
            let events = assigned.get(task.name.as_str());
            match task.value["status"].as_str() {
                Some("assigned") => {
                    self.report.assigned += 1;
                    let node = task.value["node"].as_str().unwrap_or_default().to_string();
                    *by_objects.entry(node.clone()).or_default() += 1;
                    match events.map(Vec::as_slice) {
                        None | Some([]) => found.push((
                            Rule::Assignment,
                            format!(
                                "task {} is assigned to {node} but no Assigned event records it",
                                task.name
                            ),
                        )),
                        Some([(seq, _, event_node), ..]) if *event_node != node => found.push((
                            Rule::Assignment,
                            format!(
                                "task {} is assigned to {node} but event {seq} assigned it to {event_node}",
                                task.name
                            ),
                        )),
                        Some(_) => {}
                    }
                }
                _ => {
                    if let Some([(seq, _, node), ..]) = events.map(Vec::as_slice) {
                        found.push((
                            Rule::Assignment,
                            format!(
                                "event {seq} assigned task {} to {node}, but the task shows {}",
                                task.name, task.value
                            ),
                        ));
                    }
                }
            }
        }
        let mut by_events: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for (task, events) in &assigned {
            for (_, _, node) in events {
                by_events.entry(node.clone()).or_default().insert(task);
            }
        }
        for (node, (cap, counter)) in &capacity {
            let held = by_objects.get(*node).copied().unwrap_or(0);
            let ever = by_events.get(*node).map_or(0, BTreeSet::len) as u64;
            if held > *cap || ever > *cap || counter.is_some_and(|c| c > *cap) {
                found.push((
                    Rule::Capacity,
                    format!(
                        "node {node} has capacity {cap} but holds {held} task(s), was given {ever} by Assigned events, and counts {counter:?}"
                    ),
                ));
            }
        }
        for node in by_objects.keys() {
            if !capacity.contains_key(node.as_str()) {
                found.push((
                    Rule::Capacity,
                    format!("tasks are assigned to {node:?}, which is not a node"),
                ));
            }
        }
        for (rule, detail) in found {
            self.violation(rule, detail);
        }
    }

    fn check_acks(&mut self, acks: &[Ack]) {
        self.report.acks = acks.len();
        let objects: HashMap<(&str, &str), &ObjectRow> = self
            .objects
            .iter()
            .map(|o| ((o.kind.as_str(), o.name.as_str()), o))
            .collect();
        let mut found = Vec::new();
        for ack in acks {
            let Some(object) = objects.get(&(ack.kind.as_str(), ack.name.as_str())) else {
                found.push(format!(
                    "{}/{} was acknowledged at version {} but is missing",
                    ack.kind, ack.name, ack.version
                ));
                continue;
            };
            if (object.version as u64) < ack.version {
                found.push(format!(
                    "{}/{} was acknowledged at version {} but shows version {}",
                    ack.kind, ack.name, ack.version, object.version
                ));
            }
            let lost: Vec<&String> = match &ack.value {
                Value::Object(fields) => fields
                    .iter()
                    .filter(|(k, v)| k.as_str() != "status" && object.value.get(k) != Some(v))
                    .map(|(k, _)| k)
                    .collect(),
                _ => Vec::new(),
            };
            if !lost.is_empty() {
                found.push(format!(
                    "{}/{} was acknowledged with {} but shows {} (fields {lost:?} lost)",
                    ack.kind, ack.name, ack.value, object.value
                ));
            }
        }
        for detail in found {
            self.violation(Rule::LostAck, detail);
        }
    }
}

/// One `Assigned` event: (seq, epoch, node).
type Assignment = (i64, Option<i64>, String);

/// The node named by the scheduler's `Assigned` event message
/// ("assigned to node NODE (K of N slots) at epoch E").
fn assigned_node(message: &str) -> Option<String> {
    let rest = message.strip_prefix("assigned to node ")?;
    Some(
        rest.split_once(' ')
            .map_or(rest, |(node, _)| node)
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_read_from_the_scheduler_message() {
        assert_eq!(
            assigned_node("assigned to node n-2 (3 of 4 slots) at epoch 7").as_deref(),
            Some("n-2")
        );
        assert_eq!(assigned_node("something else"), None);
    }
}
