//! Fenced outbound effects end to end: real `leasehold` processes against
//! real PostgreSQL run the `provisioner` controller, which creates buckets
//! in a fenced receiver (`leasehold-receiver`, an external "cloud" API run
//! in this test process) under its lease.
//!
//! - **Uncertain external completion**: the receiver applies a leader's
//!   `PUT` and the leader never learns it (the receiver drops the
//!   connection, hangs, or a proxy loses the reply); the leader retries,
//!   or dies, or loses its lease, and whoever completes the work repeats
//!   the request with the same idempotency key. The effect is applied
//!   exactly once (one `applied`, then `replayed`), and the bucket's
//!   status is recorded by the tenure that learned the outcome. The same
//!   holds for a bucket's deletion: the user's `DELETE` only marks the
//!   object (the provisioner's finalizer holds it), the receiver applies
//!   the leader's `DELETE` and drops the answer, the retry sends the same
//!   key (the marked object's generation) and is replayed, and only then
//!   does the object go.
//! - **Stale leader**: a leader paused past its ttl (SIGSTOP) sends nothing
//!   after it resumes, and nothing of its epoch reaches the receiver after
//!   its successor's first request; a leader cut off from the database but
//!   not from the receiver stops calling out by its renew deadline, by the
//!   receiver's own clock. Besides the provisioner, these run the `caller`
//!   test fixture, which sends a long series of requests inside one
//!   reconcile without touching the store: a guest that is mid-call when
//!   its host resumes or is cut off, which only the host can stop.
//!
//! Each test also runs the fault suite's invariant checker over the
//! database and the receiver's record (`Rig::check`).
//!
//! The fenced-receiver rule these tests rely on: a receiver keeps the
//! highest epoch it has accepted per lease and refuses a lower one with
//! 409, and deduplicates by `Idempotency-Key` (a repeated key returns the
//! stored result without applying the effect again).
//!
//! Ordering comes from observable state (lease rows, a host's `/metrics`,
//! the receiver's record, the proxy's strike channel); the only sleeps are
//! the ones a fault is made of and the workload's pacing.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold_receiver::{Fault, FaultSpec, Outcome, Receiver, ReceiverConfig, RecordEntry};
use leasehold_tests::faults::rig::{Rig, RigSpec, Timing, bucket};
use leasehold_tests::process::eventually;
use leasehold_tests::proxy::{AtCommit, FaultProxy, Mode};
use serde_json::{Value, json};

const PROVISIONER: &str = "provisioner";

/// The test fixture that sends the requests its `calls` objects describe.
const CALLER: &str = "caller";

/// How long the receiver waits before each answer while a partitioned
/// leader is calling out: its requests arrive about this far apart.
const CALL_SPACING: Duration = Duration::from_millis(100);

/// Slack for a debug build on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(1500);

/// How late, after its renew deadline, a request of a leader cut off from
/// the database may still reach the receiver: one admitted just before the
/// deadline is still being connected and written (loopback, a few
/// milliseconds on an idle machine; a debug build on two busy cores can
/// be descheduled for longer).
const SEND_MARGIN: Duration = Duration::from_millis(300);

/// The tests of this file run one at a time: each starts several debug
/// builds of the host, and their timing assertions must not measure
/// another test's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Microseconds since the Unix epoch, the receiver's clock (the same
/// machine's).
fn micros(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// A rig of `hosts` hosts running `controller`, allowed to reach `allow`
/// (base URLs), with a fenced receiver (test hooks on) attached.
async fn start(
    hosts: usize,
    controller: &'static str,
    allow: &[String],
    receiver: leasehold_receiver::RunningReceiver,
) -> Rig {
    let list = allow
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let spec = RigSpec {
        hosts,
        timing: Timing::SCENARIO,
        controllers: vec![controller],
        ..RigSpec::scheduler(hosts)
    }
    .configure(controller, &format!("http_allow = [{list}]"));
    let mut rig = Rig::start(spec).await;
    rig.receiver = Some(std::sync::Arc::new(receiver));
    rig
}

async fn receiver() -> leasehold_receiver::RunningReceiver {
    Receiver::start(ReceiverConfig::default().with_test_hooks(true))
        .await
        .expect("start the fenced receiver")
}

fn the_receiver(rig: &Rig) -> &leasehold_receiver::RunningReceiver {
    rig.receiver.as_ref().expect("the rig has a receiver")
}

/// Create bucket object `name` through host `first` (or the next that
/// answers), acknowledged.
async fn create_bucket(rig: &Rig, first: usize, name: &str, endpoint: &str) {
    rig.create(first, "buckets", name, bucket(name, endpoint))
        .await
        .unwrap_or_else(|| panic!("no host acknowledged bucket {name}"));
}

/// The receiver's mutations (every request but reads) of bucket `name`,
/// in decision order.
fn mutations(rig: &Rig, name: &str) -> Vec<RecordEntry> {
    let path = format!("/buckets/{name}");
    the_receiver(rig)
        .record()
        .into_iter()
        .filter(|e| e.path == path && e.outcome != Outcome::Read)
        .collect()
}

/// One line per entry, for assertion messages.
fn show(entries: &[RecordEntry]) -> String {
    entries
        .iter()
        .map(|e| {
            format!(
                "#{} {} {} {} epoch {:?} holder {:?} key {:?}{}",
                e.seq,
                e.method,
                e.path,
                e.outcome,
                e.epoch,
                e.holder,
                e.idempotency_key,
                e.fault
                    .as_deref()
                    .map(|f| format!(" fault {f}"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bucket object as stored: its value, its status part (the
/// provisioner's record; `Null` without one) and the fence stamped on its
/// last write (lease, epoch, holder; all `None` for an API write).
#[derive(Debug)]
struct Stored {
    #[allow(dead_code)] // shown in assertion messages
    value: Value,
    status: Value,
    epoch: Option<i64>,
    holder: Option<String>,
}

async fn stored(rig: &Rig, name: &str) -> Option<Stored> {
    let row = rig
        .sql()
        .await
        .query_opt(
            "SELECT value, status, epoch, holder FROM leasehold_objects
              WHERE cluster = $1 AND kind = 'buckets' AND name = $2",
            &[&rig.cluster, &name],
        )
        .await
        .expect("read a bucket object")?;
    Some(Stored {
        value: serde_json::from_str(row.get::<_, &str>(0)).unwrap_or(Value::Null),
        status: row
            .get::<_, Option<&str>>(1)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null),
        epoch: row.get(2),
        holder: row.get(3),
    })
}

/// Wait until the provisioner recorded a status for bucket `name`.
async fn wait_status(rig: &Rig, name: &str, limit: Duration) -> Stored {
    eventually(
        &format!("the provisioner records bucket {name}'s status"),
        limit,
        || async {
            let s = stored(rig, name).await?;
            status_recorded(&s.status).then_some(s)
        },
    )
    .await
}

/// Whether the provisioner recorded the bucket as applied (phase
/// `Ready`) in its status part (it records `Pending` before the `PUT`).
fn status_recorded(status: &Value) -> bool {
    status["phase"] == "Ready"
}

/// Wait until the receiver has decided a request of bucket `name` that
/// `pick` accepts; returns it.
async fn wait_arrival(
    rig: &Rig,
    name: &str,
    what: &str,
    limit: Duration,
    pick: impl Fn(&RecordEntry) -> bool,
) -> RecordEntry {
    eventually(what, limit, || async {
        mutations(rig, name).into_iter().find(|e| pick(e))
    })
    .await
}

/// Wait until host `i` says it does not lead `controller`.
async fn wait_not_leading(rig: &Rig, i: usize, controller: &str, limit: Duration) {
    eventually(
        &format!("{} stops leading {controller}", rig.hosts[i].holder),
        limit,
        || async { (!rig.hosts[i].replica.leads(controller).await?).then_some(()) },
    )
    .await;
}

/// The receiver's record for one bucket shows the effect applied exactly
/// once, by `first` at `epoch`, and then only replays, the last of them by
/// `last` at `last_epoch`; every request used one idempotency key.
fn applied_once_then_replayed(
    entries: &[RecordEntry],
    (first, epoch): (&str, i64),
    (last, last_epoch): (&str, i64),
    context: &str,
) {
    let shown = show(entries);
    let applied: Vec<&RecordEntry> = entries
        .iter()
        .filter(|e| e.outcome == Outcome::Applied)
        .collect();
    assert_eq!(
        applied.len(),
        1,
        "{context}: the effect must be applied exactly once:\n{shown}"
    );
    let applied = applied[0];
    assert_eq!(
        (applied.epoch, applied.holder.as_deref()),
        (Some(epoch as u64), Some(first)),
        "{context}: the first tenure's request applied it:\n{shown}"
    );
    assert!(
        entries
            .iter()
            .all(|e| e.idempotency_key == applied.idempotency_key && e.idempotency_key.is_some()),
        "{context}: every attempt carries the same idempotency key:\n{shown}"
    );
    assert!(
        entries
            .iter()
            .all(|e| matches!(e.outcome, Outcome::Applied | Outcome::Replayed)),
        "{context}: every attempt is accepted (applied once, then replayed):\n{shown}"
    );
    let last_entry = entries.last().expect("at least one entry");
    assert_eq!(
        (
            last_entry.outcome,
            last_entry.epoch,
            last_entry.holder.as_deref()
        ),
        (Outcome::Replayed, Some(last_epoch as u64), Some(last)),
        "{context}: the tenure that completed the work got the stored result:\n{shown}"
    );
}

/// Run the checker over the database and the receiver's record; panics on
/// any violation.
async fn clean(rig: &Rig, context: &str) {
    let report = rig.check().await;
    eprintln!("{context}: {report}");
    report.assert_clean(context);
}

// 1. Uncertain external completion: the receiver applies and the answer
// never arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_whose_answer_is_lost_is_applied_exactly_once() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cloud = receiver().await;
    let endpoint = cloud.url();
    let mut rig = start(2, PROVISIONER, std::slice::from_ref(&endpoint), cloud).await;
    let (a, epoch) = rig.leader(PROVISIONER, secs(30)).await;
    let b = 1 - a;
    let (holder_a, holder_b) = (rig.hosts[a].holder.clone(), rig.hosts[b].holder.clone());
    create_bucket(&rig, b, "warm-up", &endpoint).await;
    wait_status(&rig, "warm-up", secs(20)).await;

    // a) The receiver applies the PUT and closes the connection without
    // answering: the leader sees a connection error, retries with the same
    // key, and gets the stored result.
    the_receiver(&rig)
        .set_fault(FaultSpec::once(Fault::DropAfterApply))
        .expect("set a fault");
    create_bucket(&rig, b, "dropped", &endpoint).await;
    let done = wait_status(&rig, "dropped", secs(20)).await;
    let entries = mutations(&rig, "dropped");
    eprintln!("dropped after apply:\n{}", show(&entries));
    assert_eq!(
        entries.first().and_then(|e| e.fault.as_deref()),
        Some("drop_after_apply"),
        "the first attempt met the fault:\n{}",
        show(&entries)
    );
    applied_once_then_replayed(
        &entries,
        (&holder_a, epoch),
        (&holder_a, epoch),
        "dropped after apply",
    );
    assert_eq!(
        (done.epoch, done.holder.as_deref()),
        (Some(epoch), Some(holder_a.as_str())),
        "the leader records the status: {done:?}"
    );

    // b) The receiver applies the PUT and never answers; the leader dies
    // waiting. Its successor repeats the request with the same key.
    the_receiver(&rig)
        .set_fault(FaultSpec::once(Fault::Hang))
        .expect("set a fault");
    create_bucket(&rig, b, "hung", &endpoint).await;
    let applied = wait_arrival(
        &rig,
        "hung",
        "the leader's PUT of bucket hung is applied",
        secs(20),
        |e| e.outcome == Outcome::Applied,
    )
    .await;
    let killed = Instant::now();
    rig.hosts[a].replica.kill().await;
    assert_eq!(applied.fault.as_deref(), Some("hang"), "{applied:?}");
    let before = stored(&rig, "hung").await.expect("bucket hung");
    assert!(
        !status_recorded(&before.status),
        "the leader recorded a status it cannot have learned: {before:?}"
    );
    let (next, next_epoch) = rig
        .leader_after(PROVISIONER, epoch, rig.timing().ttl + SLACK * 2)
        .await;
    assert_eq!((next, next_epoch), (b, epoch + 1));
    let done = wait_status(&rig, "hung", secs(20)).await;
    eprintln!(
        "hung: the successor recorded the status {:?} after the leader was killed",
        killed.elapsed()
    );
    let entries = mutations(&rig, "hung");
    eprintln!("hung, leader killed:\n{}", show(&entries));
    applied_once_then_replayed(
        &entries,
        (&holder_a, epoch),
        (&holder_b, epoch + 1),
        "leader killed with its effect applied",
    );
    assert_eq!(
        (done.epoch, done.holder.as_deref()),
        (Some(epoch + 1), Some(holder_b.as_str())),
        "the successor records the status: {done:?}"
    );
    // Applied once at the receiver: one generation.
    let bucket = the_receiver(&rig)
        .bucket("hung")
        .expect("bucket hung exists");
    assert_eq!(bucket.generation, 1, "{bucket:?}");

    // c) A bucket the user then deletes: the provisioner's finalizer holds
    // the object (202, marked) until the leader has deleted the bucket at
    // the receiver. The receiver applies the DELETE and drops the
    // connection; the retry sends the same key and is replayed, and only
    // then does the object go. (Not recorded as an acknowledged write: the
    // checker holds those to be present at the end; what this one must
    // come to is asserted here.)
    let api = rig.hosts[b].replica.addr.clone();
    let value = leasehold_tests::faults::rig::bucket("doomed", &endpoint).to_string();
    let created = leasehold_tests::http::request_within(
        secs(5),
        &api,
        "PUT",
        "/v1/objects/buckets/doomed",
        &[("If-None-Match", "*")],
        Some(&value),
    )
    .await
    .expect("the API answers the create");
    assert_eq!(created.status, 201, "{}", created.body);
    wait_status(&rig, "doomed", secs(20)).await;
    the_receiver(&rig)
        .set_fault(FaultSpec::once(Fault::DropAfterApply))
        .expect("set a fault");
    let marked = leasehold_tests::http::request_within(
        secs(5),
        &api,
        "DELETE",
        "/v1/objects/buckets/doomed",
        &[("If-Match", "*")],
        None,
    )
    .await
    .expect("the API answers the delete");
    assert_eq!(
        marked.status, 202,
        "the finalizer holds the object: {}",
        marked.body
    );
    eventually("bucket doomed's object goes", secs(20), || async {
        stored(&rig, "doomed").await.is_none().then_some(())
    })
    .await;
    let deletes: Vec<RecordEntry> = mutations(&rig, "doomed")
        .into_iter()
        .filter(|e| e.method == "DELETE")
        .collect();
    eprintln!("doomed deleted, answer dropped:\n{}", show(&deletes));
    assert_eq!(
        deletes.first().and_then(|e| e.fault.as_deref()),
        Some("drop_after_apply"),
        "the first DELETE met the fault:\n{}",
        show(&deletes)
    );
    applied_once_then_replayed(
        &deletes,
        (&holder_b, epoch + 1),
        (&holder_b, epoch + 1),
        "a delete whose answer was dropped",
    );
    assert!(
        the_receiver(&rig).bucket("doomed").is_none(),
        "the bucket is gone at the receiver"
    );
    clean(&rig, "uncertain completion at the receiver").await;
}

// 1b. Uncertain external completion: the reply is lost in the network,
// and the leader loses its lease while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_in_the_network_then_a_lost_lease_applies_the_effect_exactly_once() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cloud = receiver().await;
    let proxy = FaultProxy::start_opaque(cloud.local_addr()).await;
    // Every host reaches the receiver through the proxy: the objects name
    // it as their endpoint.
    let endpoint = proxy.http_url();
    let rig = start(2, PROVISIONER, std::slice::from_ref(&endpoint), cloud).await;
    let (a, epoch) = rig.leader(PROVISIONER, secs(30)).await;
    let b = 1 - a;
    let (holder_a, holder_b) = (rig.hosts[a].holder.clone(), rig.hosts[b].holder.clone());
    create_bucket(&rig, b, "warm-up", &endpoint).await;
    wait_status(&rig, "warm-up", secs(20)).await;

    let struck = proxy.arm_carrying(AtCommit::LoseReply, b"PUT /buckets/lost-reply");
    create_bucket(&rig, b, "lost-reply", &endpoint).await;
    tokio::time::timeout(secs(20), struck)
        .await
        .expect("the leader sends the PUT")
        .expect("strike reported");
    // The leader is cut off from the database (not from the receiver)
    // while it waits for the reply: it loses the lease by its renew
    // deadline, which drops the request in flight.
    rig.hosts[a].proxy.set(Mode::Blackhole);
    let partitioned = Instant::now();
    wait_arrival(
        &rig,
        "lost-reply",
        "the receiver applies the PUT whose reply is lost",
        secs(10),
        |e| e.outcome == Outcome::Applied,
    )
    .await;
    let timing = rig.timing();
    wait_not_leading(&rig, a, PROVISIONER, timing.renew_deadline + SLACK * 2).await;
    eprintln!(
        "lost reply: the leader stopped leading {:?} after the partition",
        partitioned.elapsed()
    );
    let (next, next_epoch) = rig
        .leader_after(PROVISIONER, epoch, timing.ttl + SLACK * 2)
        .await;
    assert_eq!((next, next_epoch), (b, epoch + 1));
    let done = wait_status(&rig, "lost-reply", secs(20)).await;
    rig.hosts[a].proxy.set(Mode::Pass);

    let entries = mutations(&rig, "lost-reply");
    eprintln!("reply lost, lease lost:\n{}", show(&entries));
    applied_once_then_replayed(
        &entries,
        (&holder_a, epoch),
        (&holder_b, epoch + 1),
        "reply lost, then the lease",
    );
    assert_eq!(
        (done.epoch, done.holder.as_deref()),
        (Some(epoch + 1), Some(holder_b.as_str())),
        "the successor records the status: {done:?}"
    );
    clean(&rig, "reply lost in the network").await;
}

/// Buckets created in the background, one every `every`, through host
/// `via`'s API, until stopped; returns how many were acknowledged.
struct Buckets {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Buckets {
    fn start(rig: &Rig, via: usize, prefix: &str, endpoint: &str, every: Duration) -> Self {
        let addr = rig.hosts[via].replica.addr.clone();
        let acks = rig.acks.clone();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (prefix, endpoint) = (prefix.to_string(), endpoint.to_string());
        let task = tokio::spawn(async move {
            let mut n = 0usize;
            let mut acknowledged = 0usize;
            while !*stopped.borrow_and_update() {
                let name = format!("{prefix}-{n:04}");
                let value = bucket(&name, &endpoint);
                let path = format!("/v1/objects/buckets/{name}");
                let body = value.to_string();
                if let Ok(r) = leasehold_tests::http::request_within(
                    secs(2),
                    &addr,
                    "PUT",
                    &path,
                    &[("If-None-Match", "*")],
                    Some(&body),
                )
                .await
                    && r.status == 201
                {
                    let version = serde_json::from_str::<Value>(&r.body)
                        .ok()
                        .and_then(|v| v["version"].as_u64())
                        .expect("an acknowledged write names its version");
                    acks.record(leasehold_tests::faults::checker::Ack {
                        kind: "buckets".into(),
                        name,
                        version,
                        value,
                    });
                    acknowledged += 1;
                }
                n += 1;
                // Pacing, not ordering.
                let _ = tokio::time::timeout(every, stopped.changed()).await;
            }
            acknowledged
        });
        Self { stop, task }
    }

    async fn stop(self) -> usize {
        self.stop.send_replace(true);
        self.task.await.expect("bucket workload")
    }
}

/// Every request that reached the receiver stamped with epoch `epoch` of
/// `controller`'s lease, in decision order.
fn of_epoch(rig: &Rig, controller: &str, epoch: i64) -> Vec<RecordEntry> {
    let lease = format!("{}/{controller}", rig.cluster);
    the_receiver(rig)
        .record()
        .into_iter()
        .filter(|e| e.lease.as_deref() == Some(lease.as_str()) && e.epoch == Some(epoch as u64))
        .collect()
}

/// A call for the `caller` fixture: `repeat` GETs of a bucket at
/// `endpoint`, back to back in one reconcile, nothing recorded.
fn steady_call(endpoint: &str) -> Value {
    json!({
        "url": format!("{endpoint}/buckets/steady"),
        "method": "GET",
        "repeat": leasehold_host::limits::HTTP_OUT_REQUESTS_PER_RECONCILE,
        "record": false,
    })
}

/// Make the receiver answer every request after [`CALL_SPACING`], so a
/// call's requests keep arriving for far longer than a renew deadline.
fn space_every_answer(rig: &Rig) {
    the_receiver(rig)
        .set_fault(FaultSpec::times(
            Fault::Delay {
                delay_ms: CALL_SPACING.as_millis() as u64,
            },
            leasehold_receiver::MAX_FAULT_REQUESTS,
        ))
        .expect("set a fault");
}

/// What the receiver saw of `controller`'s old epoch, judged against the
/// moment its host resumed and its successor's first request.
fn nothing_stale_after(
    rig: &Rig,
    controller: &str,
    (epoch, next_epoch): (i64, i64),
    resumed: SystemTime,
) {
    let old = of_epoch(rig, controller, epoch);
    let late: Vec<RecordEntry> = old
        .iter()
        .filter(|e| e.arrived_at.timestamp_micros() >= micros(resumed))
        .cloned()
        .collect();
    assert!(
        late.is_empty(),
        "{controller}: the resumed leader sent requests with its old epoch {epoch} after SIGCONT:\n{}",
        show(&late)
    );
    let first_new = of_epoch(rig, controller, next_epoch)
        .first()
        .map(|e| e.seq)
        .expect("the successor called out");
    let after: Vec<RecordEntry> = old.iter().filter(|e| e.seq > first_new).cloned().collect();
    assert!(
        after.is_empty(),
        "{controller}: requests of epoch {epoch} reached the receiver after the successor's first (#{first_new}):\n{}",
        show(&after)
    );
    eprintln!(
        "paused leader, {controller}: {} requests of epoch {epoch}, none after the resume; {} of epoch {next_epoch}",
        old.len(),
        of_epoch(rig, controller, next_epoch).len(),
    );
}

// 2a. Stale leader: paused past its ttl while calling out.
//
// One host leads two controllers that call out steadily: the provisioner
// (a bucket every 100 ms, each PUT answered after a pause) and the
// `caller` fixture (a GET every 100 ms inside one long reconcile). It is
// paused (SIGSTOP) past its ttl, its standby takes both leases over and
// calls out at the next epochs, and then it resumes. The caller's guest
// is in the middle of its call when the host resumes: its next request is
// due at once, before the host's own timer has ended the tenure, and only
// the renew deadline's instant, checked when the request is admitted,
// keeps it from leaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_sends_nothing_once_it_resumes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cloud = receiver().await;
    let endpoint = cloud.url();
    let allow = format!("http_allow = [\"{endpoint}\"]");
    // One host first, so it leads both controllers; the standby joins.
    let spec = RigSpec {
        hosts: 1,
        timing: Timing::SCENARIO,
        controllers: vec![PROVISIONER, CALLER],
        ..RigSpec::scheduler(1)
    }
    .configure(PROVISIONER, &allow)
    .configure(CALLER, &allow);
    let mut rig = Rig::start(spec).await;
    rig.receiver = Some(std::sync::Arc::new(cloud));
    let (a, provisioner_epoch) = rig.leader(PROVISIONER, secs(30)).await;
    let (also_a, caller_epoch) = rig.leader(CALLER, secs(30)).await;
    assert_eq!(also_a, a);
    let b = rig.add_host(&[PROVISIONER, CALLER]).await;

    space_every_answer(&rig);
    let load = Buckets::start(&rig, b, "b", &endpoint, ms(100));
    rig.create(b, "calls", "steady", steady_call(&endpoint))
        .await
        .expect("the call is acknowledged");
    eventually("the leader calls out steadily", secs(20), || async {
        (of_epoch(&rig, PROVISIONER, provisioner_epoch).len() >= 3
            && of_epoch(&rig, CALLER, caller_epoch).len() >= 5)
            .then_some(())
    })
    .await;

    rig.hosts[a].replica.signal("STOP");
    // A leader stopped inside a fenced commit (the provisioner commits
    // every few hundred milliseconds) holds its tenure row until the server
    // ends that idle transaction, after the host's bound on a transaction
    // (`DATABASE_STATEMENT`, the idle bound every fenced transaction sets):
    // the successor's grant waits for that, not only for the ttl.
    let limit = rig
        .timing()
        .ttl
        .max(leasehold_host::timeouts::DATABASE_STATEMENT)
        + SLACK * 2;
    let provisioner = rig
        .leader_after(PROVISIONER, provisioner_epoch, limit)
        .await;
    let caller = rig.leader_after(CALLER, caller_epoch, limit).await;
    assert_eq!(provisioner, (b, provisioner_epoch + 1));
    assert_eq!(caller, (b, caller_epoch + 1));
    eventually("the successor calls out", secs(20), || async {
        (of_epoch(&rig, PROVISIONER, provisioner_epoch + 1).len() >= 2
            && of_epoch(&rig, CALLER, caller_epoch + 1).len() >= 2)
            .then_some(())
    })
    .await;
    let resumed = SystemTime::now();
    rig.hosts[a].replica.signal("CONT");
    wait_not_leading(&rig, a, PROVISIONER, secs(10)).await;
    wait_not_leading(&rig, a, CALLER, secs(10)).await;
    // The resumed host had new buckets and the rest of its call to act
    // on; give it the time to (wrongly) do so while the successor works.
    let seen = of_epoch(&rig, CALLER, caller_epoch + 1).len();
    eventually(
        "the successor calls out after the resume",
        secs(20),
        || async { (of_epoch(&rig, CALLER, caller_epoch + 1).len() >= seen + 5).then_some(()) },
    )
    .await;
    let created = load.stop().await;
    the_receiver(&rig).clear_fault().expect("clear the fault");

    nothing_stale_after(
        &rig,
        PROVISIONER,
        (provisioner_epoch, provisioner_epoch + 1),
        resumed,
    );
    nothing_stale_after(&rig, CALLER, (caller_epoch, caller_epoch + 1), resumed);
    eprintln!("paused leader: {created} buckets created");
    clean(&rig, "paused leader").await;
}

// 2b. Stale leader: cut off from the database, not from the receiver.
//
// The provisioner reads its object from the store before every request,
// so a leader cut off from the database cannot call out at all. The
// `caller` fixture sends one object's requests back to back in a single
// reconcile, without touching the store in between: cut off mid-way, only
// the host can stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_database_stops_calling_out_by_its_renew_deadline() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cloud = receiver().await;
    let endpoint = cloud.url();
    let rig = start(2, CALLER, std::slice::from_ref(&endpoint), cloud).await;
    let (a, epoch) = rig.leader(CALLER, secs(30)).await;
    let b = 1 - a;
    space_every_answer(&rig);
    rig.create(b, "calls", "steady", steady_call(&endpoint))
        .await
        .expect("the call is acknowledged");
    eventually("the leader calls out steadily", secs(20), || async {
        (of_epoch(&rig, CALLER, epoch).len() >= 5).then_some(())
    })
    .await;

    let partitioned = SystemTime::now();
    rig.hosts[a].proxy.set(Mode::Blackhole);
    let timing = rig.timing();
    // The successor is granted once the lease expired (a ttl after the
    // leader's last renewal): by then the leader's renew deadline is long
    // past.
    let (next, next_epoch) = rig
        .leader_after(CALLER, epoch, timing.ttl + SLACK * 2)
        .await;
    assert_eq!((next, next_epoch), (b, epoch + 1));
    eventually("the successor calls out", secs(20), || async {
        (of_epoch(&rig, CALLER, epoch + 1).len() >= 5).then_some(())
    })
    .await;

    let old = of_epoch(&rig, CALLER, epoch);
    let after_partition = old
        .iter()
        .filter(|e| e.arrived_at.timestamp_micros() >= micros(partitioned))
        .count();
    let last = old.last().expect("the leader called out");
    let last_at = last.arrived_at.timestamp_micros();
    eprintln!(
        "partitioned leader: {after_partition} of its {} requests arrived after the partition, the last {} ms after it (renew deadline {:?})",
        old.len(),
        (last_at - micros(partitioned)) / 1000,
        timing.renew_deadline,
    );
    // Otherwise the test proves nothing: the leader must have gone on
    // calling out while cut off.
    assert!(
        after_partition > 0,
        "the leader sent nothing once cut off from the database:\n{}",
        show(&old[old.len().saturating_sub(5)..])
    );
    let bound = micros(partitioned)
        + i64::try_from((timing.renew_deadline + SEND_MARGIN).as_micros()).unwrap_or(i64::MAX);
    assert!(
        last_at <= bound,
        "the leader cut off from the database kept calling out past its renew deadline ({:?} + {SEND_MARGIN:?} after the partition):\n{}",
        timing.renew_deadline,
        show(&old[old.len().saturating_sub(5)..])
    );
    // And it knows it lost the lease (its own view, no database needed).
    wait_not_leading(&rig, a, CALLER, secs(5)).await;
    rig.hosts[a].proxy.set(Mode::Pass);
    the_receiver(&rig).clear_fault().expect("clear the fault");
    clean(&rig, "partitioned leader").await;
}

// 3. The history: each tenure counts the requests its guests sent, as the
// receiver saw them arrive, once the tenure has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenure_history_counts_the_requests_its_guests_sent() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cloud = receiver().await;
    let endpoint = cloud.url();
    let mut rig = start(1, PROVISIONER, std::slice::from_ref(&endpoint), cloud).await;
    let (a, epoch) = rig.leader(PROVISIONER, secs(30)).await;
    for name in ["h-1", "h-2", "h-3"] {
        create_bucket(&rig, a, name, &endpoint).await;
    }
    for name in ["h-1", "h-2", "h-3"] {
        wait_status(&rig, name, secs(20)).await;
    }
    // An orderly stop: the guest stops, the tenure's tally is recorded,
    // then the lease is released.
    rig.hosts[a].replica.signal("TERM");
    let exit = rig.hosts[a].replica.exited(secs(20)).await;
    assert_eq!(exit, Some(0), "the host exits cleanly");
    let sent = of_epoch(&rig, PROVISIONER, epoch).len();
    assert!(sent >= 3, "each bucket's PUT arrived: {sent}");
    let history = rig.history(PROVISIONER).await;
    let tenure = history
        .iter()
        .find(|t| t.epoch == epoch)
        .unwrap_or_else(|| panic!("no tenure {epoch} in {history:?}"));
    assert_eq!(tenure.end_reason.as_deref(), Some("released"), "{tenure:?}");
    assert_eq!(
        tenure.outbound_requests,
        i64::try_from(sent).expect("count"),
        "the history counts what arrived: {tenure:?}"
    );
}
