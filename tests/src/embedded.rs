//! The invariant checker for the embedded backend: reads one cluster's
//! record straight from a data directory's SQLite file (never a host's API
//! or memory) and lists every way it breaks Leasehold's guarantees, with
//! the fault suite's rules and report ([`crate::faults::checker`]).
//!
//! # Commit order, and why it is sound here
//!
//! SQLite runs one write transaction at a time across every process on the
//! data directory, and every commit takes its revision (and positions) from
//! the counter `leasehold_positions` inside its transaction, so revisions
//! follow commit order. Each grant records in its tenure row the counter's
//! value when it committed (`granted_mark`), and a release by the holder
//! records it too (`released_mark`). A guest write with revision `r`
//! committed before a grant exactly when `r <= granted_mark`. So, for a
//! write stamped with epoch `e` of lease `L` by holder `h`:
//!
//! - `r <= granted_mark(e + 1)`, if epoch e+1 was granted
//!   ([`Rule::CommittedAfterNextGrant`]);
//! - `r <= released_mark(e)`, if its holder released tenure e
//!   ([`Rule::AfterRelease`]);
//! - `r > granted_mark(e)` and `h` held epoch e ([`Rule::WrongTenure`]).
//!
//! Also: each lease's tenures carry epochs 1..n, only the newest may be
//! open, the lease row shows the newest ([`Rule::Tenures`]); a tenure ends
//! no later than the next one is granted ([`Rule::Overlap`]); a tenure's
//! write count covers the commits attributed to it ([`Rule::WriteCount`]);
//! the scheduler assigns a task once, to a node with room
//! ([`Rule::DoubleAssignment`], [`Rule::Assignment`], [`Rule::Capacity`]);
//! every acknowledged API write is there ([`Rule::LostAck`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use rusqlite::{Connection, OpenFlags, params};
use serde_json::Value;

use crate::faults::checker::{Ack, Report, Rule, Violation};

/// One tenure as recorded.
#[derive(Debug, Clone)]
pub struct Tenure {
    /// Its epoch.
    pub epoch: i64,
    /// Who held it.
    pub holder: String,
    /// Granted (µs since the Unix epoch).
    pub acquired_at: i64,
    /// Ended, if it has.
    pub ended_at: Option<i64>,
    /// Why.
    pub end_reason: Option<String>,
    /// Its write count.
    pub writes: i64,
    /// The last position committed when it was granted.
    pub granted_mark: i64,
    /// The same at its release by its holder, if it was released.
    pub released_mark: Option<i64>,
}

/// A guest write: a change or an event stamped with a lease and epoch.
#[derive(Debug, Clone)]
pub struct GuestWrite {
    /// The commit's revision.
    pub revision: i64,
    /// The lease.
    pub lease: String,
    /// The epoch.
    pub epoch: i64,
    /// The holder.
    pub holder: String,
    /// What it was, for messages.
    pub what: String,
}

/// The database file of a data directory.
pub fn database_file(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("leasehold.db")
}

/// Open a data directory's database for reading beside running hosts.
pub fn open(data_dir: &Path) -> Connection {
    let connection = Connection::open_with_flags(
        database_file(data_dir),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("open the data directory's database");
    connection
        .busy_timeout(std::time::Duration::from_secs(10))
        .expect("set a busy timeout");
    connection
}

/// The tenures of every lease of `cluster`, by lease, in epoch order.
pub fn tenures(connection: &Connection, cluster: &str) -> BTreeMap<String, Vec<Tenure>> {
    let mut statement = connection
        .prepare(
            "SELECT lease, epoch, holder, acquired_at, ended_at, end_reason, writes,
                    granted_mark, released_mark
               FROM leasehold_tenures WHERE cluster = ?1 ORDER BY lease, epoch",
        )
        .expect("read tenures");
    let mut by_lease: BTreeMap<String, Vec<Tenure>> = BTreeMap::new();
    let rows = statement
        .query_map(params![cluster], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Tenure {
                    epoch: r.get(1)?,
                    holder: r.get(2)?,
                    acquired_at: r.get(3)?,
                    ended_at: r.get(4)?,
                    end_reason: r.get(5)?,
                    writes: r.get(6)?,
                    granted_mark: r.get(7)?,
                    released_mark: r.get(8)?,
                },
            ))
        })
        .expect("read tenures");
    for row in rows {
        let (lease, tenure) = row.expect("a tenure row");
        by_lease.entry(lease).or_default().push(tenure);
    }
    by_lease
}

/// Check `cluster`'s record in the data directory `data_dir`.
pub fn check(data_dir: &Path, cluster: &str, acks: &[Ack]) -> Report {
    let mut connection = open(data_dir);
    // One snapshot for every table.
    let tx = connection.transaction().expect("begin a read");
    let report = judge(&tx, cluster, acks);
    drop(tx);
    report
}

fn judge(connection: &Connection, cluster: &str, acks: &[Ack]) -> Report {
    let mut report = Report::default();
    let mut violations = Vec::new();
    let tenures = tenures(connection, cluster);
    let leases: HashMap<String, (String, i64)> = connection
        .prepare("SELECT name, holder, epoch FROM leasehold_leases WHERE cluster = ?1")
        .expect("read leases")
        .query_map(params![cluster], |r| {
            Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?)))
        })
        .expect("read leases")
        .map(|r| r.expect("a lease row"))
        .collect();
    for (lease, list) in &tenures {
        report.tenures.insert(lease.clone(), list.len());
        for (i, tenure) in list.iter().enumerate() {
            if tenure.epoch != i as i64 + 1 {
                violations.push(report_violation(
                    Rule::Tenures,
                    format!("lease {lease}: tenure {i} has epoch {}", tenure.epoch),
                ));
            }
            if tenure.ended_at.is_none() && i + 1 != list.len() {
                violations.push(report_violation(
                    Rule::Tenures,
                    format!(
                        "lease {lease}: tenure {} is open but not the newest",
                        tenure.epoch
                    ),
                ));
            }
            if let Some(next) = list.get(i + 1) {
                match tenure.ended_at {
                    Some(ended) if ended <= next.acquired_at => {}
                    ended => violations.push(report_violation(
                        Rule::Overlap,
                        format!(
                            "lease {lease}: tenure {} ended at {ended:?}, after tenure {} was \
                             granted at {}",
                            tenure.epoch, next.epoch, next.acquired_at
                        ),
                    )),
                }
                if next.granted_mark < tenure.granted_mark {
                    violations.push(report_violation(
                        Rule::Tenures,
                        format!(
                            "lease {lease}: grant {} is recorded before grant {} in commit order",
                            next.epoch, tenure.epoch
                        ),
                    ));
                }
            }
        }
        let newest = list.last().expect("a listed lease has tenures");
        match leases.get(lease) {
            Some((holder, epoch)) if *epoch == newest.epoch && *holder == newest.holder => {}
            other => violations.push(report_violation(
                Rule::Tenures,
                format!(
                    "lease {lease}: the lease row shows {other:?}, the newest tenure is epoch {} of {}",
                    newest.epoch, newest.holder
                ),
            )),
        }
    }
    let writes = guest_writes(connection, cluster);
    let mut counted: HashMap<(String, i64), BTreeSet<i64>> = HashMap::new();
    for write in &writes {
        counted
            .entry((write.lease.clone(), write.epoch))
            .or_default()
            .insert(write.revision);
        let Some(list) = tenures.get(&write.lease) else {
            violations.push(report_violation(
                Rule::WrongTenure,
                format!("{} of lease {}, never granted", write.what, write.lease),
            ));
            continue;
        };
        let index = usize::try_from(write.epoch - 1).ok();
        let Some(tenure) = index.and_then(|i| list.get(i)) else {
            violations.push(report_violation(
                Rule::WrongTenure,
                format!(
                    "{} stamped epoch {} of lease {}, never granted",
                    write.what, write.epoch, write.lease
                ),
            ));
            continue;
        };
        if tenure.holder != write.holder || write.revision <= tenure.granted_mark {
            violations.push(report_violation(
                Rule::WrongTenure,
                format!(
                    "{} (revision {}) stamped epoch {} by {}: the tenure is {}'s, granted at \
                     mark {}",
                    write.what,
                    write.revision,
                    write.epoch,
                    write.holder,
                    tenure.holder,
                    tenure.granted_mark
                ),
            ));
        }
        if let Some(next) = index.and_then(|i| list.get(i + 1))
            && write.revision > next.granted_mark
        {
            violations.push(report_violation(
                Rule::CommittedAfterNextGrant,
                format!(
                    "{} (revision {}) of epoch {} of lease {} committed after epoch {} was \
                     granted (mark {})",
                    write.what,
                    write.revision,
                    write.epoch,
                    write.lease,
                    next.epoch,
                    next.granted_mark
                ),
            ));
        }
        if let Some(released) = tenure.released_mark
            && write.revision > released
        {
            violations.push(report_violation(
                Rule::AfterRelease,
                format!(
                    "{} (revision {}) of epoch {} of lease {} committed after its release \
                     (mark {released})",
                    write.what, write.revision, write.epoch, write.lease
                ),
            ));
        }
    }
    report.guest_writes = writes.len();
    for ((lease, epoch), revisions) in &counted {
        if let Some(tenure) = tenures
            .get(lease)
            .and_then(|list| list.get(usize::try_from(epoch - 1).unwrap_or(usize::MAX)))
            && (tenure.writes as usize) < revisions.len()
        {
            violations.push(report_violation(
                Rule::WriteCount,
                format!(
                    "lease {lease} epoch {epoch} counts {} writes, {} commits are attributed to it",
                    tenure.writes,
                    revisions.len()
                ),
            ));
        }
    }
    judge_scheduler(connection, cluster, &mut report, &mut violations);
    judge_acks(connection, cluster, acks, &mut report, &mut violations);
    report.events = connection
        .query_row(
            "SELECT count(*) FROM leasehold_events WHERE cluster = ?1",
            params![cluster],
            |r| r.get::<_, i64>(0),
        )
        .expect("count events") as usize;
    report.violations = violations;
    report
}

fn report_violation(rule: Rule, detail: String) -> Violation {
    Violation { rule, detail }
}

/// Every change and event stamped with a lease and epoch.
fn guest_writes(connection: &Connection, cluster: &str) -> Vec<GuestWrite> {
    let mut writes = Vec::new();
    for (table, what) in [
        ("leasehold_changes", "a change of"),
        ("leasehold_events", "an event of"),
    ] {
        let mut statement = connection
            .prepare(&format!(
                "SELECT revision, lease, epoch, holder, kind, name FROM {table}
                  WHERE cluster = ?1 AND lease IS NOT NULL ORDER BY revision"
            ))
            .expect("read guest writes");
        let rows = statement
            .query_map(params![cluster], |r| {
                Ok(GuestWrite {
                    revision: r.get(0)?,
                    lease: r.get(1)?,
                    epoch: r.get(2)?,
                    holder: r.get(3)?,
                    what: format!(
                        "{what} {}/{}",
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?
                    ),
                })
            })
            .expect("read guest writes");
        writes.extend(rows.map(|r| r.expect("a guest write")));
    }
    writes
}

/// The objects of `kind`: name -> value.
fn objects(connection: &Connection, cluster: &str, kind: &str) -> BTreeMap<String, (i64, Value)> {
    connection
        .prepare(
            "SELECT name, version, value FROM leasehold_objects WHERE cluster = ?1 AND kind = ?2",
        )
        .expect("read objects")
        .query_map(params![cluster, kind], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .expect("read objects")
        .map(|r| {
            let (name, version, value) = r.expect("an object row");
            (
                name,
                (version, serde_json::from_str(&value).expect("stored JSON")),
            )
        })
        .collect()
}

fn judge_scheduler(
    connection: &Connection,
    cluster: &str,
    report: &mut Report,
    violations: &mut Vec<Violation>,
) {
    let tasks = objects(connection, cluster, "tasks");
    let nodes = objects(connection, cluster, "nodes");
    let mut assigned_events: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut statement = connection
        .prepare(
            "SELECT name, message FROM leasehold_events
              WHERE cluster = ?1 AND kind = 'tasks' AND reason = 'Assigned' ORDER BY seq",
        )
        .expect("read assignments");
    for row in statement
        .query_map(params![cluster], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .expect("read assignments")
    {
        let (task, message) = row.expect("an event row");
        assigned_events.entry(task).or_default().push(message);
    }
    report.tasks = tasks.len();
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    for (task, events) in &assigned_events {
        if events.len() > 1 {
            violations.push(report_violation(
                Rule::DoubleAssignment,
                format!(
                    "task {task} was assigned {} times: {events:?}",
                    events.len()
                ),
            ));
        }
    }
    for (name, (_, value)) in &tasks {
        let assigned = value["status"] == "assigned";
        if assigned {
            report.assigned += 1;
            let node = value["node"].as_str().unwrap_or_default().to_string();
            *per_node.entry(node.clone()).or_default() += 1;
            match assigned_events.get(name) {
                Some(events)
                    if events
                        .iter()
                        .any(|m| assigned_node(m) == Some(node.as_str())) => {}
                other => violations.push(report_violation(
                    Rule::Assignment,
                    format!(
                        "task {name} is assigned to {node} but its Assigned events are {other:?}"
                    ),
                )),
            }
        } else if assigned_events.contains_key(name) {
            violations.push(report_violation(
                Rule::Assignment,
                format!("task {name} has an Assigned event but shows {value}"),
            ));
        }
    }
    for (node, held) in per_node {
        let capacity = nodes
            .get(&node)
            .and_then(|(_, v)| v["capacity"].as_u64())
            .unwrap_or(0);
        if held > capacity {
            violations.push(report_violation(
                Rule::Capacity,
                format!("node {node} holds {held} tasks, its capacity is {capacity}"),
            ));
        }
    }
}

/// The node named by the scheduler's `Assigned` event message
/// ("assigned to node NODE (K of N slots) at epoch E").
fn assigned_node(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("assigned to node ")?;
    Some(rest.split_once(' ').map_or(rest, |(node, _)| node))
}

fn judge_acks(
    connection: &Connection,
    cluster: &str,
    acks: &[Ack],
    report: &mut Report,
    violations: &mut Vec<Violation>,
) {
    let mut kinds: BTreeMap<String, BTreeMap<String, (i64, Value)>> = BTreeMap::new();
    for ack in acks {
        let objects = kinds
            .entry(ack.kind.clone())
            .or_insert_with(|| objects(connection, cluster, &ack.kind));
        report.acks += 1;
        match objects.get(&ack.name) {
            None => violations.push(report_violation(
                Rule::LostAck,
                format!(
                    "{}/{} was acknowledged at version {} and is gone",
                    ack.kind, ack.name, ack.version
                ),
            )),
            Some((version, value)) => {
                if (*version as u64) < ack.version {
                    violations.push(report_violation(
                        Rule::LostAck,
                        format!(
                            "{}/{} is at version {version}, below the acknowledged {}",
                            ack.kind, ack.name, ack.version
                        ),
                    ));
                }
                // The scheduler owns `status` and `node` of a task (and a
                // node's count of its slots); every other field written
                // stays.
                if let Some(written) = ack.value.as_object() {
                    for (field, wanted) in written {
                        if matches!(field.as_str(), "status" | "node" | "assigned") {
                            continue;
                        }
                        if value.get(field) != Some(wanted) {
                            violations.push(report_violation(
                                Rule::LostAck,
                                format!(
                                    "{}/{}: field {field} was acknowledged as {wanted}, is {:?}",
                                    ack.kind,
                                    ack.name,
                                    value.get(field)
                                ),
                            ));
                        }
                    }
                }
            }
        }
    }
}
