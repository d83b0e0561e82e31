//! Leasehold behind a PostgreSQL cluster run by Patroni: real
//! `leasehold` processes on a URL that lists every node with
//! `target_session_attrs=read-write`, and a failover Patroni makes on its
//! own once the primary's postmaster is SIGKILLed
//! ([`leasehold_tests::patroni`]: its own etcd, two PostgreSQL nodes,
//! everything on loopback ports of the test's own).
//!
//! - **Asynchronous replication** (`maximum_lag_on_failover` large enough
//!   to lose commits): the replica is cut off from the primary, the hosts
//!   keep writing there (creates, the scheduler's assignments, deletions),
//!   an API reader reads the change stream to its head, and the primary's
//!   PostgreSQL is killed. Patroni promotes the replica, which lacks those
//!   commits. Then: the failover did lose acknowledged writes (the check
//!   the synchronous test makes catches them, and so does the checker's
//!   `LostAck` rule); the hosts lead again at an epoch above every epoch
//!   issued before; every object created, updated or deleted after the
//!   failover wakes the scheduler (the checker's no-missed-wake-up rule);
//!   no position, revision, object version or event number written after
//!   the failover repeats one the former primary issued (both timelines'
//!   records are read: the former primary's just before the kill); the
//!   reader at its pre-failover cursor gets 410 `too_old` or every new
//!   change; the invariant checker finds nothing else wrong.
//! - **Synchronous replication** (`synchronous_mode: true`): writers keep
//!   creating objects through the kill; every write acknowledged (2xx) is
//!   present after the failover, and the hosts lead again above every
//!   earlier epoch.
//!
//! On failure each test prints the hosts' logs, Patroni's members (as
//! `patronictl list` would) and the tail of every Patroni and etcd log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_tests::faults::checker::{self, Ack, Acks, Rule};
use leasehold_tests::faults::rig::RECONCILE_LOG_FILTER;
use leasehold_tests::faults::watch::{ChangeFact, HostLogs, judge_wake_ups};
use leasehold_tests::http;
use leasehold_tests::patroni::{PatroniCluster, Settings};
use leasehold_tests::process::{Replica, binary, eventually, free_port};
use leasehold_tests::proxy::Mode;
use leasehold_tests::{TempDir, short_lease_config as config};
use serde_json::{Value, json};

const SCHEDULER: &str = "scheduler";

/// The database the hosts use, made on the leader.
const DATABASE: &str = "leasehold";

/// Longest Patroni takes from the kill to a new leader taking writes: a
/// hang detector (measured: 2 to 3 s).
const FAILOVER_LIMIT: Duration = Duration::from_secs(60);

/// Longest a wait on the hosts (leading, reconciling) takes: a hang
/// detector for a debug build on two busy cores.
const HOSTS_LIMIT: Duration = Duration::from_secs(60);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The hosts: real `leasehold` processes with JSON logs that include every
/// reconcile (the evidence of the wake-up rule). Their logs are printed
/// when the test fails.
struct Hosts {
    replicas: Vec<(String, Replica)>,
    _dir: TempDir,
}

impl Hosts {
    async fn start(cluster: &str, url: &str, count: usize) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new();
        let mut replicas = Vec::new();
        for i in 0..count {
            let holder = format!("host-{i}");
            let script = dir.path().join(format!("leasehold-{holder}"));
            std::fs::write(
                &script,
                format!(
                    "#!/bin/sh\nexec '{}' --log-format json --log-level '{RECONCILE_LOG_FILTER}' \"$@\"\n",
                    binary().display()
                ),
            )
            .expect("write the host's start script");
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
                .expect("make the host's start script executable");
            let port = free_port();
            let replica = Replica::start_binary(
                script,
                dir.path(),
                &holder,
                port,
                &config(cluster, &holder, port, url),
            );
            replicas.push((holder, replica));
        }
        for (_, replica) in &replicas {
            replica.wait_healthy(HOSTS_LIMIT).await;
        }
        Self {
            replicas,
            _dir: dir,
        }
    }

    fn addr(&self, i: usize) -> &str {
        &self.replicas[i].1.addr
    }

    /// What the hosts logged, for the wake-up rule.
    fn logs(&self) -> HostLogs {
        let mut logs = HostLogs::default();
        for (holder, replica) in &self.replicas {
            logs.add(holder, &replica.log());
        }
        logs
    }

    /// Wait until the database at `url` shows the scheduler actively held
    /// at an epoch above `after` by a host that itself says it leads;
    /// returns (that host, the epoch).
    async fn leader_after(&self, url: &str, cluster: &str, after: i64) -> (usize, i64) {
        eventually(
            &format!("a host leads {SCHEDULER} at an epoch above {after}"),
            HOSTS_LIMIT,
            || async {
                let rows = query(
                    url,
                    "SELECT holder, epoch, NOT released AND expires_at > clock_timestamp()
                       FROM leasehold_leases WHERE cluster = $1 AND name = $2",
                    &[&cluster, &SCHEDULER],
                )
                .await?;
                let row = rows.first()?;
                let (holder, epoch, active): (String, i64, bool) =
                    (row.get(0), row.get(1), row.get(2));
                if !active || epoch <= after {
                    return None;
                }
                let i = self.replicas.iter().position(|(h, _)| *h == holder)?;
                self.replicas[i]
                    .1
                    .leads(SCHEDULER)
                    .await?
                    .then_some((i, epoch))
            },
        )
        .await
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (holder, replica) in &self.replicas {
                // The reconcile trace lines are evidence, not diagnosis.
                let log = replica.log();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.contains(r#""message":"reconciled""#))
                    .collect();
                eprintln!(
                    "---- {holder}: last 40 lines (reconcile traces left out) ----\n{}",
                    lines[lines.len().saturating_sub(40)..].join("\n")
                );
            }
        }
    }
}

/// `statement`'s rows on the server at `url`, or `None` when it does not
/// answer.
async fn query(
    url: &str,
    statement: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Option<Vec<tokio_postgres::Row>> {
    let (client, connection) =
        tokio::time::timeout(secs(5), tokio_postgres::connect(url, tokio_postgres::NoTls))
            .await
            .ok()?
            .ok()?;
    tokio::spawn(connection);
    tokio::time::timeout(secs(10), client.query(statement, params))
        .await
        .ok()?
        .ok()
}

/// Create `kind/name` with `value` through the host at `addr`
/// (create-only); the acknowledgement, or why there was none.
async fn create(addr: &str, kind: &str, name: &str, value: Value) -> Result<Ack, String> {
    let response = http::request_within(
        secs(10),
        addr,
        "PUT",
        &format!("/v1/objects/{kind}/{name}"),
        &[("If-None-Match", "*")],
        Some(&value.to_string()),
    )
    .await
    .map_err(|e| format!("create {kind}/{name} through {addr}: {e}"))?;
    if response.status != 201 {
        return Err(format!(
            "create {kind}/{name}: {} {}",
            response.status, response.body
        ));
    }
    let version = response.json()["version"]
        .as_u64()
        .ok_or("an acknowledged write names its version")?;
    Ok(Ack {
        kind: kind.into(),
        name: name.into(),
        version,
        value,
    })
}

/// [`create`] that must succeed.
async fn created(addr: &str, kind: &str, name: &str, value: Value) -> Ack {
    create(addr, kind, name, value)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn task(name: &str) -> Value {
    json!({"status": "pending", "id": name})
}

/// Delete `kind/name` through the host at `addr`; it must be acknowledged
/// (202: the scheduler's finalizer is on every assigned task, and it
/// removes it, which removes the task).
async fn delete(addr: &str, kind: &str, name: &str) {
    let response = http::request_within(
        secs(10),
        addr,
        "DELETE",
        &format!("/v1/objects/{kind}/{name}"),
        &[],
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("delete {kind}/{name} through {addr}: {e}"));
    assert!(
        matches!(response.status, 200 | 202 | 204),
        "delete {kind}/{name}: {} {}",
        response.status,
        response.body
    );
}

/// Wait until no task of `cluster` is pending or marked for deletion on
/// the server at `url`: the scheduler has nothing left to do.
async fn all_assigned(url: &str, cluster: &str) {
    eventually("every task is assigned or gone", HOSTS_LIMIT, || async {
        let rows = query(
            url,
            "SELECT count(*) FROM leasehold_objects
              WHERE cluster = $1 AND kind = 'tasks'
                AND (value::jsonb ->> 'status' <> 'assigned' OR deleting_since IS NOT NULL)",
            &[&cluster],
        )
        .await?;
        (rows.first()?.get::<_, i64>(0) == 0).then_some(())
    })
    .await;
}

/// The acknowledged writes missing on the server at `url` (the object
/// absent, or at a version below the one acknowledged): the check "no
/// acknowledged write lost".
async fn lost_writes(url: &str, cluster: &str, acks: &[Ack]) -> Vec<String> {
    let rows = query(
        url,
        "SELECT kind, name, version FROM leasehold_objects WHERE cluster = $1",
        &[&cluster],
    )
    .await
    .expect("read the objects");
    let present: BTreeMap<(String, String), i64> = rows
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    acks.iter()
        .filter_map(|a| match present.get(&(a.kind.clone(), a.name.clone())) {
            Some(v) if *v as u64 >= a.version => None,
            Some(v) => Some(format!(
                "{}/{} acknowledged at version {}, found at {v}",
                a.kind, a.name, a.version
            )),
            None => Some(format!(
                "{}/{} acknowledged at version {}, absent",
                a.kind, a.name, a.version
            )),
        })
        .collect()
}

/// One change as a timeline's record holds it: revision, kind, name, the
/// change, the object's version and when (µs).
type ChangeRow = (i64, String, String, String, i64, i64);

/// One timeline's record of a cluster: every change, every event, and the
/// highest epoch granted.
#[derive(Debug, Default)]
struct Record {
    /// position -> (revision, kind, name, change, version, at in µs)
    changes: BTreeMap<i64, ChangeRow>,
    /// seq -> (revision, kind, name, reason)
    events: BTreeMap<i64, (i64, String, String, String)>,
    max_epoch: i64,
}

impl Record {
    async fn read(url: &str, cluster: &str) -> Self {
        let changes = query(
            url,
            "SELECT position, revision, kind, name, change, version,
                    (extract(epoch FROM at) * 1000000)::int8
               FROM leasehold_changes WHERE cluster = $1",
            &[&cluster],
        )
        .await
        .expect("read the changes");
        let events = query(
            url,
            "SELECT seq, revision, kind, name, reason FROM leasehold_events WHERE cluster = $1",
            &[&cluster],
        )
        .await
        .expect("read the events");
        let epochs = query(
            url,
            "SELECT coalesce(max(epoch), 0)::int8 FROM leasehold_tenures WHERE cluster = $1",
            &[&cluster],
        )
        .await
        .expect("read the tenures");
        Self {
            changes: changes
                .iter()
                .map(|r| {
                    (
                        r.get(0),
                        (r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6)),
                    )
                })
                .collect(),
            events: events
                .iter()
                .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
                .collect(),
            max_epoch: epochs[0].get(0),
        }
    }

    /// Every number this record holds (positions, revisions, versions,
    /// event seqs: all taken from one sequence).
    fn numbers(&self) -> BTreeSet<i64> {
        let mut all = BTreeSet::new();
        for (position, (revision, _, _, _, version, _)) in &self.changes {
            all.extend([*position, *revision, *version]);
        }
        for (seq, (revision, ..)) in &self.events {
            all.extend([*seq, *revision]);
        }
        all
    }

    /// The changes of `self` that `before` does not hold: those written
    /// after it was read (on the new timeline).
    fn changes_since(&self, before: &Record) -> Vec<(i64, &ChangeRow)> {
        self.changes
            .iter()
            .filter(|(p, c)| before.changes.get(p) != Some(c))
            .map(|(p, c)| (*p, c))
            .collect()
    }

    /// Numbers of the records `self` holds that `before` does not, which
    /// repeat a number `before` holds.
    fn repeats(&self, before: &Record) -> Vec<String> {
        let old = before.numbers();
        let mut found = Vec::new();
        for (position, (revision, kind, name, change, version, _)) in self.changes_since(before) {
            // A deletion records the version the object had, which may be
            // older than the failover.
            let mut numbers = vec![("position", position), ("revision", *revision)];
            if change != "deleted" {
                numbers.push(("version", *version));
            }
            for (what, n) in numbers {
                if old.contains(&n) {
                    found.push(format!(
                        "change {change} {kind}/{name} (position {position}) has {what} {n}, \
                         issued before the failover"
                    ));
                }
            }
        }
        for (seq, event) in &self.events {
            if before.events.get(seq) == Some(event) {
                continue;
            }
            let (revision, kind, name, reason) = event;
            for (what, n) in [("seq", *seq), ("revision", *revision)] {
                if old.contains(&n) {
                    found.push(format!(
                        "event {reason} of {kind}/{name} (seq {seq}) has {what} {n}, issued \
                         before the failover"
                    ));
                }
            }
        }
        found
    }
}

/// What an API reader gets from `GET /v1/changes` after `after`, following
/// `next` to the end: every position given, or the 410 answer.
enum Read {
    Positions(Vec<u64>),
    Gone(Value),
}

async fn read_changes(addr: &str, after: u64) -> Read {
    let mut positions = Vec::new();
    let mut after = after;
    for _ in 0..1000 {
        let response = http::request_within(
            secs(10),
            addr,
            "GET",
            &format!("/v1/changes?after={after}&limit=500"),
            &[],
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("GET /v1/changes through {addr}: {e}"));
        if response.status == 410 {
            return Read::Gone(response.json());
        }
        assert_eq!(response.status, 200, "GET /v1/changes: {}", response.body);
        let page = response.json();
        positions.extend(
            page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["position"].as_u64()),
        );
        match page["next"].as_u64() {
            Some(next) => after = next,
            None => return Read::Positions(positions),
        }
    }
    panic!("GET /v1/changes did not end within 1000 pages");
}

/// Make the database and start two hosts on `cluster`'s URL; returns the
/// hosts, the Leasehold cluster's name, and the leader node with its
/// timeline.
async fn leasehold_on(cluster: &PatroniCluster) -> (Hosts, String, usize, u64) {
    let (leader, timeline) = cluster.leader().await.expect("a leader");
    cluster
        .execute(leader, "postgres", &format!("CREATE DATABASE {DATABASE}"))
        .await;
    let name = format!("pt-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let hosts = Hosts::start(&name, &cluster.url(DATABASE), 2).await;
    (hosts, name, leader, timeline)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_asynchronous_failover_by_patroni_repeats_no_number_and_misses_no_wake_up() {
    let started = Instant::now();
    let cluster = PatroniCluster::start(Settings {
        nodes: 2,
        synchronous: false,
    })
    .await;
    eprintln!("cluster formed in {:.1} s", started.elapsed().as_secs_f64());
    let (hosts, name, primary, timeline) = leasehold_on(&cluster).await;
    let primary_url = cluster.node_url(primary, DATABASE);
    let (_, first) = hosts.leader_after(&primary_url, &name, 0).await;
    let addr = hosts.addr(0).to_string();

    // Before the cut: a node and tasks the replica will have.
    let mut kept = vec![created(&addr, "nodes", "n1", json!({"capacity": 100000})).await];
    for i in 0..20 {
        let task_name = format!("before-{i}");
        kept.push(created(&addr, "tasks", &task_name, task(&task_name)).await);
    }
    all_assigned(&primary_url, &name).await;
    cluster.wait_caught_up(primary, secs(30)).await;

    // The replica is cut off; the primary alone takes a few hundred
    // changes: creates, the scheduler's assignments and events, deletions
    // (of objects the replica has, and of new ones).
    cluster.replication_from(primary).set(Mode::Reset);
    let mut cut = Vec::new();
    for i in 0..120 {
        let task_name = format!("cut-{i}");
        cut.push(created(&addr, "tasks", &task_name, task(&task_name)).await);
    }
    let mut deleted = BTreeSet::new();
    for i in (0..120).step_by(4) {
        deleted.insert(format!("cut-{i}"));
    }
    for i in 0..5 {
        deleted.insert(format!("before-{i}"));
    }
    for task_name in &deleted {
        delete(&addr, "tasks", task_name).await;
    }
    kept.retain(|a| !deleted.contains(&a.name));
    cut.retain(|a| !deleted.contains(&a.name));
    all_assigned(&primary_url, &name).await;

    // An API reader follows the change stream to its head on the primary.
    let cursor = match read_changes(&addr, 0).await {
        Read::Positions(p) => *p.iter().max().expect("the stream holds changes"),
        Read::Gone(body) => panic!("a reader from the start got 410: {body}"),
    };
    // The former primary's record, as it is at the kill (the hosts have
    // nothing left to do: every task is assigned).
    let before = Record::read(&primary_url, &name).await;
    let replica = (0..cluster.nodes().len())
        .find(|i| *i != primary)
        .expect("a replica");
    let replica_max: i64 = cluster
        .sql(
            replica,
            DATABASE,
            &format!(
                "SELECT coalesce(max(position), 0) FROM leasehold_changes WHERE cluster = '{name}'"
            ),
        )
        .await
        .and_then(|v| v.parse().ok())
        .expect("the replica answers");
    assert!(
        replica_max < cursor as i64,
        "the replica must lack the primary's last changes for this test: it has up to position \
         {replica_max}, the primary {cursor}"
    );
    eprintln!(
        "before the kill: {} changes, {} events, epochs up to {} (first grant {first}); the reader \
         is at position {cursor}, the replica has changes up to {replica_max}",
        before.changes.len(),
        before.events.len(),
        before.max_epoch
    );

    let killed = Instant::now();
    cluster.kill_postgres(primary);
    let (promoted, new_timeline) = cluster
        .wait_failover(primary, timeline, FAILOVER_LIMIT)
        .await;
    let failed_over = killed.elapsed();
    let new_url = cluster.node_url(promoted, DATABASE);
    let (leading, epoch) = hosts.leader_after(&new_url, &name, before.max_epoch).await;
    eprintln!(
        "Patroni promoted {} (timeline {timeline} -> {new_timeline}) {:.1} s after the kill; \
         host-{leading} leads at epoch {epoch} {:.1} s after the kill (epochs before: up to {})",
        cluster.nodes()[promoted].name,
        failed_over.as_secs_f64(),
        killed.elapsed().as_secs_f64(),
        before.max_epoch
    );
    assert!(epoch > before.max_epoch);

    // The failover lost acknowledged writes: the check the synchronous
    // test makes catches them.
    let lost = lost_writes(&new_url, &name, &cut).await;
    eprintln!(
        "asynchronous failover lost {} of the {} writes acknowledged while the replica was cut off \
         (and not deleted since)",
        lost.len(),
        cut.len()
    );
    assert!(
        !lost.is_empty(),
        "the failover must lose acknowledged writes for this test (maximum_lag_on_failover)"
    );

    // After the failover: creates, and deletions of objects from before
    // the cut and from after the failover.
    let addr = hosts.addr(leading).to_string();
    for i in 0..20 {
        let task_name = format!("after-{i}");
        kept.push(created(&addr, "tasks", &task_name, task(&task_name)).await);
    }
    for i in 10..13 {
        delete(&addr, "tasks", &format!("before-{i}")).await;
    }
    for i in 0..3 {
        delete(&addr, "tasks", &format!("after-{i}")).await;
    }
    let gone: BTreeSet<String> = (10..13)
        .map(|i| format!("before-{i}"))
        .chain((0..3).map(|i| format!("after-{i}")))
        .collect();
    kept.retain(|a| !gone.contains(&a.name));
    all_assigned(&new_url, &name).await;

    // Every change written after the failover wakes the scheduler.
    let mut judged = None;
    let deadline = Instant::now() + HOSTS_LIMIT;
    while Instant::now() < deadline {
        let after = Record::read(&new_url, &name).await;
        let facts: Vec<ChangeFact> = after
            .changes_since(&before)
            .into_iter()
            .map(
                |(position, (_, kind, name, change, version, at))| ChangeFact {
                    position: position as u64,
                    at_micros: *at,
                    kind: kind.clone(),
                    name: name.clone(),
                    change: change.clone(),
                    version: *version as u64,
                },
            )
            .collect();
        let wake_ups = judge_wake_ups(&facts, &hosts.logs());
        let done = wake_ups.missed.is_empty();
        judged = Some((after, facts, wake_ups));
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (after, facts, wake_ups) = judged.expect("judged once");
    eprintln!(
        "after the failover: {} new changes ({} deletions judged, {} excused); wake-ups judged {}",
        facts.len(),
        wake_ups.deletions,
        wake_ups.excused,
        wake_ups.judged
    );
    assert!(
        facts.iter().filter(|f| f.change == "deleted").count() >= 6,
        "the deletions after the failover are in the new record: {facts:?}"
    );
    // The three promises after the failover are judged together, so a
    // failure shows every one that broke.
    let mut broken = Vec::new();
    if !wake_ups.missed.is_empty() {
        broken.push(format!(
            "{} of the {} changes written after the failover woke no reconcile:\n{}",
            wake_ups.missed.len(),
            wake_ups.judged,
            first_lines(&wake_ups.missed)
        ));
    }

    // No number written after the failover repeats one issued before it.
    let repeats = after.repeats(&before);
    if !repeats.is_empty() {
        broken.push(format!(
            "{} number(s) written after the failover repeat the former primary's:\n{}",
            repeats.len(),
            first_lines(&repeats)
        ));
    }

    // The reader at its pre-failover cursor is told to re-list, or is
    // given every change written since.
    let new_positions: BTreeSet<u64> = facts.iter().map(|f| f.position).collect();
    match read_changes(&addr, cursor).await {
        Read::Gone(body) if body["code"] == "too_old" => {
            eprintln!("the reader at {cursor} is told to re-list: {body}");
        }
        Read::Gone(body) => broken.push(format!("410 without code too_old: {body}")),
        Read::Positions(given) => {
            let given: BTreeSet<u64> = given.into_iter().collect();
            let skipped: Vec<&u64> = new_positions.difference(&given).collect();
            if skipped.is_empty() {
                eprintln!(
                    "the reader at {cursor} is given all {} new changes",
                    new_positions.len()
                );
            } else {
                broken.push(format!(
                    "a reader at its pre-failover cursor {cursor} got no 410 and was given {} \
                     change(s): it silently skipped {} of the {} changes written after the \
                     failover: {skipped:?}",
                    given.len(),
                    skipped.len(),
                    new_positions.len()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "after the failover:\n- {}",
        broken.join("\n- ")
    );

    // The invariant checker: clean on what survived; and it reports the
    // writes the failover lost (so a synchronous run that lost one fails).
    let report = checker::check(&new_url, &name, &kept).await;
    eprintln!("checker after the failover: {report}");
    report.assert_clean("asynchronous failover");
    let mut all = kept.clone();
    all.extend(cut.iter().cloned());
    assert!(
        checker::check(&new_url, &name, &all)
            .await
            .breaks(Rule::LostAck),
        "the checker must report the writes the failover lost"
    );
    eprintln!(
        "asynchronous rehearsal: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(hosts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_synchronous_failover_by_patroni_loses_no_acknowledged_write() {
    let started = Instant::now();
    let cluster = PatroniCluster::start(Settings {
        nodes: 2,
        synchronous: true,
    })
    .await;
    eprintln!("cluster formed in {:.1} s", started.elapsed().as_secs_f64());
    let (hosts, name, primary, timeline) = leasehold_on(&cluster).await;
    let primary_url = cluster.node_url(primary, DATABASE);
    hosts.leader_after(&primary_url, &name, 0).await;
    let acks = Acks::default();
    acks.record(created(hosts.addr(0), "nodes", "n1", json!({"capacity": 100000})).await);

    // Writers create tasks through both hosts until told to stop, through
    // the kill and the failover.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (acks, stop) = (acks.clone(), stop.clone());
            let addr = hosts.addr(w % 2).to_string();
            tokio::spawn(async move {
                let mut refused = 0usize;
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let task_name = format!("w{w}-{i}");
                    match create(&addr, "tasks", &task_name, task(&task_name)).await {
                        Ok(ack) => acks.record(ack),
                        Err(_) => {
                            refused += 1;
                            // A failed request against a host that is
                            // reconnecting: pace the retries.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                refused
            })
        })
        .collect();
    eventually("100 writes are acknowledged", HOSTS_LIMIT, || async {
        (acks.len() >= 100).then_some(())
    })
    .await;
    let before = Record::read(&primary_url, &name).await;
    let killed = Instant::now();
    cluster.kill_postgres(primary);
    let at_kill = acks.len();
    let (promoted, new_timeline) = cluster
        .wait_failover(primary, timeline, FAILOVER_LIMIT)
        .await;
    let new_url = cluster.node_url(promoted, DATABASE);
    let (leading, epoch) = hosts.leader_after(&new_url, &name, before.max_epoch).await;
    eprintln!(
        "Patroni promoted {} (timeline {timeline} -> {new_timeline}) {:.1} s after the kill; \
         host-{leading} leads at epoch {epoch} (epochs before: up to {})",
        cluster.nodes()[promoted].name,
        killed.elapsed().as_secs_f64(),
        before.max_epoch
    );
    assert!(epoch > before.max_epoch);
    // The writers go on through the new primary.
    eventually(
        "writes are acknowledged again after the failover",
        HOSTS_LIMIT,
        || async { (acks.len() >= acks_after(at_kill)).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut refused = 0;
    for writer in writers {
        refused += writer.await.expect("a writer");
    }
    let acks = acks.all();
    let lost = lost_writes(&new_url, &name, &acks).await;
    eprintln!(
        "synchronous failover: {} writes acknowledged ({at_kill} before the kill), {refused} \
         refused or failed around it, {} lost",
        acks.len(),
        lost.len()
    );
    assert!(
        lost.is_empty(),
        "synchronous replication lost {} acknowledged write(s):\n{}",
        lost.len(),
        lost.join("\n")
    );
    all_assigned(&new_url, &name).await;
    let report = checker::check(&new_url, &name, &acks).await;
    eprintln!("checker after the failover: {report}");
    report.assert_clean("synchronous failover");
    eprintln!(
        "synchronous rehearsal: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(hosts);
}

/// The first 20 of `lines`, and how many more there are.
fn first_lines(lines: &[String]) -> String {
    let mut text = lines
        .iter()
        .take(20)
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    if lines.len() > 20 {
        text.push_str(&format!("\n    ... and {} more", lines.len() - 20));
    }
    text
}

/// How many acknowledgements show the writers going on after the
/// failover, given `at_kill` before it.
fn acks_after(at_kill: usize) -> usize {
    at_kill + 40
}
