//! Handover rehearsal: real `leasehold` processes against real PostgreSQL,
//! each behind its own fault proxy, broken in the ways a deployment
//! breaks. Every scenario asserts an observable owner transition *and*
//! runs the invariant checker over the database's own record (see
//! `leasehold_tests::faults::checker`).
//!
//! - the eight scenarios of the fault suite, one test each;
//! - 1b and 2b: the orderly release (SIGTERM) and the removed controller
//!   (SIGHUP) with the guest's COMMIT held in the network, on the real
//!   build (the held commit is rolled back, the checker is clean) and on
//!   the unfenced one (the checker must report it landing after the next
//!   grant);
//! - a database clock step, on the real build (the fence refuses the old
//!   leader's writes) and on the deliberately broken `leasehold-unfenced`
//!   build (the checker must report the stale writes: proof it can fail
//!   against real processes), plus a hand-written broken record that
//!   every rule of the checker must report;
//! - seeded random fault schedules over three hosts: a fixed list of
//!   seeds, then fresh ones, each printed with its replay command
//!   (`LEASEHOLD_FAULT_SCHEDULES`, default 20, sets the total;
//!   `LEASEHOLD_FAULT_SEED` replays one schedule). The hosts run the
//!   scheduler and the provisioner, which calls a fenced receiver in this
//!   process (a bucket every 250 ms, one in three with a lost or slow
//!   answer); the checker judges the receiver's record with the
//!   database's: no effect applied twice, no stale epoch accepted, every
//!   request's fence granted, and every bucket shown `Ready` backed by an
//!   applied `PUT`. Two seeds in three (those not divisible by 3, the
//!   unfenced control's among them) run the hosts with `[placement]
//!   enabled = true`, the others with it off (`LEASEHOLD_FAULT_PLACEMENT=
//!   on|off` forces either, a diagnostic); odd seeds run retention.
//!
//! Ordering comes from observable state (lease rows, a host's own
//! `/metrics` and `/readyz`) and from the proxy's strike channel; the only
//! sleeps are the ones a fault is made of (a pause or partition that must
//! outlast a ttl) and the random schedule's own clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_host::authority::postgres::holder_claim::CLAIM_APPLICATION;
use leasehold_host::testing::TestDatabase;
use leasehold_receiver::{Receiver, ReceiverConfig};
use leasehold_tests::faults::checker::{self, Rule};
use leasehold_tests::faults::rig::{Build, Rig, RigSpec, Timing};
use leasehold_tests::faults::schedule::{self, FaultKind, GUEST_COMMIT_MARK, Schedule};
use leasehold_tests::faults::seeds;
use leasehold_tests::http;
use leasehold_tests::process::eventually;
use leasehold_tests::proxy::{AtCommit, Mode};

const SCHEDULER: &str = "scheduler";

/// The controller that calls out: the random schedules run it next to the
/// scheduler, against a fenced receiver.
const PROVISIONER: &str = "provisioner";

/// How often the random schedules create a bucket for the provisioner: a
/// steady trickle of outbound requests (one in three with an uncertain
/// outcome) that adds little load to the scheduler's hosts.
const BUCKET_EVERY: Duration = Duration::from_millis(250);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Longest a fenced transaction stalled by its host (paused, partitioned,
/// or dead behind a partition) keeps the lease row locked: the server
/// ends an idle transaction after the host's statement bound, which is
/// what lets a successor in.
const STALLED_TRANSACTION: Duration = leasehold_host::timeouts::DATABASE_STATEMENT;

/// Slack for a debug build on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(1500);

/// The tests of this file run one at a time: each starts several debug
/// builds of the host on a small machine, and their timing assertions
/// (a handover within the ttl, an abort by the renew deadline) must not
/// measure another test's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `Assigned` events of `task`: (epoch, holder).
async fn assignments(rig: &Rig, task: &str) -> Vec<(i64, String)> {
    rig.sql()
        .await
        .query(
            "SELECT epoch, holder FROM leasehold_events
              WHERE cluster = $1 AND kind = 'tasks' AND name = $2 AND reason = 'Assigned'
              ORDER BY seq",
            &[&rig.cluster, &task],
        )
        .await
        .expect("read events")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Wait until `task` is assigned; returns its node.
async fn wait_assigned(rig: &Rig, task: &str, limit: Duration) -> String {
    eventually(&format!("task {task} is assigned"), limit, || async {
        let value = rig.task_value(task).await?;
        (value["status"] == "assigned").then(|| value["node"].as_str().unwrap_or("").to_string())
    })
    .await
}

/// Wait until host `i` reports it does not lead `lease` (by its own
/// metrics, no database needed); returns how long that took.
async fn wait_not_leading(rig: &Rig, i: usize, limit: Duration) -> Duration {
    let started = Instant::now();
    eventually(
        &format!("{} stops leading", rig.hosts[i].holder),
        limit,
        || async { (!rig.hosts[i].replica.leads(SCHEDULER).await?).then_some(()) },
    )
    .await;
    started.elapsed()
}

/// Wait until host `i` says, in `/readyz`, that it stands by for the
/// scheduler behind `holder`.
async fn wait_standby_behind(rig: &Rig, i: usize, holder: &str, limit: Duration) {
    eventually(
        &format!("{} stands by behind {holder}", rig.hosts[i].holder),
        limit,
        || async {
            let (_, body) = rig.hosts[i].replica.readyz().await?;
            let state = &body["controllers"][SCHEDULER];
            (state["state"] == "standby" && state["holder"] == holder).then_some(())
        },
    )
    .await;
}

/// Stop the workload, wait for the scheduler to catch up, and run the
/// checker; panics on any violation.
async fn finish(rig: &Rig, context: &str) -> checker::Report {
    rig.settled(secs(30)).await;
    let report = rig.check().await;
    eprintln!("{context}: {report}");
    report.assert_clean(context);
    report
}

/// The rules a missing fence breaks: a write placed outside its tenure by
/// commit order. (The unfenced build also counts its writes after COMMIT,
/// so a host killed in between leaves a [`Rule::WriteCount`] short; that
/// says nothing of the fence.)
const FENCE_RULES: [Rule; 3] = [
    Rule::CommittedAfterNextGrant,
    Rule::AfterRelease,
    Rule::WrongTenure,
];

/// Whether `report` shows a write out of its tenure's commit order.
fn breaks_the_fence(report: &checker::Report) -> bool {
    FENCE_RULES.iter().any(|rule| report.breaks(*rule))
}

/// Settle and run the checker before the assertions only the real build
/// can pass (which write landed, at which epoch). On the real build it is
/// one more verdict that must be clean. With `LEASEHOLD_FAULT_BUILD=unfenced`
/// (the diagnostic) the test stops here, at the checker's verdict, if it
/// reports a write out of commit order, instead of at its own assertion;
/// other violations are printed and the scenario goes on to its next fault.
async fn verdict_first(rig: &Rig, context: &str) {
    let context = format!("{context} (before the fenced-only assertions)");
    if Build::effective(Build::Fenced) == Build::Fenced {
        finish(rig, &context).await;
        return;
    }
    rig.settled(secs(30)).await;
    let report = rig.check().await;
    eprintln!("{context}: {report}");
    assert!(
        !breaks_the_fence(&report),
        "{context}: the checker caught the build without the fence:\n{report}"
    );
}

// 1. Orderly release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orderly_release_hands_over_at_once_and_records_released() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 20), ("n2", 20)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let standby = 1 - leader;
    let load = rig.workload("t", ms(40));
    load.wait_acknowledged(5, secs(20)).await;

    let signalled = Instant::now();
    rig.hosts[leader].replica.signal("TERM");
    let (next, next_epoch) = rig.leader_after(SCHEDULER, epoch, secs(10)).await;
    let handover = signalled.elapsed();
    let code = rig.hosts[leader].replica.exited(secs(15)).await;
    assert_eq!(code, Some(0), "SIGTERM is an orderly exit");
    assert_eq!((next, next_epoch), (standby, epoch + 1));
    eprintln!("orderly release: handover took {handover:?}");
    // A release, not an expiry: the standby did not wait for the ttl.
    assert!(
        handover < rig.timing().ttl,
        "handover after SIGTERM took {handover:?}, not less than the ttl"
    );
    let history = rig.history(SCHEDULER).await;
    let old = &history[epoch as usize - 1];
    assert_eq!(old.holder, rig.hosts[leader].holder);
    assert_eq!(old.end_reason.as_deref(), Some("released"), "{history:?}");

    load.wait_acknowledged(load.acknowledged() + 5, secs(20))
        .await;
    load.stop().await;
    finish(&rig, "orderly release").await;
}

// 2. Cancelled controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_controller_releases_its_lease_and_keeps_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut spec = RigSpec::scheduler(1);
    spec.controllers = vec![SCHEDULER, "rollout"];
    let mut rig = Rig::start(spec).await;
    rig.nodes(&[("n1", 10)]).await;
    let (host, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    rig.task(host, "before").await;
    wait_assigned(&rig, "before", secs(15)).await;
    let rollout = eventually("host-0 leads rollout", secs(15), || async {
        let row = rig.lease("rollout").await?;
        (row.active && row.holder == "host-0").then_some(row.epoch)
    })
    .await;

    // The scheduler is removed from the config and the host told to reload
    // it (SIGHUP): it stops the scheduler and keeps running, rollout
    // keeping its tenure.
    rig.set_controllers(host, &["rollout"]);
    rig.hosts[host].replica.signal("HUP");
    eventually("the scheduler's lease is released", secs(20), || async {
        rig.lease(SCHEDULER).await.filter(|row| row.released)
    })
    .await;
    // The same process: the test never restarts it, so a host that exited
    // on SIGHUP would not be running.
    assert!(rig.hosts[host].replica.running(), "the host stopped");
    let row = rig.lease("rollout").await.expect("rollout lease");
    assert!(
        row.active && row.holder == "host-0" && row.epoch == rollout,
        "rollout lost its tenure: {row:?}"
    );

    // The scheduler's lease is released, its tenure ended as such, and the
    // host no longer runs or reports it.
    let lease = rig.lease(SCHEDULER).await.expect("lease row");
    assert!(lease.released && !lease.active, "{lease:?}");
    assert_eq!(lease.epoch, epoch);
    let history = rig.history(SCHEDULER).await;
    assert_eq!(
        history.last().and_then(|t| t.end_reason.as_deref()),
        Some("released"),
        "{history:?}"
    );
    let (_, ready) = rig.hosts[host].replica.readyz().await.expect("readyz");
    assert!(
        ready["controllers"].get(SCHEDULER).is_none(),
        "a removed controller is still reported: {ready}"
    );
    assert_eq!(rig.hosts[host].replica.leads(SCHEDULER).await, None);

    // Nothing is retained: no session holds a lock on the lease row (a
    // NOWAIT lock succeeds), no advisory lock exists, no session idles in
    // a transaction.
    let sql = rig.sql().await;
    let tx = sql.simple_query("BEGIN").await.map(|_| ());
    tx.expect("begin");
    sql.query(
        "SELECT 1 FROM leasehold_leases WHERE cluster = $1 AND name = $2 FOR UPDATE NOWAIT",
        &[&rig.cluster, &SCHEDULER],
    )
    .await
    .expect("nobody holds a lock on the released lease row");
    sql.simple_query("ROLLBACK").await.expect("rollback");
    let retained: i64 = sql
        .query_one(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
              WHERE a.datname = $1 AND a.pid <> pg_backend_pid()
                AND ((l.locktype = 'advisory' AND a.application_name NOT LIKE $2 || '%')
                     OR a.state LIKE 'idle in transaction%')",
            &[&rig.database_name(), &CLAIM_APPLICATION],
        )
        .await
        .expect("pg_locks")
        .get(0);
    assert_eq!(retained, 0, "sessions retain locks");

    // A host that runs the scheduler takes the released lease without
    // waiting for any expiry, at the next epoch.
    let newcomer = rig.add_host(&[SCHEDULER]).await;
    let (next, next_epoch) = rig.leader_after(SCHEDULER, epoch, secs(10)).await;
    assert_eq!((next, next_epoch), (newcomer, epoch + 1));
    rig.task(newcomer, "after").await;
    wait_assigned(&rig, "after", secs(15)).await;
    finish(&rig, "removed controller").await;
}

// 3. Abrupt kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_hands_over_within_the_ttl() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 60), ("n2", 60)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let load = rig.workload("t", ms(40));
    load.wait_acknowledged(5, secs(20)).await;

    let killed = Instant::now();
    rig.hosts[leader].replica.kill().await;
    let (next, next_epoch) = rig.leader_after(SCHEDULER, epoch, secs(15)).await;
    let handover = killed.elapsed();
    let timing = rig.timing();
    eprintln!("SIGKILL: handover took {handover:?} (ttl {:?})", timing.ttl);
    assert_eq!((next, next_epoch), (1 - leader, epoch + 1));
    // The row expires a ttl after the last renewal; the standby polls at
    // the renew interval.
    assert!(
        handover <= timing.ttl + timing.renew_interval + SLACK,
        "handover after SIGKILL took {handover:?}"
    );
    let history = rig.history(SCHEDULER).await;
    assert!(
        matches!(
            history[epoch as usize - 1].end_reason.as_deref(),
            Some("expired" | "superseded")
        ),
        "{history:?}"
    );

    // The killed host comes back as a standby.
    rig.hosts[leader].replica.restart();
    rig.hosts[leader].replica.wait_healthy(secs(60)).await;
    wait_standby_behind(&rig, leader, &rig.hosts[next].holder, secs(15)).await;
    load.wait_acknowledged(load.acknowledged() + 5, secs(20))
        .await;
    load.stop().await;
    finish(&rig, "abrupt kill").await;
}

// 4. Dropped database connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_sessions_never_let_two_hosts_write() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 150), ("n2", 150)]).await;
    let (_, mut epoch) = rig.leader(SCHEDULER, secs(30)).await;
    // A rate the example scheduler keeps up with in a debug build.
    let load = rig.workload("t", ms(80));
    load.wait_acknowledged(5, secs(20)).await;
    let (mut recovered, mut moved) = (0, 0);
    for round in 0..4 {
        let (leader, _) = rig.leader(SCHEDULER, secs(15)).await;
        let terminated = rig.terminate_backends(leader).await;
        assert!(terminated > 0, "no session of the leader was found");
        // Either the leader recovers its lease (new sessions, same epoch)
        // or it detects the loss and a new epoch is granted; both are
        // followed by progress.
        let before = load.acknowledged();
        load.wait_acknowledged(before + 5, secs(20)).await;
        rig.settled(secs(20)).await;
        let (now, now_epoch) = rig.leader(SCHEDULER, secs(15)).await;
        if now_epoch == epoch {
            assert_eq!(now, leader);
            recovered += 1;
        } else {
            moved += 1;
        }
        eprintln!(
            "round {round}: terminated {terminated} session(s) of host-{leader}; host-{now} leads at epoch {now_epoch}"
        );
        epoch = now_epoch;
    }
    eprintln!("terminated sessions: recovered {recovered}, moved {moved}");

    // Terminated, and unable to open new sessions for longer than the renew
    // deadline: the leader cannot recover, detects the loss and aborts; the
    // other host leads once the lease expired.
    let (leader, epoch) = rig.leader(SCHEDULER, secs(15)).await;
    let timing = rig.timing();
    let terminated = rig.terminate_backends(leader).await;
    rig.hosts[leader].proxy.set(Mode::Reset);
    let aborted = wait_not_leading(&rig, leader, timing.renew_deadline + SLACK * 2).await;
    let (next, next_epoch) = rig
        .leader_after(SCHEDULER, epoch, timing.ttl + SLACK * 2)
        .await;
    assert_eq!((next, next_epoch), (1 - leader, epoch + 1));
    eprintln!(
        "terminated {terminated} session(s) and refused reconnects: host-{leader} stopped leading after {aborted:?}, host-{next} leads at epoch {next_epoch}"
    );
    rig.hosts[leader].proxy.set(Mode::Pass);
    wait_standby_behind(&rig, leader, &rig.hosts[next].holder, secs(20)).await;
    load.wait_acknowledged(load.acknowledged() + 5, secs(20))
        .await;
    load.stop().await;
    finish(&rig, "terminated sessions").await;
}

// 5. Network partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_aborts_and_its_in_flight_commit_is_refused() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 20), ("n2", 20)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let standby = 1 - leader;
    rig.task(standby, "warm-up").await;
    rig.settled(secs(15)).await;

    // The partition strikes while the leader's COMMIT is in flight: the
    // server has run the fence check and the writes, and waits for it.
    let struck = rig.hosts[leader]
        .proxy
        .arm_carrying(AtCommit::Partition, GUEST_COMMIT_MARK);
    rig.task(standby, "in-flight").await;
    tokio::time::timeout(secs(15), struck)
        .await
        .expect("the leader commits the assignment")
        .expect("strike reported");
    let partitioned = Instant::now();
    let load = rig.workload("t", ms(50));

    // The leader aborts its guest by its own renew deadline.
    let timing = rig.timing();
    let aborted = wait_not_leading(&rig, leader, timing.renew_deadline + SLACK * 2).await;
    eprintln!(
        "partition: the leader stopped leading after {aborted:?} (renew deadline {:?})",
        timing.renew_deadline
    );
    // The standby leads once the lease expired and the stalled commit no
    // longer holds the lease row.
    let (next, next_epoch) = rig
        .leader_after(
            SCHEDULER,
            epoch,
            timing.ttl + STALLED_TRANSACTION + SLACK * 2,
        )
        .await;
    // Healed as soon as the successor leads: the real build's grant came
    // only once the server had ended the stalled transaction, so the held
    // COMMIT finds nothing to commit; a build without the fence grants
    // without waiting, and the COMMIT, delivered while the server still
    // waits for it, lands after the grant (the checker's verdict below).
    rig.hosts[leader].proxy.set(Mode::Pass);
    eprintln!(
        "partition: the standby leads, and the partition healed, {:?} after the strike",
        partitioned.elapsed()
    );
    assert_eq!((next, next_epoch), (standby, epoch + 1));

    // The in-flight assignment never landed under the old epoch: the task
    // is assigned once, by the successor.
    wait_assigned(&rig, "in-flight", secs(15)).await;
    verdict_first(&rig, "network partition").await;
    let assigned = assignments(&rig, "in-flight").await;
    assert_eq!(
        assigned,
        vec![(epoch + 1, rig.hosts[standby].holder.clone())],
        "the in-flight commit of epoch {epoch} must be refused"
    );

    // The old leader rejoins as a standby.
    wait_standby_behind(&rig, leader, &rig.hosts[standby].holder, secs(20)).await;
    load.wait_acknowledged(load.acknowledged() + 5, secs(20))
        .await;
    load.stop().await;
    finish(&rig, "network partition").await;
}

// 6. Wrong database identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_database_changes_identity_refuses_to_lead_and_says_why() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let rig = Rig::start(RigSpec::scheduler(2)).await;
    // Another Leasehold database on the same server: its own identity row.
    let other = TestDatabase::create().await;
    let other_name = url::Url::parse(other.url())
        .unwrap()
        .path()
        .trim_start_matches('/')
        .to_string();
    rig.nodes(&[("n1", 20)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let standby = 1 - leader;
    let load = rig.workload("t", ms(60));
    load.wait_acknowledged(3, secs(20)).await;

    // The leader's connection string now reaches the other database (as
    // after a DNS change or a restore into the wrong place): new sessions
    // go there, and every open one is cut so the host reconnects.
    let proxy = &rig.hosts[leader].proxy;
    proxy.redirect_database(Some(&other_name));
    proxy.set(Mode::Reset);
    eventually("the leader's sessions are closed", secs(5), || async {
        proxy.upstream_ports().is_empty().then_some(())
    })
    .await;
    proxy.set(Mode::Pass);

    // The standby takes over in the real database...
    let (next, next_epoch) = rig
        .leader_after(SCHEDULER, epoch, rig.timing().ttl + SLACK * 3)
        .await;
    assert_eq!((next, next_epoch), (standby, epoch + 1));
    // ...and the redirected host says why it does not lead.
    let ready = eventually(
        "the redirected host reports the identity change in /readyz",
        secs(20),
        || async {
            let (status, body) = rig.hosts[leader].replica.readyz().await?;
            let reason = body["database"]["reason"].as_str()?.to_string();
            (status == 503 && body["database"]["state"] == "failing" && reason.contains("identity"))
                .then_some(body)
        },
    )
    .await;
    eprintln!("wrong database: /readyz says {ready}");
    wait_not_leading(&rig, leader, secs(5)).await;
    // Its API refuses writes it would make into the other database.
    let refused = http::put(
        &rig.hosts[leader].replica.addr,
        "/v1/objects/tasks/wrong-database",
        r#"{"status": "pending"}"#,
    )
    .await
    .expect("the redirected host answers");
    assert_eq!(refused.status, 503, "{refused:?}");
    // It never led in the other database either.
    let (client, connection) = tokio_postgres::connect(other.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let granted: i64 = client
        .query_one(
            "SELECT count(*) FROM leasehold_leases WHERE cluster = $1",
            &[&rig.cluster],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        granted, 0,
        "the redirected host acquired a lease in a database whose identity differs from the one it verified"
    );

    // Pointed back, it is ready again and stands by.
    proxy.redirect_database(None);
    proxy.set(Mode::Reset);
    eventually(
        "the sessions to the other database close",
        secs(5),
        || async { proxy.upstream_ports().is_empty().then_some(()) },
    )
    .await;
    proxy.set(Mode::Pass);
    wait_standby_behind(&rig, leader, &rig.hosts[standby].holder, secs(30)).await;
    load.stop().await;
    finish(&rig, "wrong database identity").await;
}

// 7. Uncertain external completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_dying_with_its_commit_in_flight_never_causes_a_double_assignment() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 10), ("n2", 10)]).await;
    let (mut leader, mut epoch) = rig.leader(SCHEDULER, secs(30)).await;
    rig.task(1 - leader, "warm-up").await;
    rig.settled(secs(15)).await;

    // First the COMMIT reaches the server and only the reply is lost; then
    // the COMMIT itself is lost; then it is delayed in the network (held
    // by the proxy) past the leader's death and delivered once the
    // successor leads. Either way the leader dies not knowing.
    for (at, task) in [
        (AtCommit::LoseReply, "reply-lost"),
        (AtCommit::LoseCommit, "commit-lost"),
        (AtCommit::Hold, "commit-delayed"),
    ] {
        let standby = 1 - leader;
        let struck = rig.hosts[leader].proxy.arm_carrying(at, GUEST_COMMIT_MARK);
        rig.task(standby, task).await;
        tokio::time::timeout(secs(15), struck)
            .await
            .expect("the leader commits the assignment")
            .expect("strike reported");
        let died = Instant::now();
        rig.hosts[leader].replica.kill().await;
        // The real build's successor waits for a delayed commit's
        // transaction (it holds the lease row) until the server ends it.
        let limit = match at {
            AtCommit::Hold => rig.timing().ttl + STALLED_TRANSACTION + SLACK * 2,
            _ => rig.timing().ttl + SLACK * 2,
        };
        let (next, next_epoch) = rig.leader_after(SCHEDULER, epoch, limit).await;
        if at == AtCommit::Hold {
            // Delivered as soon as the successor leads: too late on the
            // real build, after the grant without the fence.
            rig.hosts[leader].proxy.release();
            eprintln!(
                "{at:?}: epoch {next_epoch} granted and the delayed COMMIT delivered {:?} after the leader died",
                died.elapsed()
            );
        }
        assert_eq!((next, next_epoch), (standby, epoch + 1));
        wait_assigned(&rig, task, secs(15)).await;
        verdict_first(&rig, &format!("uncertain completion, {at:?}")).await;
        let assigned = assignments(&rig, task).await;
        let expected = match at {
            // Committed before the leader died: the successor finds it done.
            AtCommit::LoseReply => vec![(epoch, rig.hosts[leader].holder.clone())],
            // Rolled back when its session closed (or, delayed, when the
            // server ended it idle): the successor does it.
            _ => vec![(epoch + 1, rig.hosts[standby].holder.clone())],
        };
        assert_eq!(assigned, expected, "{at:?}");
        eprintln!(
            "{at:?}: task {task} assigned once, at epoch {}",
            assigned[0].0
        );
        rig.hosts[leader].replica.restart();
        rig.hosts[leader].replica.wait_healthy(secs(60)).await;
        (leader, epoch) = (next, next_epoch);
    }
    finish(&rig, "uncertain completion").await;
}

// 8. Process pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_never_writes_with_its_old_epoch() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 40), ("n2", 40)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let timing = rig.timing();

    // a) Paused at an arbitrary moment under load, past its ttl.
    let load = rig.workload("t", ms(40));
    load.wait_acknowledged(5, secs(20)).await;
    rig.hosts[leader].replica.signal("STOP");
    let (next, next_epoch) = rig
        .leader_after(
            SCHEDULER,
            epoch,
            timing.ttl + STALLED_TRANSACTION + SLACK * 2,
        )
        .await;
    assert_eq!((next, next_epoch), (1 - leader, epoch + 1));
    // The successor writes before the paused host resumes.
    load.wait_acknowledged(load.acknowledged() + 3, secs(20))
        .await;
    rig.settled(secs(20)).await;
    rig.hosts[leader].replica.signal("CONT");
    let resumed = wait_not_leading(&rig, leader, secs(10)).await;
    eprintln!("pause: the resumed host knew it had lost the lease within {resumed:?}");
    wait_standby_behind(&rig, leader, &rig.hosts[next].holder, secs(15)).await;
    load.stop().await;
    finish(&rig, "process pause (a)").await;

    // b) Paused between its last statement and its COMMIT: the server
    // holds its transaction (and the lease row) open.
    let (leader, epoch) = (next, next_epoch);
    let struck = rig.hosts[leader]
        .proxy
        .arm_carrying(AtCommit::Hold, GUEST_COMMIT_MARK);
    rig.task(1 - leader, "paused-commit").await;
    tokio::time::timeout(secs(15), struck)
        .await
        .expect("the leader commits the assignment")
        .expect("strike reported");
    rig.hosts[leader].replica.signal("STOP");
    let (next, next_epoch) = rig
        .leader_after(
            SCHEDULER,
            epoch,
            timing.ttl + STALLED_TRANSACTION + SLACK * 2,
        )
        .await;
    // Resumed as soon as the successor leads: its COMMIT finally goes out,
    // and must not land. On the real build the grant came only once the
    // server had ended the paused transaction; without the fence it came
    // at once, and the COMMIT lands after it (the checker's verdict).
    rig.hosts[leader].proxy.release();
    rig.hosts[leader].replica.signal("CONT");
    assert_eq!((next, next_epoch), (1 - leader, epoch + 1));
    wait_assigned(&rig, "paused-commit", secs(15)).await;
    wait_standby_behind(&rig, leader, &rig.hosts[next].holder, secs(15)).await;
    verdict_first(&rig, "process pause (b)").await;
    assert_eq!(
        assignments(&rig, "paused-commit").await,
        vec![(epoch + 1, rig.hosts[next].holder.clone())],
        "the paused commit of epoch {epoch} must not land"
    );
    finish(&rig, "process pause (b)").await;
}

/// A step of the database clock (an NTP correction, or a failover to a
/// server whose clock is ahead) makes the database judge the leader's
/// lease expired while the leader, by its own monotonic clock, still holds
/// it until its next renewal: the one window in which only the fence stands
/// between the old leader's writes and the new leader's. The step is made
/// by moving the lease row's expiry to the database's "now", just after a
/// renewal. The old leader renews only every 1.5 s; the successor polls
/// every 100 ms, so it is granted the lease early in that window; its own
/// database link is then slowed (250 ms per chunk), so for the rest of the
/// window the old leader, fed a steady stream of tasks, does the writing.
///
/// Why not a pause (SIGSTOP past the ttl, then SIGCONT) for the broken
/// build: with the fence check disabled, a paused leader still does not
/// write stale. On resume its supervisor sees the renew deadline long past
/// and aborts the guest before the guest can finish a round trip, and a
/// transaction the pause caught after its write count holds the tenure row,
/// which the successor's grant must update, so the grant waits for it.
/// Tried (six pauses, half of them exactly at a COMMIT): zero violations.
/// Only a lease that expires in the database while the holder still
/// believes it valid leaves the fence as the sole guard.
///
/// Returns the checker's report and what the old leader's own `/metrics`
/// counted of refused writes; `build` decides whether the fence is on.
async fn clock_step(build: Build) -> (checker::Report, Refusals) {
    let slow_renewer = Timing {
        ttl: ms(4000),
        renew_interval: ms(1500),
        // At least twice the interval (a deadline always spans two
        // renewals), and still a second below the ttl.
        renew_deadline: ms(3000),
    };
    let quick_standby = Timing {
        ttl: ms(4000),
        renew_interval: ms(100),
        renew_deadline: ms(2500),
    };
    let mut rig = Rig::start(RigSpec {
        hosts: 1,
        timing: slow_renewer,
        controllers: vec![SCHEDULER],
        build,
        controller_config: Default::default(),
        log_reconciles: false,
        placement: None,
        components: Default::default(),
    })
    .await;
    rig.nodes(&[("n1", 500), ("n2", 500)]).await;
    let (old, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let standby = rig.add_host_with(&[SCHEDULER], quick_standby).await;
    wait_standby_behind(&rig, standby, &rig.hosts[old].holder, secs(15)).await;
    let load = rig.workload_via(&[old], "t", ms(15));
    load.wait_acknowledged(10, secs(20)).await;

    let sql = rig.sql().await;
    eventually("the clock steps just after a renewal", secs(10), || async {
        let stepped = sql
            .execute(
                "UPDATE leasehold_leases SET expires_at = clock_timestamp()
                  WHERE cluster = $1 AND name = $2 AND epoch = $3
                    AND renewed_at > clock_timestamp() - interval '100 milliseconds'",
                &[&rig.cluster, &SCHEDULER, &epoch],
            )
            .await
            .expect("step the clock");
        (stepped == 1).then_some(())
    })
    .await;
    let (next, next_epoch) = rig.leader_after(SCHEDULER, epoch, secs(10)).await;
    assert_eq!((next, next_epoch), (standby, epoch + 1));
    rig.hosts[standby].proxy.set(Mode::Latency(ms(250)));
    // The old leader learns of the loss at its next renewal at the latest
    // (or, fenced, at its first refused write).
    let learned = wait_not_leading(&rig, old, secs(10)).await;
    rig.hosts[standby].proxy.set(Mode::Pass);
    eprintln!("clock step ({build:?}): the old leader stopped leading {learned:?} after the grant");
    load.wait_acknowledged(load.acknowledged() + 5, secs(20))
        .await;
    load.stop().await;
    rig.settled(secs(30)).await;
    // Read while the old leader still runs (the rig stops it when dropped).
    let refusals = Refusals::of(&rig, old).await;
    let report = rig.check().await;
    eprintln!("clock step ({build:?}): {report}; old leader: {refusals:?}");
    (report, refusals)
}

/// What a host's own `/metrics` counted of the scheduler's writes refused
/// as stale.
#[derive(Debug)]
struct Refusals {
    /// `leasehold_commits_total{result="fenced"}`: guest commits refused as
    /// fenced (by the database's fence check, or by the host for a guest it
    /// had already revoked).
    commits: f64,
    /// `leasehold_losses_total{reason="fenced"}`: tenures that ended
    /// because a commit was refused as fenced. A revoked guest's refusals
    /// come after its tenure ended for another reason, so only the
    /// database's fence check counts here.
    losses: f64,
}

impl Refusals {
    async fn of(rig: &Rig, host: usize) -> Self {
        let replica = &rig.hosts[host].replica;
        let read = |series: String| async move {
            replica
                .metric(&series)
                .await
                .unwrap_or_else(|| panic!("{} exports no {series}", replica.name))
        };
        Self {
            commits: read(format!(
                "leasehold_commits_total{{controller=\"{SCHEDULER}\",result=\"fenced\"}}"
            ))
            .await,
            losses: read(format!(
                "leasehold_losses_total{{controller=\"{SCHEDULER}\",reason=\"fenced\"}}"
            ))
            .await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_clock_step_is_caught_by_the_fence() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (report, refusals) = clock_step(Build::Fenced).await;
    report.assert_clean("database clock step");
    // The old leader did try to write with its old epoch, and the fence
    // refused it: that refusal is how it learned of the loss.
    assert!(
        refusals.commits >= 1.0 && refusals.losses >= 1.0,
        "the old leader's writes were never refused by the fence ({refusals:?}): the clock step proved nothing"
    );
}

/// The checker can fail: on the deliberately broken build (the fence check
/// disabled), the same clock step lets the old leader's writes land after
/// the successor's grant, and the checker must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_stale_writes_of_a_build_without_the_fence() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let (report, refusals) = clock_step(Build::Unfenced).await;
    // Nothing refused the old leader's writes: what the fenced build shows
    // as refusals appears here as stale writes.
    assert_eq!(
        refusals.losses, 0.0,
        "a write was refused as fenced by a build without the fence check: {refusals:?}"
    );
    assert!(
        report.breaks(Rule::CommittedAfterNextGrant),
        "the unfenced build wrote with a stale epoch, but the checker did not notice:\n{report}"
    );
}

/// The randomized mode: seeded fault schedules over three hosts while
/// tasks keep arriving. Which seeds run is `leasehold_tests::faults::seeds`'
/// choice: the fixed list CI replays, then fresh seeds from the OS, each
/// printed with its replay command before it runs (`LEASEHOLD_FAULT_SEED`
/// replays one; `LEASEHOLD_FAULT_SCHEDULES` sets the total, default 20).
///
/// Besides every invariant, the run must hand the lease over: each schedule
/// at least once per tenure its faults certainly ended (a kill, an orderly
/// restart or the end of the liveness session of the active leader, see
/// `Struck::leader_epochs`), and a run of [`AVERAGE_FROM`] schedules or
/// more at least once per schedule on average. That second bound is not a
/// certainty, it is a margin: with a strike at the leader's COMMIT first,
/// then 4 to 7 faults per schedule, about two thirds of them striking the
/// leader, 20 schedules gave 73 handovers (3.65 per schedule, 25 of them
/// certain, no schedule without two), and a run below one per schedule
/// means the faults stopped reaching the leader. Such a run must also have
/// ended at least one liveness session if it drew that kind (a rig that no
/// longer finds the session would strike nothing).
///
/// With `LEASEHOLD_FAULT_BUILD=unfenced` (a diagnostic, never in CI) every
/// schedule runs on the build without the fence and the run counts the
/// schedules whose checker report places a write out of its tenure by
/// commit order (`FENCE_RULES`) instead of stopping at the first: it
/// prints "caught in N of M schedules" and fails unless most schedules
/// caught it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_fault_schedules_keep_every_invariant() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let plan = seeds::plan_from_env().unwrap_or_else(|e| panic!("{e}"));
    let build = Build::effective(Build::Fenced);
    eprintln!(
        "random fault schedules ({build:?} build): {} schedule(s): {}",
        plan.len(),
        plan.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let started = Instant::now();
    let mut mix: std::collections::BTreeMap<FaultKind, usize> = Default::default();
    let (mut handovers, mut certain) = (0, 0);
    let (mut struck_commits, mut missed_commits) = (0, 0);
    let mut liveness_ended = 0;
    let mut caught: Vec<u64> = Vec::new();
    for (n, planned) in plan.iter().enumerate() {
        let seed = planned.seed;
        let schedule = Schedule::generate(seed, schedule::HOSTS, Timing::FAST);
        eprintln!(
            "[{}/{}] {planned}: replay with: {}",
            n + 1,
            plan.len(),
            seeds::replay_command(seed)
        );
        eprintln!(
            "[{}/{}] {schedule}; placement {}, scheduler shards {}, retention {}",
            n + 1,
            plan.len(),
            if placement_for(seed) { "on" } else { "off" },
            scheduler_shards(seed, build).unwrap_or(1),
            if retention_on(seed, build) {
                "on"
            } else {
                "off"
            }
        );
        let at = Instant::now();
        let ran = run_schedule(&schedule, build).await;
        handovers += ran.handovers;
        certain += ran.certain;
        struck_commits += ran.struck.commits_struck;
        missed_commits += ran.struck.commits_missed;
        liveness_ended += ran.struck.liveness_ended;
        for (kind, count) in schedule.mix() {
            *mix.entry(kind).or_default() += count;
        }
        if breaks_the_fence(&ran.report) {
            caught.push(seed);
        }
        let verdict = if ran.report.violations.is_empty() {
            "clean".to_string()
        } else {
            format!("{} violation(s)", ran.report.violations.len())
        };
        eprintln!(
            "[{}/{}] seed {seed}: {verdict} in {:?}; {} handover(s), {} certain; {} of {} fault(s) at a commit struck; {} of {} liveness session(s) ended; {}",
            n + 1,
            plan.len(),
            at.elapsed(),
            ran.handovers,
            ran.certain,
            ran.struck.commits_struck,
            ran.struck.commits_struck + ran.struck.commits_missed,
            ran.struck.liveness_ended,
            schedule
                .mix()
                .get(&FaultKind::TerminateLiveness)
                .copied()
                .unwrap_or(0),
            ran.report
        );
    }
    let schedules = plan.len() as i64;
    eprintln!(
        "random fault schedules ({build:?} build): {schedules} schedule(s), fault mix {mix:?}, {struck_commits} commit(s) struck in flight ({missed_commits} fault(s) at a commit found none), {liveness_ended} of {} liveness-session termination(s) ended a session, {handovers} scheduler handovers ({certain} certain), {} schedule(s) with writes out of commit order, {:?}",
        mix.get(&FaultKind::TerminateLiveness).copied().unwrap_or(0),
        caught.len(),
        started.elapsed()
    );
    if build == Build::Unfenced {
        eprintln!(
            "the unfenced build was caught in {} of {schedules} schedules (seeds {caught:?})",
            caught.len()
        );
        assert!(
            2 * caught.len() as i64 > schedules,
            "the checker caught the build without the fence in only {} of {schedules} schedules (seeds {caught:?})",
            caught.len()
        );
        return;
    }
    if schedules >= AVERAGE_FROM {
        // A rig that stopped finding the liveness session (a renamed
        // session, a session that bypasses the proxy) would strike nothing
        // while the mix still counts the kind.
        assert!(
            liveness_ended > 0 || !mix.contains_key(&FaultKind::TerminateLiveness),
            "{schedules} schedules struck {:?} liveness-session terminations, and none found a session to end",
            mix.get(&FaultKind::TerminateLiveness)
        );
        assert!(
            handovers >= schedules,
            "{schedules} schedules handed the scheduler's lease over only {handovers} time(s): fewer than one per schedule"
        );
    }
}

/// How many times the control plays a seed whose fault at a commit found
/// no commit in flight.
const UNFENCED_ATTEMPTS: u32 = 4;

/// The checker catches a build without the fence in random schedules, in
/// CI: a few fixed seeds (`seeds::UNFENCED`) whose first fault struck the
/// leader's guest commit in flight run on the unfenced build, and each
/// report must show a write committed after the next grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_build_without_the_fence_in_random_schedules() {
    let _serial = ONE_AT_A_TIME.lock().await;
    for seed in seeds::UNFENCED {
        let schedule = Schedule::generate(seed, schedule::HOSTS, Timing::FAST);
        eprintln!(
            "unfenced {schedule}; placement {}",
            if placement_for(seed) { "on" } else { "off" }
        );
        // The control proves something only if its fault struck the
        // leader's commit in flight; a leader that made no commit within
        // the fault's arming window (a loaded machine slows the scheduler)
        // leaves nothing to catch, so the seed is played again, a bounded
        // number of times.
        let mut attempt = 1;
        let (at, ran) = loop {
            let at = Instant::now();
            let ran = run_schedule(&schedule, Build::Unfenced).await;
            if ran.struck.commits_struck > 0 || attempt == UNFENCED_ATTEMPTS {
                break (at, ran);
            }
            eprintln!(
                "unfenced seed {seed}: no commit in flight to strike (attempt {attempt} of {UNFENCED_ATTEMPTS}); playing it again"
            );
            attempt += 1;
        };
        assert!(
            ran.struck.commits_struck > 0,
            "seed {seed}: in {UNFENCED_ATTEMPTS} attempts the fault at a commit never found the leader's commit in flight; the control proves nothing without it"
        );
        eprintln!(
            "unfenced seed {seed}: {} of {} fault(s) at a commit struck, in {:?}; {}",
            ran.struck.commits_struck,
            ran.struck.commits_struck + ran.struck.commits_missed,
            at.elapsed(),
            ran.report
        );
        assert!(
            ran.report.breaks(Rule::CommittedAfterNextGrant),
            "seed {seed}: a build without the fence ran a schedule striking the leader's commit in flight ({} struck), and the checker reported no write committed after the next grant:\n{}; replay with: LEASEHOLD_FAULT_BUILD=unfenced {}",
            ran.struck.commits_struck,
            ran.report,
            seeds::replay_command(seed)
        );
    }
}

/// Whether the schedule of `seed` on `build` runs with retention on (every
/// other seed, so the fixed seeds play both): a trimmer with
/// [`SCHEDULE_RETENTION`] runs over the cluster for the whole fault phase,
/// and the checker judges the trimmed history ([`checker::check_all`]).
/// Never on the build without the fence: tenure retention would trim the
/// very tenures whose stale writes the control must show (a schedule with
/// more handovers than tenures kept leaves the struck tenure unjudged, as
/// seed 11 did once placement spread the leases).
fn retention_on(seed: u64, build: Build) -> bool {
    build == Build::Fenced && seed % 2 == 1
}

/// Whether the hosts of the schedule of `seed` run with `[placement]
/// enabled = true` (two seeds in three; the third runs without it, as a
/// host configured `enabled = false` does, so both are judged, and the
/// residues modulo 6 cross it with [`retention_on`]). With placement the
/// two leases of a schedule's three hosts (the scheduler's and the
/// provisioner's) are spread: a fair share of one lease per host, a lease
/// taken beyond it only when it lapsed or no other live host is below its
/// share. The fixed unfenced seeds (`seeds::UNFENCED`) all run with it, so
/// the control proves the checker can fail with placement on.
const fn placement_on(seed: u64) -> bool {
    !seed.is_multiple_of(3)
}

/// How many shards the example scheduler runs as in the schedule of
/// `seed` on `build`: 2 for half the seeds of the fenced build (seeds whose
/// quotient by 2 is odd, so the residues modulo 12 cross it with
/// [`retention_on`] and [`placement_on`]), else unsharded (`None`). Sharded,
/// the scheduler's two shards each place their own tasks and race for the
/// shared nodes through conditional writes, and the checker judges each
/// shard's lease like any lease: no write after the next grant of its own
/// lease, no task assigned twice, no node over capacity, every change of
/// a shard's own objects (and of every node) reaching that shard. The
/// faults aim at shard 0's leader. Never on the build without the fence:
/// the control stays the one it was. [`SHARDS_ENV`] overrides it.
fn scheduler_shards(seed: u64, build: Build) -> Option<u32> {
    let default = build == Build::Fenced && (seed / 2) % 2 == 1;
    let on = match std::env::var(SHARDS_ENV).as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        Ok("") | Err(_) => default,
        Ok(other) => panic!("{SHARDS_ENV}={other:?}: expected \"on\" or \"off\""),
    };
    on.then_some(2)
}

/// Diagnostic: `LEASEHOLD_FAULT_SHARDS=on|off` runs every schedule with the
/// scheduler sharded (2 shards) or not, whatever its seed says. Never set
/// in CI.
const SHARDS_ENV: &str = "LEASEHOLD_FAULT_SHARDS";

/// Diagnostic: `LEASEHOLD_FAULT_PLACEMENT=on|off` runs every schedule
/// with placement on or off whatever its seed says (to compare a seed
/// both ways). Never set in CI.
const PLACEMENT_ENV: &str = "LEASEHOLD_FAULT_PLACEMENT";

/// [`placement_on`] unless [`PLACEMENT_ENV`] overrides it.
fn placement_for(seed: u64) -> bool {
    match std::env::var(PLACEMENT_ENV).as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        Ok("") | Err(_) => placement_on(seed),
        Ok(other) => panic!("{PLACEMENT_ENV}={other:?}: expected \"on\" or \"off\""),
    }
}

// The unfenced control runs with placement on.
const _: () = {
    let mut i = 0;
    while i < seeds::UNFENCED.len() {
        assert!(placement_on(seeds::UNFENCED[i]));
        i += 1;
    }
};

/// Retention in the schedules that run with it: ages short enough that
/// events, changes and tenures of the schedule itself are trimmed while
/// it runs (the config's minimum is a minute; the trimmer is the hosts'
/// own code, run by the rig).
const SCHEDULE_RETENTION: leasehold_host::store::retention::Policy =
    leasehold_host::store::retention::Policy {
        event_retention: Duration::from_secs(3),
        tenure_retention: 3,
        batch: 50,
    };

/// The finalizer workload's pace in the random schedules.
const HOLD_EVERY: Duration = Duration::from_millis(150);

/// Runs of at least this many schedules must average a handover per
/// schedule: below it, one quiet schedule (no fault at the leader) is a
/// fair share of the run.
const AVERAGE_FROM: i64 = 10;

/// What one schedule showed.
struct Ran {
    report: checker::Report,
    /// Epochs granted after the faults began (tenure history).
    handovers: i64,
    /// Handovers its faults made certain.
    certain: i64,
    /// What struck.
    struck: schedule::Struck,
}

/// One schedule on `build` (unless `LEASEHOLD_FAULT_BUILD` overrides it):
/// three hosts, nodes, a steady stream of tasks through whichever host
/// answers, the faults, then convergence and the checker. On the real
/// build any violation fails the test here; on the unfenced one the report
/// is the caller's to judge.
async fn run_schedule(schedule: &Schedule, build: Build) -> Ran {
    let seed = schedule.seed;
    let replay = format!("replay with: {}", seeds::replay_command(seed));
    // The provisioner calls a fenced receiver in this process; the
    // checker judges its record with the database's.
    let receiver = Receiver::start(ReceiverConfig::default().with_test_hooks(true))
        .await
        .expect("start the fenced receiver");
    let endpoint = receiver.url();
    let spec = RigSpec {
        hosts: schedule.hosts,
        timing: Timing::FAST,
        controllers: vec![SCHEDULER, PROVISIONER],
        build,
        controller_config: Default::default(),
        // The wake-up rule's evidence: every reconcile, from the hosts'
        // own logs.
        log_reconciles: true,
        placement: Some(placement_for(seed)),
        components: Default::default(),
    }
    .configure(PROVISIONER, &format!("http_allow = [\"{endpoint}\"]"));
    let shards = scheduler_shards(seed, Build::effective(build));
    let spec = match shards {
        Some(count) => spec.configure(SCHEDULER, &format!("shards = {count}")),
        None => spec,
    };
    let mut rig = Rig::start(spec).await;
    // The faults aim at the scheduler's lease, or its shard 0's.
    let lease = rig.scheduler_lease();
    let leases: Vec<String> = match shards {
        Some(count) => (0..count).map(|i| format!("{SCHEDULER}-{i}")).collect(),
        None => vec![SCHEDULER.to_string()],
    };
    rig.receiver = Some(Arc::new(receiver));
    let nodes: Vec<(String, u64)> = schedule
        .nodes
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("n{i}"), *c))
        .collect();
    let nodes: Vec<(&str, u64)> = nodes.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    rig.nodes(&nodes).await;
    let (_, first_epoch) = rig.leader(&lease, secs(30)).await;
    for other in &leases {
        rig.leader(other, secs(30)).await;
    }
    let retention = retention_on(seed, build);
    if retention {
        rig.start_trimmer(SCHEDULE_RETENTION).await;
    }
    let load = rig.workload("t", ms(80));
    let buckets = rig.bucket_workload("b", &endpoint, BUCKET_EVERY);
    let holds = rig.finalizer_workload("f", HOLD_EVERY);
    let struck = schedule::run(schedule, &mut rig).await;
    let created = load.stop().await;
    buckets.stop().await;
    holds.stop().await;
    // What the schedule's reader was given: the checker's copy of what
    // retention trimmed.
    rig.copy = Some(struck.feed.clone());
    // Every fault is healed: the cluster must converge.
    rig.wait_healthy().await;
    let limit = Timing::FAST.ttl + STALLED_TRANSACTION + secs(10);
    let converged = tokio::time::timeout(limit, async {
        for lease in &leases {
            rig.leader(lease, limit).await;
        }
        rig.settled(limit).await;
        rig.provisioned(limit).await;
    })
    .await;
    assert!(
        converged.is_ok(),
        "seed {seed}: no convergence within {limit:?} after the faults {:?}; {replay}",
        struck.faults
    );
    let report = rig.check().await;
    assert!(
        report.violations.is_empty() || Build::effective(build) == Build::Unfenced,
        "seed {seed}: {report}faults struck: {:?}; {} tasks tried; {replay}",
        struck.faults,
        created.len()
    );
    if retention {
        // Retention on must mean something trimmed: a schedule that
        // trimmed nothing would judge an untrimmed history and claim more.
        assert!(
            report.floors.0 > 0 && report.floors.1 > 0,
            "seed {seed}: retention ran, but the checker found nothing trimmed: {report}; {replay}"
        );
    }
    // Handovers from the database's tenure history: every epoch granted
    // after the one that led when the faults began (epochs of one lease
    // are dense here, so retention's trimmed tenures still count).
    let history = rig.history(&lease).await;
    let handovers = history.last().map_or(0, |t| (t.epoch - first_epoch).max(0));
    let certain = struck.certain_handovers();
    assert!(
        handovers >= certain,
        "seed {seed}: the faults ended the leader's tenure at epochs {:?}, but only {handovers} epoch(s) were granted after epoch {first_epoch}: {history:?}; {replay}",
        struck.leader_epochs
    );
    Ran {
        report,
        handovers,
        certain,
        struck,
    }
}

/// The checker fails on each guarantee it checks: a record written by hand
/// that breaks every one of them, straight into a fresh database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_reports_each_broken_guarantee() {
    let db = TestDatabase::create().await;
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // t(s): a database time s seconds after a fixed start.
    client
        .batch_execute(
            "CREATE FUNCTION pg_temp.t(s float8) RETURNS timestamptz
               LANGUAGE sql AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + s * interval '1 second' $$;
             -- The row shows a holder no tenure had.
             INSERT INTO leasehold_leases VALUES
               ('chk', 'scheduler', 'h3', 2, pg_temp.t(10), pg_temp.t(10), pg_temp.t(20), false);
             -- Epoch 1 ends after epoch 2 was granted, and counts a write after it.
             INSERT INTO leasehold_tenures VALUES
               ('chk', 'scheduler', 1, 'h1', 'e', pg_temp.t(0), pg_temp.t(12), 'expired', 2, pg_temp.t(11)),
               ('chk', 'scheduler', 2, 'h2', 'e', pg_temp.t(10), NULL, NULL, 0, NULL);
             INSERT INTO leasehold_objects VALUES
               ('chk', 'nodes', 'n1', 1, '{\"capacity\":1}', pg_temp.t(1), NULL, NULL, NULL),
               ('chk', 'tasks', 'a', 3, '{\"status\":\"assigned\",\"node\":\"n1\"}', pg_temp.t(5), 'scheduler', 1, 'h1'),
               ('chk', 'tasks', 'b', 5, '{\"status\":\"assigned\",\"node\":\"n1\"}', pg_temp.t(11), 'scheduler', 1, 'h1'),
               ('chk', 'tasks', 'c', 6, '{\"status\":\"pending\"}', pg_temp.t(15), 'scheduler', 2, 'h2');
             -- The provisioner's record is the status part.
             INSERT INTO leasehold_objects (cluster, kind, name, version, value, updated_at, lease, epoch, holder, status) VALUES
               ('chk', 'buckets', 'b', 7, '{}', pg_temp.t(16), NULL, NULL, NULL, '{\"phase\":\"Ready\",\"cloud_generation\":9}'),
               ('chk', 'buckets', 'ok', 8, '{}', pg_temp.t(16), NULL, NULL, NULL, '{\"phase\":\"Ready\",\"cloud_generation\":1}');
             -- The change stream shows tasks/a at a version it is not at.
             INSERT INTO leasehold_changes VALUES
               ('chk', 10, 2, pg_temp.t(2), 'tasks', 'a', 'created', 2, NULL, NULL, NULL);
             -- b is assigned by epoch 1 after epoch 2's grant; c twice, and
             -- still shows pending.
             INSERT INTO leasehold_events VALUES
               ('chk', 1, 1, pg_temp.t(1), 'nodes', 'n1', 'Created', '', NULL, NULL, NULL),
               ('chk', 2, 2, pg_temp.t(2), 'tasks', 'a', 'Created', '', NULL, NULL, NULL),
               ('chk', 3, 3, pg_temp.t(5), 'tasks', 'a', 'Assigned', 'assigned to node n1 (1 of 1 slots) at epoch 1', 'scheduler', 1, 'h1'),
               ('chk', 4, 4, pg_temp.t(6), 'tasks', 'b', 'Created', '', NULL, NULL, NULL),
               ('chk', 5, 5, pg_temp.t(11), 'tasks', 'b', 'Assigned', 'assigned to node n1 (2 of 1 slots) at epoch 1', 'scheduler', 1, 'h1'),
               ('chk', 6, 6, pg_temp.t(15), 'tasks', 'c', 'Assigned', 'assigned to node n1 (1 of 1 slots) at epoch 2', 'scheduler', 2, 'h2'),
               ('chk', 8, 6, pg_temp.t(15), 'tasks', 'c', 'Assigned', 'assigned to node n1 (1 of 1 slots) at epoch 2', 'scheduler', 2, 'h2'),
               ('chk', 9, 7, pg_temp.t(16), 'buckets', 'ok', 'Created', '', NULL, NULL, NULL);",
        )
        .await
        .expect("write the broken record");
    let acks = [checker::Ack {
        kind: "tasks".into(),
        name: "ghost".into(),
        version: 9,
        value: serde_json::json!({ "status": "pending" }),
    }];
    // What a fenced receiver recorded: k1 applied twice (#2), epoch 1
    // accepted after epoch 2 (#4), epoch 2 stamped with a holder that did
    // not hold it (#5), an epoch never granted (#6), no fence at all (#7).
    // Reads (#8) and another cluster's requests (#9) are not judged. Bucket
    // b's PUT is applied five times though the API never wrote it, and it
    // shows Ready at a generation no PUT produced; bucket ok, created once
    // by the API, is applied once (#10) at the generation it shows.
    let mut ok = effect(10, Some("chk/scheduler"), Some(2), "h2", "k9", "applied");
    ok.path = "/buckets/ok".into();
    ok.generation = Some(1);
    let record = [
        effect(1, Some("chk/scheduler"), Some(1), "h1", "k1", "applied"),
        effect(2, Some("chk/scheduler"), Some(1), "h1", "k1", "applied"),
        effect(3, Some("chk/scheduler"), Some(2), "h2", "k2", "applied"),
        effect(4, Some("chk/scheduler"), Some(1), "h1", "k3", "applied"),
        effect(5, Some("chk/scheduler"), Some(2), "h1", "k4", "applied"),
        effect(6, Some("chk/scheduler"), Some(7), "h2", "k5", "rejected"),
        effect(7, None, None, "h2", "k6", "rejected"),
        effect(8, None, None, "h2", "k7", "read"),
        effect(9, Some("other/scheduler"), Some(9), "h9", "k8", "applied"),
        ok,
    ];
    let report = checker::check_with_effects(db.url(), "chk", &acks, &|| record.to_vec()).await;
    eprintln!("{report}");
    for rule in [
        Rule::Tenures,
        Rule::Overlap,
        Rule::WriteCount,
        Rule::Feed,
        Rule::DoubleAssignment,
        Rule::Assignment,
        Rule::Capacity,
        Rule::LostAck,
        Rule::EffectAppliedTwice,
        Rule::StaleEffect,
        Rule::EffectWrongTenure,
        Rule::EffectRepeated,
        Rule::UnbackedStatus,
    ] {
        assert!(report.breaks(rule), "{rule:?} was not reported:\n{report}");
    }
    for (rule, what) in [
        (Rule::EffectRepeated, "bucket ok"),
        (Rule::UnbackedStatus, "bucket ok"),
    ] {
        assert!(
            !report
                .violations
                .iter()
                .any(|v| v.rule == rule && v.detail.contains(what)),
            "{what} keeps the provisioner's rules, but was reported as {rule:?}:\n{report}"
        );
    }
    let effect_violations: Vec<String> = report
        .violations
        .iter()
        .filter(|v| {
            matches!(
                v.rule,
                Rule::EffectAppliedTwice | Rule::StaleEffect | Rule::EffectWrongTenure
            )
        })
        .map(|v| v.detail.clone())
        .collect();
    let about = |seq: u64| {
        effect_violations
            .iter()
            .any(|d| d.starts_with(&format!("receiver #{seq}:")))
    };
    for seq in [2, 4, 5, 6, 7] {
        assert!(
            about(seq),
            "receiver entry #{seq} was not reported:\n{report}"
        );
    }
    for seq in [1, 3, 8, 9, 10] {
        assert!(
            !about(seq),
            "receiver entry #{seq} was reported, but it keeps every rule:\n{report}"
        );
    }
}

/// With retention on, the checker judges what was trimmed from its own
/// copy (a feed reader's record) and still catches violations there: a
/// hand-written record whose events and changes up to position 10 are
/// trimmed. The copy shows task b assigned twice (once trimmed, once kept)
/// and claims/c deleted while the finalizer workload never released it;
/// task a's only Assigned event is trimmed, which is no violation. Without
/// the copy, the checker raises no false alarm for a, still catches the
/// finalizer from the objects, and says its copy is incomplete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_judges_trimmed_history_from_its_copy() {
    use leasehold_tests::faults::reader::{CopiedEvent, FeedRecord};
    use leasehold_tests::faults::watch::Hold;
    let db = database_with(
            "INSERT INTO leasehold_retention (cluster, events_floor, changes_floor) VALUES ('trim', 10, 10);
             INSERT INTO leasehold_objects VALUES
               ('trim', 'nodes', 'n1', 3, '{\"capacity\":2}', now(), NULL, NULL, NULL),
               ('trim', 'tasks', 'a', 12, '{\"status\":\"assigned\",\"node\":\"n1\"}', now(), NULL, NULL, NULL),
               ('trim', 'tasks', 'b', 14, '{\"status\":\"assigned\",\"node\":\"n1\"}', now(), NULL, NULL, NULL);
             INSERT INTO leasehold_changes VALUES
               ('trim', 12, 12, now(), 'tasks', 'a', 'updated', 12, NULL, NULL, NULL),
               ('trim', 14, 14, now(), 'tasks', 'b', 'updated', 14, NULL, NULL, NULL);
             INSERT INTO leasehold_events VALUES
               ('trim', 14, 14, now(), 'tasks', 'b', 'Assigned', 'assigned to node n1 (2 of 2 slots) at epoch 1', NULL, NULL, NULL);",
    )
    .await;
    let assigned = |seq: u64, task: &str| CopiedEvent {
        seq,
        revision: seq,
        kind: "tasks".into(),
        name: task.into(),
        reason: "Assigned".into(),
        message: "assigned to node n1 (1 of 2 slots) at epoch 1".into(),
        stamp: None,
    };
    let change = copied_change;
    let mut copy = FeedRecord::default();
    copy.copy.events = vec![assigned(5, "a"), assigned(6, "b")];
    copy.copy.changes = vec![
        change(3, "nodes", "n1", "created", 3),
        change(4, "claims", "c", "created", 4),
        change(8, "claims", "c", "deleted", 4),
    ];
    let holds = vec![Hold {
        kind: "claims".into(),
        name: "c".into(),
        finalizer: "leasehold.test/hold".into(),
        held: vec![4],
        removal_sent: false,
    }];
    let evidence = checker::Evidence {
        holds: holds.clone(),
        copy: Some(copy),
        ..checker::Evidence::default()
    };
    let report = checker::check_all(db.url(), "trim", &evidence, &Vec::new).await;
    eprintln!("{report}");
    assert_eq!(report.floors, (10, 10));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.rule == Rule::DoubleAssignment && v.detail.contains("task b")),
        "b's trimmed assignment was not judged:\n{report}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.rule == Rule::Finalizer && v.detail.contains("deleted (change 8)")),
        "the trimmed deletion of claims/c was not judged:\n{report}"
    );
    assert!(
        !report.breaks(Rule::Assignment) && !report.breaks(Rule::Feed),
        "a trimmed event or change raised a false alarm:\n{report}"
    );

    let evidence = checker::Evidence {
        holds,
        ..checker::Evidence::default()
    };
    let report = checker::check_all(db.url(), "trim", &evidence, &Vec::new).await;
    eprintln!("{report}");
    assert!(
        !report.breaks(Rule::Assignment) && !report.breaks(Rule::Feed),
        "without a copy, trimmed rows raised a false alarm:\n{report}"
    );
    assert!(
        report.breaks(Rule::Finalizer),
        "without a copy, claims/c being gone is still seen from the objects:\n{report}"
    );
    assert!(
        report
            .trimmed
            .as_deref()
            .is_some_and(|t| t.contains("the copy is incomplete")),
        "{report}"
    );
}

/// A copy with a gap (its reader fell behind retention, so positions 7 to
/// 9 were trimmed before it read them) excuses what the gap may hold: task
/// g's update to version 9 and claims/c's acknowledged version 6 are not
/// in the copy, and no Feed or Finalizer violation is raised for them. The
/// same copy without the gap recorded is taken as whole, and both rules
/// report what it lacks: the excuse is the gap's, not the copy's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_checkers_copy_excuses_only_what_it_may_hold() {
    use leasehold_tests::faults::reader::{FeedRecord, Stream};
    use leasehold_tests::faults::watch::Hold;
    let db = database_with(
            "INSERT INTO leasehold_retention (cluster, events_floor, changes_floor) VALUES ('gap', 10, 10);
             INSERT INTO leasehold_objects VALUES
               ('gap', 'tasks', 'g', 9, '{\"status\":\"pending\"}', now(), NULL, NULL, NULL);",
    )
    .await;
    let change = copied_change;
    let holds = vec![Hold {
        kind: "claims".into(),
        name: "c".into(),
        finalizer: "leasehold.test/hold".into(),
        held: vec![4, 6],
        removal_sent: true,
    }];
    let copy = |gap: bool| {
        let mut copy = FeedRecord::default();
        copy.copy.changes = vec![
            change(4, "claims", "c", "created", 4),
            change(5, "tasks", "g", "created", 5),
            change(10, "claims", "c", "deleted", 6),
        ];
        if gap {
            copy.trimmed = vec![(Stream::Changes, 6, 10)];
        }
        checker::Evidence {
            holds: holds.clone(),
            copy: Some(copy),
            ..checker::Evidence::default()
        }
    };
    let report = checker::check_all(db.url(), "gap", &copy(true), &Vec::new).await;
    eprintln!("{report}");
    assert!(
        !report.breaks(Rule::Feed) && !report.breaks(Rule::Finalizer),
        "a gap of the copy raised a false alarm:\n{report}"
    );
    let report = checker::check_all(db.url(), "gap", &copy(false), &Vec::new).await;
    eprintln!("{report}");
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.rule == Rule::Feed && v.detail.contains("tasks/g is at version 9")),
        "a whole copy lacking g's last change was not caught:\n{report}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.rule == Rule::Finalizer && v.detail.contains("before version 6")),
        "a whole copy lacking c's acknowledged version was not caught:\n{report}"
    );
}

/// A fresh database with `sql` (a hand-written record) run in it.
async fn database_with(sql: &str) -> TestDatabase {
    let db = TestDatabase::create().await;
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(sql)
        .await
        .expect("write the hand-written record");
    db
}

/// A change as the checker's copy holds it.
fn copied_change(
    position: u64,
    kind: &str,
    name: &str,
    change: &str,
    version: u64,
) -> leasehold_tests::faults::reader::CopiedChange {
    leasehold_tests::faults::reader::CopiedChange {
        position,
        at_micros: 0,
        kind: kind.into(),
        name: name.into(),
        change: change.into(),
        version,
    }
}

/// A `PUT /buckets/b` the fenced receiver recorded as decided `outcome`.
fn effect(
    seq: u64,
    lease: Option<&str>,
    epoch: Option<u64>,
    holder: &str,
    key: &str,
    outcome: &str,
) -> leasehold_receiver::RecordEntry {
    serde_json::from_value(serde_json::json!({
        "seq": seq,
        "arrived_at": "2030-01-01T00:00:00Z",
        "method": if outcome == "read" { "GET" } else { "PUT" },
        "path": "/buckets/b",
        "lease": lease,
        "epoch": epoch,
        "holder": holder,
        "idempotency_key": key,
        "outcome": outcome,
        "status": 200,
        "resource": null,
        "generation": null,
        "detail": null,
        "fault": null
    }))
    .expect("a record entry")
}

/// The checker places writes by commit order, not by what hosts stamped or
/// when their statements ran: a record built by two sessions, where one
/// session's write is still uncommitted when the other records a grant
/// snapshot, and commits after it. Each misplaced write is reported under
/// its own rule, and the well-placed ones are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_orders_writes_by_commit_and_reports_each_misplaced_one() {
    let db = TestDatabase::create().await;
    let connect = || async {
        let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        client
    };
    let (a, b) = (connect().await, connect().await);
    // Event `seq` on `things/e{seq}`, stamped with `epoch` and `holder`.
    let event = |seq: i64, epoch: i64, holder: &str| {
        format!(
            "INSERT INTO leasehold_events VALUES ('chk', {seq}, {seq}, clock_timestamp(), 'things',
               'e{seq}', 'Touched', '', 'scheduler', {epoch}, '{holder}')"
        )
    };
    // A grant: the tenure records the snapshot of the statement that opens it.
    let grant = |epoch: i64, holder: &str| {
        format!(
            "INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, acquired_at, writes, granted_snapshot)
             VALUES ('chk', 'scheduler', {epoch}, '{holder}', 'e', clock_timestamp(), 10, pg_current_snapshot())"
        )
    };

    a.batch_execute(&grant(1, "h1")).await.unwrap();
    // 1: epoch 1, committed during epoch 1: correct.
    a.batch_execute(&event(1, 1, "h1")).await.unwrap();
    // 2: epoch 1, made during epoch 1 but still uncommitted when epoch 2 is
    // granted (with an object write in the same transaction).
    b.batch_execute(&format!(
        "BEGIN; {}; INSERT INTO leasehold_objects VALUES
           ('chk', 'things', 'x', 2, '{{}}', clock_timestamp(), 'scheduler', 1, 'h1')",
        event(2, 1, "h1")
    ))
    .await
    .unwrap();
    // 3: stamped epoch 2, but committed before epoch 2 was granted.
    a.batch_execute(&event(3, 2, "h2")).await.unwrap();
    a.batch_execute(&format!(
        "UPDATE leasehold_tenures SET ended_at = clock_timestamp(), end_reason = 'expired'
          WHERE cluster = 'chk' AND epoch = 1;
         {};
         INSERT INTO leasehold_leases
         SELECT cluster, lease, holder, epoch, acquired_at, acquired_at,
                acquired_at + interval '10 seconds', true
           FROM leasehold_tenures WHERE cluster = 'chk' AND epoch = 2",
        grant(2, "h2")
    ))
    .await
    .unwrap();
    // 2 commits now, after epoch 2's grant.
    b.batch_execute("COMMIT").await.unwrap();
    // 4: epoch 2, during epoch 2: correct. 5: stamped with a holder that
    // never held epoch 2.
    a.batch_execute(&event(4, 2, "h2")).await.unwrap();
    a.batch_execute(&event(5, 2, "h9")).await.unwrap();
    // h2 releases epoch 2 (no successor); 6 commits after that.
    a.batch_execute(
        "UPDATE leasehold_tenures
            SET ended_at = clock_timestamp(), end_reason = 'released', released_snapshot = pg_current_snapshot()
          WHERE cluster = 'chk' AND epoch = 2",
    )
    .await
    .unwrap();
    a.batch_execute(&event(6, 2, "h2")).await.unwrap();

    let report = checker::check(db.url(), "chk", &[]).await;
    eprintln!("{report}");
    let reported = |rule: Rule, what: &str| {
        report
            .violations
            .iter()
            .any(|v| v.rule == rule && v.detail.contains(what))
    };
    for (rule, what) in [
        (Rule::CommittedAfterNextGrant, "things/e2,"),
        (Rule::CommittedAfterNextGrant, "object things/x "),
        (Rule::WrongTenure, "things/e3,"),
        (Rule::WrongTenure, "things/e5,"),
        (Rule::AfterRelease, "things/e6,"),
    ] {
        assert!(
            reported(rule, what),
            "{what} was not reported as {rule:?}:\n{report}"
        );
    }
    assert_eq!(
        report.violations.len(),
        5,
        "only the five misplaced writes break a rule (events 1 and 4 are correct):\n{report}"
    );
    assert_eq!(report.guest_writes, 7, "{report}");
}

/// The checker catches a build without the fence in the scenarios where
/// only the fence stands between a stalled commit and the next grant: a
/// partition, then a pause (SIGSTOP with the proxy holding the COMMIT),
/// each striking while the leader's COMMIT is in flight. The real build's
/// grant waits for such a commit (it holds its tenure's row, which the grant
/// locks before ending that tenure) and
/// its fence refuses it (scenarios 5 and 8b); the unfenced build's grant
/// does not wait, and the COMMIT, delivered when the fault heals while the
/// server still waits for it, lands after the successor's grant. Each
/// stalled commit must be reported as committed after the next grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_stalled_commits_of_a_build_without_the_fence() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut spec = RigSpec::scheduler(2);
    spec.build = Build::Unfenced;
    let rig = Rig::start(spec).await;
    rig.nodes(&[("n1", 20), ("n2", 20)]).await;
    let (mut leader, mut epoch) = rig.leader(SCHEDULER, secs(30)).await;
    rig.task(1 - leader, "warm-up").await;
    rig.settled(secs(15)).await;
    let timing = rig.timing();
    let tasks = [
        (AtCommit::Partition, "partitioned-commit"),
        (AtCommit::Hold, "paused-commit"),
    ];
    for (fault, task) in tasks {
        let standby = 1 - leader;
        let struck = rig.hosts[leader]
            .proxy
            .arm_carrying(fault, GUEST_COMMIT_MARK);
        rig.task(standby, task).await;
        tokio::time::timeout(secs(15), struck)
            .await
            .expect("the leader commits the assignment")
            .expect("strike reported");
        let stalled = Instant::now();
        if fault == AtCommit::Hold {
            rig.hosts[leader].replica.signal("STOP");
        }
        // Without the fence, the grant does not wait for the stalled commit.
        let (next, next_epoch) = rig
            .leader_after(SCHEDULER, epoch, timing.ttl + SLACK * 2)
            .await;
        assert_eq!((next, next_epoch), (standby, epoch + 1));
        // The server ends the stalled transaction once it idled for
        // STALLED_TRANSACTION; healing later would prove nothing.
        let healed = stalled.elapsed();
        assert!(
            healed < STALLED_TRANSACTION,
            "{fault:?}: the successor was granted {healed:?} after the stall, too late to deliver the COMMIT within {STALLED_TRANSACTION:?}"
        );
        match fault {
            AtCommit::Hold => {
                rig.hosts[leader].proxy.release();
                rig.hosts[leader].replica.signal("CONT");
            }
            _ => rig.hosts[leader].proxy.set(Mode::Pass),
        }
        eprintln!(
            "{fault:?}: epoch {next_epoch} granted and the fault healed {healed:?} after the stall"
        );
        wait_standby_behind(&rig, leader, &rig.hosts[next].holder, secs(20)).await;
        wait_assigned(&rig, task, secs(15)).await;
        (leader, epoch) = (next, next_epoch);
    }
    rig.settled(secs(20)).await;
    let report = rig.check().await;
    let stale = report
        .violations
        .iter()
        .filter(|v| v.rule == Rule::CommittedAfterNextGrant)
        .count();
    eprintln!(
        "stalled commits without the fence: {stale} write(s) committed after the next grant; {report}"
    );
    for (fault, task) in tasks {
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.rule == Rule::CommittedAfterNextGrant
                    && v.detail.contains(&format!("tasks/{task}"))),
            "{fault:?}: the stalled commit assigning {task} landed after the next grant, but the checker did not report it:\n{report}"
        );
    }
}

/// How scenarios 1b and 2b ask the leader to give its scheduler lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrderlyStop {
    /// SIGTERM: the host shuts down (scenario 1's mechanism).
    Shutdown,
    /// SIGHUP with the scheduler removed from the config: the host stops
    /// the scheduler and keeps running (scenario 2's mechanism).
    Removal,
}

/// What an orderly release with a guest COMMIT in flight showed.
struct InFlightRelease {
    /// The checker's verdict once everything settled.
    report: checker::Report,
    /// The leader's epoch when the COMMIT was held.
    epoch: i64,
    /// Holders of the old leader and of its successor.
    old: String,
    successor: String,
    /// The `Assigned` events of the task whose COMMIT was held.
    assigned: Vec<(i64, String)>,
    /// From the held COMMIT to the successor leading (when the COMMIT was
    /// delivered).
    granted_after: Duration,
    /// How the old tenure ended, as recorded.
    old_end: Option<String>,
}

/// The task whose assigning COMMIT is held in scenarios 1b and 2b.
const IN_FLIGHT_TASK: &str = "in-flight";

/// The line the leader logs when its scheduler's tenure is told to stop
/// (SIGTERM or removal alike): the stop request has been taken, so the
/// guest stops taking work once its running reconcile ends.
const STOP_TAKEN: &str = "shutting down: finishing the running reconcile";

/// Scenarios 1b and 2b: the leader is asked to stop (`how`) while its
/// guest's assigning COMMIT is held in the network by the proxy, so the
/// orderly release comes with a fenced transaction still open.
///
/// Once the host has taken the stop request, the proxy cuts the host's end
/// of that connection (the server's end keeps waiting for the COMMIT): the
/// guest's commit fails with its outcome unknown at once, the guest stops,
/// and the host releases the lease. Without the cut the host would wait for
/// the reply until its own statement bound, which equals the server's bound
/// on the idle transaction, so the release and the end of the stalled
/// transaction would race and neither build could be told apart.
///
/// The held COMMIT is delivered as soon as the successor leads. On the
/// real build the release locks the lease row and the open tenure's row
/// first (L5) and the grant does too, so both wait for the stalled
/// transaction, which holds the tenure's row (its write count), until the
/// server ends it: the successor leads only after that, and the COMMIT
/// finds nothing to commit. Without the fence nothing in the transaction
/// touches the lease or tenure rows (the count comes after the commit):
/// the release and the grant go through at once and the COMMIT lands after
/// both.
async fn release_with_commit_in_flight(how: OrderlyStop, build: Build) -> InFlightRelease {
    let mut spec = RigSpec::scheduler(2);
    if how == OrderlyStop::Removal {
        spec.controllers = vec![SCHEDULER, "rollout"];
    }
    spec.build = build;
    let mut rig = Rig::start(spec).await;
    rig.nodes(&[("n1", 20), ("n2", 20)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let standby = 1 - leader;
    rig.task(standby, "warm-up").await;
    rig.settled(secs(15)).await;

    // Only the guest's assigning commit, not a host write.
    let struck = rig.hosts[leader]
        .proxy
        .arm_carrying(AtCommit::Hold, b"\"status\":\"assigned\"");
    rig.task(standby, IN_FLIGHT_TASK).await;
    tokio::time::timeout(secs(15), struck)
        .await
        .expect("the leader commits the assignment")
        .expect("strike reported");
    let held = Instant::now();
    match how {
        OrderlyStop::Shutdown => rig.hosts[leader].replica.signal("TERM"),
        OrderlyStop::Removal => {
            rig.set_controllers(leader, &["rollout"]);
            rig.hosts[leader].replica.signal("HUP");
        }
    }
    // The cut must come after the stop request: a guest whose commit
    // failed before it would take the task again, and that commit would
    // wait for the held one's row locks until the statement bound.
    eventually(
        &format!("{} takes the stop request", rig.hosts[leader].holder),
        secs(5),
        || async {
            rig.hosts[leader]
                .replica
                .log()
                .lines()
                .any(|l| l.contains(STOP_TAKEN) && l.contains(SCHEDULER))
                .then_some(())
        },
    )
    .await;
    rig.hosts[leader].proxy.cut_host();

    let (next, next_epoch) = rig
        .leader_after(
            SCHEDULER,
            epoch,
            rig.timing().ttl + STALLED_TRANSACTION + SLACK * 2,
        )
        .await;
    rig.hosts[leader].proxy.release();
    let granted_after = held.elapsed();
    eprintln!(
        "{how:?} with a commit in flight ({build:?}): epoch {next_epoch} granted and the held COMMIT delivered {granted_after:?} after it was held"
    );
    assert_eq!((next, next_epoch), (standby, epoch + 1));
    match how {
        OrderlyStop::Shutdown => {
            let code = rig.hosts[leader].replica.exited(secs(15)).await;
            assert_eq!(code, Some(0), "SIGTERM is an orderly exit");
        }
        OrderlyStop::Removal => {
            assert!(rig.hosts[leader].replica.running(), "the host stopped");
            eventually(
                "the reloaded host no longer runs the scheduler",
                secs(15),
                || async {
                    let (_, ready) = rig.hosts[leader].replica.readyz().await?;
                    ready["controllers"].get(SCHEDULER).is_none().then_some(())
                },
            )
            .await;
        }
    }
    wait_assigned(&rig, IN_FLIGHT_TASK, secs(15)).await;
    rig.settled(secs(20)).await;
    let report = rig.check().await;
    let history = rig.history(SCHEDULER).await;
    InFlightRelease {
        report,
        epoch,
        old: rig.hosts[leader].holder.clone(),
        successor: rig.hosts[standby].holder.clone(),
        assigned: assignments(&rig, IN_FLIGHT_TASK).await,
        granted_after,
        old_end: history[epoch as usize - 1].end_reason.clone(),
    }
}

/// The real build's verdict on 1b or 2b: the successor leads at the next
/// epoch (asserted by the run), the checker is clean, and the held COMMIT
/// was rolled back: the grant came only once the server had ended the
/// stalled transaction, so the task is assigned once, by the successor.
fn no_stale_write_landed(ran: &InFlightRelease, context: &str) {
    eprintln!(
        "{context}: the old tenure ended {:?}; {}",
        ran.old_end, ran.report
    );
    ran.report.assert_clean(context);
    // The grant waited for the stalled transaction (less the slack: the
    // clock starts when the proxy reported the strike, a little after the
    // server's idle clock did); without that wait it comes at the release.
    assert!(
        ran.granted_after >= STALLED_TRANSACTION - SLACK,
        "{context}: the successor was granted {:?} after the COMMIT was held, before the server could end the stalled transaction ({STALLED_TRANSACTION:?}): the grant did not wait for it",
        ran.granted_after
    );
    assert_eq!(
        ran.assigned,
        vec![(ran.epoch + 1, ran.successor.clone())],
        "{context}: the held commit of epoch {} ({}) must not land",
        ran.epoch,
        ran.old
    );
}

/// The unfenced build's verdict on 1b or 2b: the held COMMIT, delivered
/// once the successor led, landed after the release and the next grant,
/// and the checker says so. Returns how many violations it reported.
fn caught_without_the_fence(ran: &InFlightRelease, context: &str) -> usize {
    let stale: Vec<&checker::Violation> = ran
        .report
        .violations
        .iter()
        .filter(|v| matches!(v.rule, Rule::CommittedAfterNextGrant | Rule::AfterRelease))
        .collect();
    eprintln!(
        "{context}: {} write(s) committed after the release or the next grant ({} violation(s) in all); the old tenure ended {:?}; {}",
        stale.len(),
        ran.report.violations.len(),
        ran.old_end,
        ran.report
    );
    // The server ends the stalled transaction once it idled this long; a
    // grant after it would deliver the COMMIT to nobody and prove nothing.
    assert!(
        ran.granted_after < STALLED_TRANSACTION,
        "{context}: the successor was granted {:?} after the COMMIT was held, too late to deliver it within {STALLED_TRANSACTION:?}",
        ran.granted_after
    );
    assert_eq!(
        ran.assigned.first(),
        Some(&(ran.epoch, ran.old.clone())),
        "{context}: without the fence the held commit of epoch {} lands",
        ran.epoch
    );
    assert!(
        stale
            .iter()
            .any(|v| v.detail.contains(&format!("tasks/{IN_FLIGHT_TASK} "))),
        "{context}: the held commit assigning {IN_FLIGHT_TASK} landed after the release and the next grant, but the checker did not report it:\n{}",
        ran.report
    );
    stale.len()
}

// 1b. Orderly release (SIGTERM) with a guest COMMIT in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_commit_in_flight_lets_no_stale_write_land() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let ran = release_with_commit_in_flight(OrderlyStop::Shutdown, Build::Fenced).await;
    no_stale_write_landed(&ran, "SIGTERM with a commit in flight");
}

// 2b. Removed controller (SIGHUP) with a guest COMMIT in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_dropping_the_controller_with_a_commit_in_flight_lets_no_stale_write_land() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let ran = release_with_commit_in_flight(OrderlyStop::Removal, Build::Fenced).await;
    no_stale_write_landed(&ran, "removal with a commit in flight");
}

/// 1b on the build without the fence: the checker must report the held
/// commit that landed after the release and the next grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_commit_landing_after_a_sigterm_release_without_the_fence() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let ran = release_with_commit_in_flight(OrderlyStop::Shutdown, Build::Unfenced).await;
    caught_without_the_fence(&ran, "SIGTERM with a commit in flight, unfenced");
}

/// 2b on the build without the fence: the checker must report the held
/// commit that landed after the release and the next grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_commit_landing_after_a_reload_release_without_the_fence() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let ran = release_with_commit_in_flight(OrderlyStop::Removal, Build::Unfenced).await;
    caught_without_the_fence(&ran, "removal with a commit in flight, unfenced");
}
