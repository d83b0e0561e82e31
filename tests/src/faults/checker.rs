//! The invariant checker: reads one cluster's record straight from
//! PostgreSQL (leases, tenures, objects, events — never a host's API or
//! memory) and lists every way it breaks the guarantees Leasehold makes.
//!
//! What it checks, and why each check is sound:
//!
//! - **Tenures** ([`Rule::Tenures`], [`Rule::Overlap`]): each lease's
//!   tenures carry epochs 1, 2, ... without a gap (L1; the one gap allowed
//!   is a grant after a failover, which starts at its timeline's floor
//!   `(timeline - 1) * 2^32 + 1`), only the newest may
//!   be open, the lease row shows the newest, a tenure ends no later than
//!   the next one is granted (L2), all in database time, and every tenure
//!   records its grant's snapshot (below).
//! - **Commit order** ([`Rule::CommittedAfterNextGrant`],
//!   [`Rule::AfterRelease`], [`Rule::WrongTenure`]): every guest write —
//!   each event and object stamped with a lease, epoch and holder — is
//!   placed among the grants and releases of its lease by PostgreSQL's own
//!   commit order, trusting neither a host's clock nor what L4 promises.
//!
//! # Why commit order, and why it is sound
//!
//! Each grant records `pg_current_snapshot()` in its tenure row
//! (`granted_snapshot`, migration 4), taken by the grant's statement after
//! an earlier statement of the same READ COMMITTED transaction locked the
//! lease row `FOR UPDATE`; a release records one the same way
//! (`released_snapshot`). A snapshot is PostgreSQL's own answer to "which
//! transactions had finished when it was taken": `pg_visible_in_snapshot(x,
//! s)` is true exactly when transaction `x` was no longer in progress when
//! `s` was taken, so for a committed row's `xmin`, when the row's
//! transaction committed before `s`. The checker reads each guest-written
//! row's `xmin` (events are insert-only; an object keeps the `xmin` of the
//! transaction that last wrote it, the same one whose lease, epoch and
//! holder it shows), widens it to a 64-bit `xid8` against the server's
//! current next xid (exact while the row is less than 2^32 transactions
//! old, which PostgreSQL's own wraparound protection guarantees for any
//! unfrozen row, and the throwaway test databases are never frozen), and
//! asks the server which snapshots of the lease see it. The store uses no
//! savepoints, so `xmin` is always a top-level transaction, the kind a
//! snapshot lists.
//!
//! What a correct system must then show, for a write stamped with epoch
//! `e` of lease `L` by holder `h`:
//!
//! - it is *visible* in the snapshot of grant `e+1`, if any
//!   ([`Rule::CommittedAfterNextGrant`] otherwise): a fenced write holds its
//!   tenure's row (the write count's update) until it ends, grant `e+1`
//!   locks that row before its snapshot, and PostgreSQL removes a transaction from the
//!   running set before it releases its locks, so every write of epoch `e`
//!   that committed at all committed before that snapshot. A write that
//!   ran before the grant but committed after it — the stale write that
//!   fencing exists to prevent — is invisible in it, whatever any clock
//!   said;
//! - it is *visible* in tenure `e`'s release snapshot, if its holder
//!   released it ([`Rule::AfterRelease`] otherwise): the release locks the
//!   row the same way, and a write that checks the fence after it finds the
//!   lease released. This judges writes after a release with no successor
//!   too;
//! - it is *invisible* in the snapshot of grant `e`, and `h` held epoch `e`
//!   ([`Rule::WrongTenure`] otherwise, also when epoch `e` or lease `L` was
//!   never granted): a host learns epoch `e` only once grant `e` committed,
//!   so a write made with it began after that snapshot.
//!
//! The tenure a write belongs to is derived from commit order alone: the
//! newest epoch whose grant snapshot does not see it (grants of one lease
//! are serialized by the row lock, so their snapshots only grow); every
//! message names it next to what the host stamped. Only the lease of a
//! write is taken from its stamp: nothing else in a row says which
//! controller made it.
//!
//! What cannot be judged: a write that committed after its lease *expired*
//! while no successor was granted yet. No statement runs at expiry, so
//! there is no snapshot to compare with; the write's own
//! `clock_timestamp()` is taken before its `COMMIT` (and after its fence
//! check), so it dates neither the check nor the commit. Such a write is
//! judged as soon as a successor is granted (it must be visible in that
//! grant's snapshot); a lease that expires and is never granted again
//! leaves its last writes unjudged. The tenure rows themselves are not
//! dated either: their `xmin` is whichever statement last touched them (the
//! write count, the next grant or the release), so `last_write_at` is
//! shown, not judged.
//!
//! The time-based rule this checker used before (a write's
//! `clock_timestamp()` against the next grant's) is gone: a write whose
//! statement ran after the next grant's clock committed after that grant's
//! snapshot, so commit order catches everything it caught, without
//! assuming a clock that never steps. Time is still used where it is the
//! record under test: the tenures' own grant and end times ([`Rule::Overlap`]).
//!
//! - **History is accurate** ([`Rule::WriteCount`]): a tenure's `writes`
//!   counts at least the commits attributed to it (L6).
//! - **Feed** ([`Rule::Feed`]): no committed change is ever skipped or
//!   delivered twice to a reader. Positions (change positions, event seqs)
//!   come from one sequence taken freely, so they have gaps and are not
//!   commit order; what a reader is promised is judged from the readers'
//!   own records ([`check_feed`], [`super::reader`]): every change and
//!   event committed at or below the position a reader read through was
//!   given to it exactly once, nothing uncommitted was given, positions
//!   came in increasing order, and per object the versions given strictly
//!   increase (commit order per object). The random schedules run a
//!   reader beside the hosts for their whole length, across held-open and
//!   rolled-back commits ([`super::schedule::run`]); a reader that ignores
//!   the high-water mark ([`super::reader::NaiveReader`]) is caught by it.
//!   From the database alone, the rule checks that event seqs and
//!   revisions are positive and that a task's change stream agrees with
//!   it (its last change has its version).
//! - **Scheduler** ([`Rule::DoubleAssignment`], [`Rule::Assignment`],
//!   [`Rule::Capacity`]): a task has at most one `Assigned` event; a task
//!   shown assigned has exactly one, naming the same node, and a task with
//!   one is shown assigned; no node holds more tasks than its capacity,
//!   counted both from the task objects and from the `Assigned` events (the
//!   suite never finishes tasks, so every event still holds its slot).
//! - **Acknowledged writes** ([`Rule::LostAck`]): every API write the test
//!   saw acknowledged is present, at its acknowledged version or later,
//!   with every field it wrote except those the scheduler owns (`status`).
//! - **Outbound effects**, when the test ran a fenced receiver
//!   ([`check_with_effects`]): the receiver's own record, in its decision
//!   order, keeps the fenced-receiver rule ([`leasehold_receiver::check`]):
//!   no idempotency key applied twice ([`Rule::EffectAppliedTwice`]); per
//!   lease, the epochs it accepted never go backwards and every request of
//!   an epoch below one already accepted is refused as stale, and nothing
//!   unfenced is accepted ([`Rule::StaleEffect`]). And every request that
//!   reached it from this cluster carried a fence the database granted:
//!   `Leasehold-Lease` names a lease of the cluster, and its holder held
//!   its `Leasehold-Epoch` ([`Rule::EffectWrongTenure`]): the host stamps
//!   every request with its tenure's fence, whatever the guest set.
//! - **Provisioner**, with a receiver's record ([`Rule::EffectRepeated`],
//!   [`Rule::UnbackedStatus`]): a bucket's `PUT` is applied at the receiver
//!   at most once per API write of its object (each write asks for at most
//!   one new spec, and every retry or successor of one decision re-sends
//!   its key, so a second application means a key that was not stable);
//!   and a bucket shown `Ready` (in its status part) reports a
//!   `cloud_generation` the receiver produced by applying a `PUT` of that
//!   bucket (`Ready` is recorded only from the cloud's answer). The
//!   provisioner's own writes (its finalizer, its `Pending` and `Ready`
//!   status writes) are not API writes: the `PUT`'s key comes from the
//!   generation, which the finalizer moves once before any `PUT` and status
//!   writes never move, and from the object's incarnation, fixed by its
//!   first status write, so they do not make room for a second application.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_receiver::{Outcome as EffectOutcome, RecordEntry, Violation as ReceiverViolation};

use super::reader::{Delivery, FeedRecord, Stream};
use super::watch::{ChangeFact, Hold, HostLogs, ObjectFact, judge_finalizers, judge_wake_ups};
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
    /// A guest write of epoch e that committed after epoch e+1 was granted
    /// (invisible in the grant's snapshot): a stale write.
    CommittedAfterNextGrant,
    /// A guest write that committed after its own tenure was released
    /// (invisible in the release's snapshot).
    AfterRelease,
    /// A guest write whose stamp disagrees with the tenure commit order
    /// places it in: committed before its epoch was granted, an epoch or
    /// lease never granted, a holder that did not hold the epoch, or a
    /// partial stamp.
    WrongTenure,
    /// A tenure's write count below the commits attributed to it.
    WriteCount,
    /// A reader was not given a committed change or event exactly once, in
    /// order; or the change stream disagrees with an object it changed.
    Feed,
    /// A task assigned more than once.
    DoubleAssignment,
    /// A task object and the `Assigned` events disagree.
    Assignment,
    /// A node holding more tasks than its capacity.
    Capacity,
    /// An acknowledged API write is missing or was overwritten.
    LostAck,
    /// The fenced receiver applied one idempotency key twice: an external
    /// effect happened twice.
    EffectAppliedTwice,
    /// The fenced receiver accepted a request of an epoch below one it had
    /// accepted for the same lease, did not refuse such a request as
    /// stale, or accepted one without a fence.
    StaleEffect,
    /// A request reached the receiver with a fence no tenure of the
    /// cluster had: a lease never granted, an epoch never granted, a holder
    /// that did not hold that epoch, or no fence at all.
    EffectWrongTenure,
    /// A bucket's `PUT` was applied at the receiver more often than the API
    /// wrote its object.
    EffectRepeated,
    /// A bucket is shown `Ready` at a generation no applied `PUT` of it
    /// produced at the receiver.
    UnbackedStatus,
    /// A committed change of a watched kind that no reconcile of its key
    /// by the watching controller followed ([`super::watch`]).
    MissedWakeUp,
    /// An object removed while a finalizer was on it, or left marked for
    /// deletion with none ([`super::watch`]).
    Finalizer,
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
    /// Requests in the fenced receiver's record that were judged (reads
    /// are not), and how many of them it applied.
    pub effects: (usize, usize),
    /// Changes the wake-up rule judged, the deletions among them, and
    /// changes it excused (of objects whose deletion the host does not
    /// promise); `None` when no host logs were given.
    pub wake_ups: Option<(usize, usize, usize)>,
    /// Objects the finalizer workload held.
    pub holds: usize,
    /// What retention had trimmed and how the checker judged around it;
    /// `None` when nothing was trimmed.
    pub trimmed: Option<String>,
    /// The retention floors: (events, changes) trimmed through.
    pub floors: (u64, u64),
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
            "checked tenures {:?}, {} events, {} guest writes, {} tasks ({} assigned), {} acknowledged writes, {} outbound requests ({} applied): {} violation(s)",
            self.tenures,
            self.events,
            self.guest_writes,
            self.tasks,
            self.assigned,
            self.acks,
            self.effects.0,
            self.effects.1,
            self.violations.len()
        )?;
        if let Some((judged, deletions, excused)) = self.wake_ups {
            writeln!(
                f,
                "  wake-ups: {judged} change(s) of watched kinds judged ({deletions} deletion(s)), \
                 {excused} change(s) excused (deleted, not promised: before a worker that started at \
                 the head, trimmed, or after a queue overflow)"
            )?;
        }
        if self.holds > 0 {
            writeln!(f, "  finalizers: {} object(s) held", self.holds)?;
        }
        if let Some(trimmed) = &self.trimmed {
            writeln!(f, "  retention: {trimmed}")?;
        }
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
    /// Whether the grant recorded its snapshot (migration 4).
    granted_snapshot: bool,
    /// Whether the holder's release recorded its snapshot.
    released_snapshot: bool,
}

#[derive(Debug)]
struct LeaseRow {
    holder: String,
    epoch: i64,
    acquired_at: At,
}

/// Where a guest-written row's transaction committed, by the server's
/// own visibility rules (see the module documentation).
#[derive(Debug, Clone)]
struct CommitOrder {
    /// The row's `xmin`, widened to `xid8` (for messages).
    xid: String,
    /// Epochs of the stamped lease whose grant snapshot sees the commit.
    seen_by_grants: Vec<i64>,
    /// Epochs of the stamped lease whose release snapshot sees it.
    seen_by_releases: Vec<i64>,
}

/// Result columns, for a guest-written row of alias `row` (with columns
/// `cluster`, `lease`, `xmin`), joined with `cur` from [`NEXT_XID`]: the
/// row's transaction id as `xid8` text, and the epochs of its lease whose
/// grant and release snapshots see it.
fn commit_order_columns(row: &str) -> String {
    // `xmin` is 32 bits; the widest committed xid is below our snapshot's
    // xmax, and a live row's xmin is less than 2^31 transactions behind it.
    let xid = format!(
        "(cur.xmax - ((cur.xmax - {row}.xmin::text::int8) % 4294967296 + 4294967296) % 4294967296)::text::xid8"
    );
    let seen = |column: &str| {
        format!(
            "ARRAY(SELECT t.epoch FROM leasehold_tenures t
                    WHERE t.cluster = {row}.cluster AND t.lease = {row}.lease
                      AND pg_visible_in_snapshot({xid}, t.{column})
                    ORDER BY t.epoch)"
        )
    };
    format!(
        "{xid}::text, {}, {}",
        seen("granted_snapshot"),
        seen("released_snapshot")
    )
}

/// The checker's own snapshot's xmax (one past the newest completed
/// transaction), as a bigint: what [`commit_order_columns`] widens against.
const NEXT_XID: &str = "(SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS xmax) cur";

fn commit_order(row: &tokio_postgres::Row, first: usize) -> CommitOrder {
    CommitOrder {
        xid: row.get(first),
        seen_by_grants: row.get(first + 1),
        seen_by_releases: row.get(first + 2),
    }
}

/// A write stamped with a lease and epoch.
struct GuestWrite<'a> {
    what: String,
    lease: &'a str,
    epoch: i64,
    holder: &'a str,
    order: &'a CommitOrder,
}

/// Check `cluster` in the database at `url` against everything in the
/// module documentation; `acks` are the API writes the test saw
/// acknowledged.
pub async fn check(url: &str, cluster: &str, acks: &[Ack]) -> Report {
    check_with_effects(url, cluster, acks, &Vec::new).await
}

/// [`check`], and also what a fenced receiver the cluster's controllers
/// called recorded (see the module documentation); `record` reads its
/// record as it is now.
///
/// The record is read twice, because the controllers may still be working
/// while the checker reads: once before the database, to judge requests
/// against the tenures (a request of epoch `e` is sent only after grant
/// `e` committed, so the database read later shows that grant) and to
/// count applications per API write (each object was written before its
/// `PUT`); and once after, to back the statuses the database shows (a
/// status is recorded only after its effect was applied).
pub async fn check_with_effects(
    url: &str,
    cluster: &str,
    acks: &[Ack],
    record: &dyn Fn() -> Vec<RecordEntry>,
) -> Report {
    let evidence = Evidence {
        acks: acks.to_vec(),
        ..Evidence::default()
    };
    check_all(url, cluster, &evidence, record).await
}

/// What a test hands the checker besides the database.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// API writes the test saw acknowledged.
    pub acks: Vec<Ack>,
    /// What the finalizer workload did and saw
    /// ([`super::watch::judge_finalizers`]).
    pub holds: Vec<Hold>,
    /// The hosts' JSON logs, read: the wake-up rule runs when given.
    pub logs: Option<HostLogs>,
    /// A feed reader's record: the checker's own copy of the change stream
    /// and the event log, which outlives retention.
    pub copy: Option<FeedRecord>,
    /// The `[store] tenure_retention` the tenures were trimmed to, if
    /// they were.
    pub tenure_retention: Option<u64>,
}

/// [`check_with_effects`] with everything a test can hand the checker
/// ([`Evidence`]).
///
/// # Trimmed history
///
/// Retention deletes events and changes up to a floor per stream
/// (`leasehold_retention`) and all but the newest tenures of each lease.
/// The checker reads the floors in its snapshot and judges around them:
///
/// - events and changes at or below the floor are taken from the copy
///   (what a reader was given before they were trimmed) when there is
///   one: the scheduler's and provisioner's rules, the wake-up and
///   finalizer rules and the change stream's agreement with the objects
///   use them as if kept; only commit order cannot be judged for them (a
///   trimmed row has no `xmin`), and they are counted as unjudged;
/// - a lease whose history starts above epoch 1 is accepted when
///   `tenure_retention` says tenures were trimmed and at least that many
///   remain; writes stamped with an epoch below the oldest kept tenure
///   cannot be placed in commit order and are counted as unjudged;
/// - without a copy, a task without any change is not reported while the
///   change stream was trimmed;
/// - without a whole copy (the copier missed rows the trimmer took), a
///   task without its `Assigned` event, and a bucket whose receiver
///   applied more PUTs than the kept events show API writes of it, are
///   not reported (the bucket counted as unjudged).
///
/// [`Report::trimmed`] states the floors and what went unjudged.
pub async fn check_all(
    url: &str,
    cluster: &str,
    evidence: &Evidence,
    record: &dyn Fn() -> Vec<RecordEntry>,
) -> Report {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the checker connects to the test database");
    let connection = tokio::spawn(connection);
    let before = record();
    // One snapshot for every table: controllers may still be committing
    // while the checker reads, and statements each with a snapshot of
    // their own would see a tenure's write count before a commit and the
    // objects after it (a false `WriteCount`), or a task assigned and its
    // event not yet (a false `Assignment`).
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .expect("the checker opens its snapshot");
    let mut checker = Checker::load(&client, cluster).await;
    client
        .batch_execute("COMMIT")
        .await
        .expect("the checker closes its snapshot");
    checker.merge_copy(evidence);
    let after = record();
    let report = checker.run(evidence, &before, &after);
    drop(client);
    let _ = connection.await;
    report
}

struct EventRow {
    seq: i64,
    revision: i64,
    kind: String,
    name: String,
    reason: String,
    message: String,
    lease: Option<String>,
    epoch: Option<i64>,
    holder: Option<String>,
    /// `None` for an event retention trimmed, known from the copy.
    order: Option<CommitOrder>,
}

struct ObjectRow {
    kind: String,
    name: String,
    version: i64,
    value: Value,
    lease: Option<String>,
    epoch: Option<i64>,
    holder: Option<String>,
    order: CommitOrder,
    finalizers: Vec<String>,
    marked: bool,
    /// The status part (`Value::Null` without one).
    status: Value,
}

/// The retention floors of the cluster (0: nothing trimmed).
#[derive(Debug, Default, Clone, Copy)]
struct Floors {
    events: i64,
    changes: i64,
}

struct Checker {
    cluster: String,
    floors: Floors,
    /// Trimmed rows taken from the copy: (events, changes).
    from_copy: (usize, usize),
    /// Whether the copy has gaps (its reader was itself too slow for
    /// retention), or there is no copy while something was trimmed.
    copy_incomplete: bool,
    /// The change positions neither the database nor the copy holds, as
    /// `(after, oldest_kept)`: positions `after + 1 .. oldest_kept` were
    /// trimmed before the copy's reader read them (a reader too slow for
    /// retention). Everything up to the changes' floor when something was
    /// trimmed and there is no copy at all.
    change_gaps: Vec<(i64, i64)>,
    /// Guest writes that could not be judged: trimmed events, and writes
    /// of trimmed tenures (and outbound requests of trimmed tenures).
    unjudged: usize,
    /// Whether retention trimmed tenures (`tenure_retention` was given).
    tenures_trimmed: bool,
    leases: BTreeMap<String, LeaseRow>,
    tenures: BTreeMap<String, Vec<Tenure>>,
    events: Vec<EventRow>,
    changes: Vec<ChangeRow>,
    objects: Vec<ObjectRow>,
    report: Report,
}

struct ChangeRow {
    position: i64,
    at_micros: i64,
    kind: String,
    name: String,
    change: String,
    version: i64,
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
                    "SELECT lease, epoch, holder, {}, {}, end_reason, writes,
                            granted_snapshot IS NOT NULL, released_snapshot IS NOT NULL
                       FROM leasehold_tenures WHERE cluster = $1 ORDER BY lease, epoch",
                    time_columns("acquired_at"),
                    time_columns("ended_at"),
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
                granted_snapshot: r.get(9),
                released_snapshot: r.get(10),
            });
        }
        let events = client
            .query(
                &format!(
                    "SELECT seq, revision, kind, name, reason, message, lease, epoch, holder, {}
                       FROM leasehold_events e, {NEXT_XID} WHERE e.cluster = $1 ORDER BY seq",
                    commit_order_columns("e")
                ),
                &[&cluster],
            )
            .await
            .expect("read events")
            .iter()
            .map(|r| EventRow {
                seq: r.get(0),
                revision: r.get(1),
                kind: r.get(2),
                name: r.get(3),
                reason: r.get(4),
                message: r.get(5),
                lease: r.get(6),
                epoch: r.get(7),
                holder: r.get(8),
                order: Some(commit_order(r, 9)),
            })
            .collect();
        let changes = client
            .query(
                "SELECT position, (extract(epoch FROM at) * 1000000)::int8, kind, name, change, version
                   FROM leasehold_changes WHERE cluster = $1 ORDER BY position",
                &[&cluster],
            )
            .await
            .expect("read changes")
            .iter()
            .map(|r| ChangeRow {
                position: r.get(0),
                at_micros: r.get(1),
                kind: r.get(2),
                name: r.get(3),
                change: r.get(4),
                version: r.get(5),
            })
            .collect();
        let floors = client
            .query_opt(
                "SELECT events_floor, changes_floor FROM leasehold_retention WHERE cluster = $1",
                &[&cluster],
            )
            .await
            .expect("read the retention floors")
            .map(|r| Floors {
                events: r.get(0),
                changes: r.get(1),
            })
            .unwrap_or_default();
        let objects = client
            .query(
                &format!(
                    "SELECT kind, name, version, value, lease, epoch, holder, {},
                            finalizers, deleting_since IS NOT NULL, status
                       FROM leasehold_objects o, {NEXT_XID} WHERE o.cluster = $1 ORDER BY kind, name",
                    commit_order_columns("o")
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
                lease: r.get(4),
                epoch: r.get(5),
                holder: r.get(6),
                order: commit_order(r, 7),
                finalizers: r.get(10),
                marked: r.get(11),
                status: r
                    .get::<_, Option<&str>>(12)
                    .and_then(|s| serde_json::from_str(s).ok())
                    .unwrap_or(Value::Null),
            })
            .collect();
        Self {
            cluster: cluster.to_string(),
            floors,
            from_copy: (0, 0),
            copy_incomplete: false,
            change_gaps: Vec::new(),
            unjudged: 0,
            tenures_trimmed: false,
            leases,
            tenures,
            events,
            changes,
            objects,
            report: Report::default(),
        }
    }

    fn violation(&mut self, rule: Rule, detail: String) {
        self.report.violations.push(Violation { rule, detail });
    }

    /// Take the events and changes retention trimmed from the copy, if
    /// there is one (see [`check_all`]).
    fn merge_copy(&mut self, evidence: &Evidence) {
        let floors = self.floors;
        if floors.events == 0 && floors.changes == 0 {
            return;
        }
        let Some(copy) = &evidence.copy else {
            self.copy_incomplete = true;
            if floors.changes > 0 {
                self.change_gaps.push((0, floors.changes + 1));
            }
            return;
        };
        self.copy_incomplete = !copy.trimmed.is_empty();
        self.change_gaps = copy
            .trimmed
            .iter()
            .filter(|(stream, _, _)| *stream == Stream::Changes)
            .map(|&(_, after, oldest_kept)| (after as i64, oldest_kept as i64))
            .collect();
        let kept_events: BTreeSet<i64> = self.events.iter().map(|e| e.seq).collect();
        let mut events = Vec::new();
        for e in &copy.copy.events {
            let seq = e.seq as i64;
            if seq <= floors.events && !kept_events.contains(&seq) {
                let (lease, epoch, holder) = match &e.stamp {
                    Some((lease, epoch, holder)) => (
                        Some(lease.clone()),
                        Some(*epoch as i64),
                        Some(holder.clone()),
                    ),
                    None => (None, None, None),
                };
                events.push(EventRow {
                    seq,
                    revision: e.revision as i64,
                    kind: e.kind.clone(),
                    name: e.name.clone(),
                    reason: e.reason.clone(),
                    message: e.message.clone(),
                    lease,
                    epoch,
                    holder,
                    order: None,
                });
            }
        }
        let kept_changes: BTreeSet<i64> = self.changes.iter().map(|c| c.position).collect();
        let mut changes = Vec::new();
        for c in &copy.copy.changes {
            let position = c.position as i64;
            if position <= floors.changes && !kept_changes.contains(&position) {
                changes.push(ChangeRow {
                    position,
                    at_micros: c.at_micros,
                    kind: c.kind.clone(),
                    name: c.name.clone(),
                    change: c.change.clone(),
                    version: c.version as i64,
                });
            }
        }
        self.from_copy = (events.len(), changes.len());
        self.events.extend(events);
        self.events.sort_by_key(|e| e.seq);
        self.changes.extend(changes);
        self.changes.sort_by_key(|c| c.position);
    }

    fn run(mut self, evidence: &Evidence, record: &[RecordEntry], later: &[RecordEntry]) -> Report {
        self.tenures_trimmed = evidence.tenure_retention.is_some();
        self.check_tenures(evidence.tenure_retention);
        self.check_writes(evidence.tenure_retention.is_some());
        self.check_event_log();
        self.check_scheduler();
        self.check_acks(&evidence.acks);
        if let Some(logs) = &evidence.logs {
            self.check_wake_ups(logs);
        }
        self.check_finalizers(&evidence.holds);
        self.check_effects(record);
        if !later.is_empty() {
            self.check_buckets(record, later);
        }
        self.report.tenures = self
            .tenures
            .iter()
            .map(|(lease, t)| (lease.clone(), t.len()))
            .collect();
        self.report.events = self.events.len();
        let Floors { events, changes } = self.floors;
        self.report.floors = (events as u64, changes as u64);
        if events > 0 || changes > 0 || evidence.tenure_retention.is_some() {
            self.report.trimmed = Some(format!(
                "events trimmed through seq {events}, changes through position {changes}; \
                 {} event(s) and {} change(s) taken from the checker's copy{}; \
                 {} guest write(s) or outbound request(s) not judged against the tenures \
                 (trimmed events, or epochs of trimmed tenures; tenure_retention {:?})",
                self.from_copy.0,
                self.from_copy.1,
                if self.copy_incomplete {
                    " (the copy is incomplete: tasks without a change or an Assigned event are not reported)"
                } else {
                    ""
                },
                self.unjudged,
                evidence.tenure_retention
            ));
        }
        self.report.violations.sort_by_key(|v| v.rule);
        self.report
    }

    fn check_tenures(&mut self, tenure_retention: Option<u64>) {
        let mut found = Vec::new();
        for (lease, tenures) in &self.tenures {
            // Retention kept the newest `n` of each lease (more may have
            // been granted since): a history that starts later than epoch
            // 1 is whole from where it starts when at least `n` remain.
            let trimmed_start =
                tenure_retention.is_some_and(|n| tenures.len() as u64 >= n && tenures[0].epoch > 1);
            for (i, t) in tenures.iter().enumerate() {
                if !t.granted_snapshot {
                    found.push((
                        Rule::Tenures,
                        format!(
                            "lease {lease}: epoch {} ({}) recorded no grant snapshot: its writes cannot be placed in commit order",
                            t.epoch, t.holder
                        ),
                    ));
                }
                // A failover's first grant jumps to its timeline's floor.
                let floor = |epoch: i64| epoch > 1 && (epoch - 1) % (1_i64 << 32) == 0;
                let follows = match i.checked_sub(1).map(|p| tenures[p].epoch) {
                    None => t.epoch == 1 || floor(t.epoch) || trimmed_start,
                    Some(previous) => {
                        t.epoch == previous + 1 || (t.epoch > previous && floor(t.epoch))
                    }
                };
                if !follows {
                    found.push((
                        Rule::Tenures,
                        format!(
                            "lease {lease}: tenure #{} has epoch {} (epochs must be 1, 2, ... without gaps, \
                             but for a failover's jump to its timeline's floor)",
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

    /// Judge one guest write against the tenures of its lease, by commit
    /// order (see the module documentation). `None` in the outer option:
    /// the write's tenure was trimmed by retention, so it cannot be judged.
    fn judge_kept(
        &self,
        write: &GuestWrite<'_>,
        tenure_retention: bool,
    ) -> Option<Option<(Rule, String)>> {
        if tenure_retention
            && let Some(oldest) = self.tenures.get(write.lease).and_then(|t| t.first())
            && write.epoch < oldest.epoch
        {
            return None;
        }
        Some(self.judge(write))
    }

    fn judge(&self, write: &GuestWrite<'_>) -> Option<(Rule, String)> {
        let GuestWrite {
            what,
            lease,
            epoch,
            holder,
            order,
        } = write;
        let what = format!(
            "{what} by {lease} epoch {epoch} ({holder}), xid {}",
            order.xid
        );
        let Some(tenures) = self.tenures.get(*lease) else {
            return Some((
                Rule::WrongTenure,
                format!("{what}: lease {lease} was never granted"),
            ));
        };
        let seen_by_grant = |t: &Tenure| order.seen_by_grants.contains(&t.epoch);
        // Grant snapshots only grow: the newest grant that does not see the
        // commit is the tenure current when it committed.
        let derived = match tenures
            .iter()
            .rev()
            .find(|t| t.granted_snapshot && !seen_by_grant(t))
        {
            Some(t) => format!("commit order places it in epoch {} ({})", t.epoch, t.holder),
            None => "commit order places it before the first grant".to_string(),
        };
        let Some(tenure) = tenures.iter().find(|t| t.epoch == *epoch) else {
            return Some((
                Rule::WrongTenure,
                format!("{what}: epoch {epoch} was never granted; {derived}"),
            ));
        };
        if tenure.granted_snapshot && seen_by_grant(tenure) {
            return Some((
                Rule::WrongTenure,
                format!("{what} committed before epoch {epoch} was granted; {derived}"),
            ));
        }
        if let Some(next) = tenures.iter().find(|t| t.epoch == epoch + 1)
            && next.granted_snapshot
            && !seen_by_grant(next)
        {
            return Some((
                Rule::CommittedAfterNextGrant,
                format!(
                    "{what} committed after epoch {} was granted to {}; {derived}",
                    next.epoch, next.holder
                ),
            ));
        }
        if tenure.released_snapshot && !order.seen_by_releases.contains(epoch) {
            return Some((
                Rule::AfterRelease,
                format!(
                    "{what} committed after {} released epoch {epoch} ({}); {derived}",
                    tenure.holder,
                    tenure.end_reason.as_deref().unwrap_or("?")
                ),
            ));
        }
        if tenure.holder != *holder {
            return Some((
                Rule::WrongTenure,
                format!(
                    "{what} is attributed to {holder}, but {} held epoch {epoch}; {derived}",
                    tenure.holder
                ),
            ));
        }
        None
    }

    fn check_writes(&mut self, tenure_retention: bool) {
        let mut unjudged = 0;
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
                    let Some(order) = &e.order else {
                        // Trimmed: known from the copy, not placed.
                        unjudged += 1;
                        continue;
                    };
                    writes.push(GuestWrite {
                        what: format!(
                            "event {} ({} {}/{}, revision {})",
                            e.seq, e.reason, e.kind, e.name, e.revision
                        ),
                        lease,
                        epoch,
                        holder,
                        order,
                    });
                }
                (None, None, None) => {}
                _ => found.push((
                    Rule::WrongTenure,
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
                        order: &o.order,
                    });
                }
                (None, None, None) => {}
                _ => found.push((
                    Rule::WrongTenure,
                    format!("object {}/{} has a partial attribution", o.kind, o.name),
                )),
            }
        }
        for (lease, tenures) in &self.tenures {
            for t in tenures {
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
        self.report.guest_writes = writes.len();
        for write in &writes {
            match self.judge_kept(write, tenure_retention) {
                Some(Some(violation)) => found.push(violation),
                Some(None) => {}
                None => unjudged += 1,
            }
        }
        drop(writes);
        self.unjudged += unjudged;
        for (rule, detail) in found {
            self.violation(rule, detail);
        }
    }

    /// What the database alone shows of the feed: positive positions, and
    /// for every task with changes, a last change that shows the task as
    /// it is (tasks only: the suite's hand-written records have other
    /// objects without changes).
    fn check_event_log(&mut self) {
        let mut found: Vec<String> = self
            .events
            .iter()
            .filter(|e| e.seq <= 0 || e.revision <= 0)
            .take(5)
            .map(|e| format!("event {} has revision {}", e.seq, e.revision))
            .collect();
        let mut last: BTreeMap<(&str, &str), &ChangeRow> = BTreeMap::new();
        for c in &self.changes {
            if let Some(before) = last.get(&(c.kind.as_str(), c.name.as_str()))
                && before.version >= c.version
                && c.change != "deleted"
            {
                found.push(format!(
                    "change {} of {}/{} has version {}, not above change {}'s {}",
                    c.position, c.kind, c.name, c.version, before.position, before.version
                ));
            }
            last.insert((c.kind.as_str(), c.name.as_str()), c);
        }
        for o in self.objects.iter().filter(|o| o.kind == "tasks") {
            match last.get(&(o.kind.as_str(), o.name.as_str())) {
                Some(c) if c.change != "deleted" && c.version == o.version => {}
                // Its newer changes may lie in a gap of the copy: positions
                // after its last known change that nobody kept.
                Some(c) if c.version < o.version && self.gap_after(c.position) => {}
                Some(c) => found.push(format!(
                    "{}/{} is at version {} but its last change ({}) is {} at version {}",
                    o.kind, o.name, o.version, c.position, c.change, c.version
                )),
                None if self.changes.is_empty() => {}
                // Its changes may all be trimmed, and no whole copy says.
                None if self.copy_incomplete && self.floors.changes > 0 => {}
                None => found.push(format!(
                    "{}/{} is at version {} but has no change",
                    o.kind, o.name, o.version
                )),
            }
        }
        for detail in found {
            self.violation(Rule::Feed, detail);
        }
    }

    /// Whether a gap of the copy holds positions after `position`.
    fn gap_after(&self, position: i64) -> bool {
        self.change_gaps
            .iter()
            .any(|&(_, oldest_kept)| oldest_kept - 1 > position)
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
                        // Its event may be trimmed, and no whole copy says.
                        None | Some([]) if self.copy_incomplete && self.floors.events > 0 => {}
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

    /// The wake-up rule over every change (the kept ones and the copy's)
    /// and what the hosts logged ([`super::watch::judge_wake_ups`]).
    fn check_wake_ups(&mut self, logs: &HostLogs) {
        let changes = self.change_facts();
        let found = judge_wake_ups(&changes, logs);
        self.report.wake_ups = Some((found.judged, found.deletions, found.excused));
        for detail in found.missed {
            self.violation(Rule::MissedWakeUp, detail);
        }
    }

    /// The finalizer rule ([`super::watch::judge_finalizers`]).
    fn check_finalizers(&mut self, holds: &[Hold]) {
        self.report.holds = holds.len();
        let changes = self.change_facts();
        let objects: Vec<ObjectFact> = self
            .objects
            .iter()
            .map(|o| ObjectFact {
                kind: o.kind.clone(),
                name: o.name.clone(),
                version: o.version as u64,
                finalizers: o.finalizers.clone(),
                marked: o.marked,
            })
            .collect();
        let whole = self.change_gaps.is_empty();
        for detail in judge_finalizers(holds, &changes, &objects, whole) {
            self.violation(Rule::Finalizer, detail);
        }
    }

    fn change_facts(&self) -> Vec<ChangeFact> {
        self.changes
            .iter()
            .map(|c| ChangeFact {
                position: c.position as u64,
                at_micros: c.at_micros,
                kind: c.kind.clone(),
                name: c.name.clone(),
                change: c.change.clone(),
                version: c.version as u64,
            })
            .collect()
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

impl Checker {
    /// The fenced receiver's record: its own rule, then every request's
    /// fence against the tenures (see the module documentation).
    fn check_effects(&mut self, record: &[RecordEntry]) {
        let judged: Vec<&RecordEntry> = record
            .iter()
            .filter(|e| e.outcome != EffectOutcome::Read)
            .collect();
        self.report.effects = (
            judged.len(),
            judged
                .iter()
                .filter(|e| e.outcome == EffectOutcome::Applied)
                .count(),
        );
        let mut found = Vec::new();
        // Every message starts with the entry it is about: `receiver #SEQ:`.
        for violation in leasehold_receiver::check(record) {
            let (rule, seq) = match violation {
                ReceiverViolation::KeyAppliedTwice { seq, .. } => (Rule::EffectAppliedTwice, seq),
                ReceiverViolation::AcceptedEpochWentBack { seq, .. }
                | ReceiverViolation::StaleNotRefused { seq, .. }
                | ReceiverViolation::AcceptedUnfenced { seq, .. } => (Rule::StaleEffect, seq),
            };
            found.push((rule, format!("receiver #{seq}: {violation}")));
        }
        let prefix = format!("{}/", self.cluster);
        for entry in judged {
            let what = format!(
                "receiver #{}: {} {} ({}, key {:?})",
                entry.seq,
                entry.method,
                entry.path,
                entry.outcome,
                entry.idempotency_key.as_deref().unwrap_or("")
            );
            let (Some(stamp), Some(epoch), Some(holder)) =
                (entry.lease.as_deref(), entry.epoch, entry.holder.as_deref())
            else {
                found.push((
                    Rule::EffectWrongTenure,
                    format!(
                        "{what} arrived without a whole fence (lease {:?}, epoch {:?}, holder {:?})",
                        entry.lease, entry.epoch, entry.holder
                    ),
                ));
                continue;
            };
            // Another cluster's requests are its own checker's business.
            let Some(lease) = stamp.strip_prefix(&prefix) else {
                continue;
            };
            let tenure = self
                .tenures
                .get(lease)
                .and_then(|t| t.iter().find(|t| u64::try_from(t.epoch) == Ok(epoch)));
            // Retention trimmed the tenure it names: not judged.
            if self.tenures_trimmed
                && let Some(oldest) = self.tenures.get(lease).and_then(|t| t.first())
                && u64::try_from(oldest.epoch).is_ok_and(|oldest| epoch < oldest)
            {
                self.unjudged += 1;
                continue;
            }
            match tenure {
                None => found.push((
                    Rule::EffectWrongTenure,
                    format!("{what} carries lease {stamp} epoch {epoch}, which was never granted"),
                )),
                Some(t) if t.holder != holder => found.push((
                    Rule::EffectWrongTenure,
                    format!(
                        "{what} carries lease {stamp} epoch {epoch} of holder {holder}, but {} held that epoch",
                        t.holder
                    ),
                )),
                Some(_) => {}
            }
        }
        for (rule, detail) in found {
            self.violation(rule, detail);
        }
    }
}

impl Checker {
    /// The provisioner's buckets against the receiver's record (see the
    /// module documentation): `record` was read before the database,
    /// `later` after it.
    fn check_buckets(&mut self, record: &[RecordEntry], later: &[RecordEntry]) {
        let prefix = format!("{}/", self.cluster);
        // Applied PUTs per bucket: the generations they produced.
        let applied_puts = |record: &'_ [RecordEntry]| {
            let mut applied: BTreeMap<String, Vec<(u64, Option<u64>)>> = BTreeMap::new();
            for e in record {
                if e.method == "PUT"
                    && e.lease.as_deref().is_some_and(|l| l.starts_with(&prefix))
                    && e.outcome == EffectOutcome::Applied
                    && let Some(name) = e.path.strip_prefix("/buckets/")
                {
                    applied
                        .entry(name.to_string())
                        .or_default()
                        .push((e.seq, e.generation));
                }
            }
            applied
        };
        let applied = applied_puts(record);
        let mut api_writes: HashMap<&str, usize> = HashMap::new();
        for e in &self.events {
            if e.kind == "buckets" && e.lease.is_none() && e.reason != "Deleted" {
                *api_writes.entry(e.name.as_str()).or_default() += 1;
            }
        }
        let mut found = Vec::new();
        for (name, puts) in &applied {
            let writes = api_writes.get(name.as_str()).copied().unwrap_or(0);
            if puts.len() > writes && self.copy_incomplete && self.floors.events > 0 {
                // The API's writes of this bucket may be among the events
                // retention trimmed, and no whole copy kept them: not
                // judged (as an assignment without its event is not).
                self.unjudged += 1;
            } else if puts.len() > writes {
                found.push((
                    Rule::EffectRepeated,
                    format!(
                        "bucket {name}: its PUT was applied {} times at the receiver (#{}), but the API wrote the object {writes} time(s)",
                        puts.len(),
                        puts.iter()
                            .map(|(seq, _)| seq.to_string())
                            .collect::<Vec<_>>()
                            .join(", #")
                    ),
                ));
            }
        }
        let applied = applied_puts(later);
        for o in self.objects.iter().filter(|o| o.kind == "buckets") {
            // The provisioner's record is the object's status part; its
            // `cloud_generation` is the receiver's count after the PUT.
            let status = &o.status;
            if status["phase"] != "Ready" {
                continue;
            }
            let generation = status["cloud_generation"].as_u64();
            let backed = applied
                .get(o.name.as_str())
                .is_some_and(|puts| puts.iter().any(|(_, g)| g.is_some() && *g == generation));
            if !backed {
                found.push((
                    Rule::UnbackedStatus,
                    format!(
                        "bucket {} (version {}, by {:?} epoch {:?}) shows Ready at generation {generation:?}, but no PUT the receiver applied produced it",
                        o.name, o.version, o.holder, o.epoch
                    ),
                ));
            }
        }
        for (rule, detail) in found {
            self.violation(rule, detail);
        }
    }
}

/// The feed rule over what readers were given (see the module
/// documentation): reads every change and event of `cluster` in one
/// snapshot, taken after the readers finished, and judges each record
/// against it.
///
/// With retention, rows at or below a stream's floor
/// (`leasehold_retention`) are gone: an entry a reader was given there
/// cannot be compared with the database (it is not reported as
/// uncommitted), and nothing there is owed; above the floor the rule is
/// whole. Ranges a reader was told were trimmed ([`FeedRecord::trimmed`])
/// are owed only if the database still has them (a store that answered
/// "too old" for rows it kept is caught).
pub async fn check_feed(url: &str, cluster: &str, records: &[FeedRecord]) -> Vec<Violation> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the checker connects to the test database");
    let connection = tokio::spawn(connection);
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .expect("the checker opens its snapshot");
    let mut committed = Vec::new();
    for (stream, sql) in [
        (
            Stream::Changes,
            "SELECT position, kind, name, version FROM leasehold_changes WHERE cluster = $1",
        ),
        (
            Stream::Events,
            "SELECT seq, kind, name, revision FROM leasehold_events WHERE cluster = $1",
        ),
    ] {
        for r in client.query(sql, &[&cluster]).await.expect("read the feed") {
            committed.push(Delivery {
                stream,
                position: r.get::<_, i64>(0) as u64,
                kind: r.get(1),
                name: r.get(2),
                version: r.get::<_, i64>(3) as u64,
            });
        }
    }
    let floors = client
        .query_opt(
            "SELECT changes_floor, events_floor FROM leasehold_retention WHERE cluster = $1",
            &[&cluster],
        )
        .await
        .expect("read the retention floors")
        .map_or([0, 0], |r| {
            [r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64]
        });
    client
        .batch_execute("COMMIT")
        .await
        .expect("the checker closes its snapshot");
    drop(client);
    let _ = connection.await;
    records
        .iter()
        .flat_map(|record| judge_feed(&committed, floors, record))
        .collect()
}

/// The feed rule for one reader's record against what is committed and
/// kept: `floors` are the retention floors of the changes and the events
/// (0: nothing trimmed).
pub fn judge_feed(committed: &[Delivery], floors: [u64; 2], record: &FeedRecord) -> Vec<Violation> {
    let mut found = Vec::new();
    let reader = &record.reader;
    for (i, stream) in [Stream::Changes, Stream::Events].into_iter().enumerate() {
        let through = record.through[i];
        let floor = floors[i];
        let truth: BTreeMap<u64, &Delivery> = committed
            .iter()
            .filter(|c| c.stream == stream)
            .map(|c| (c.position, c))
            .collect();
        let mut given: BTreeMap<u64, usize> = BTreeMap::new();
        let mut previous: Option<u64> = None;
        // A deletion records the version the object had: the same as the
        // change before it (known from the reader's copy).
        let deletions: BTreeSet<u64> = record
            .copy
            .changes
            .iter()
            .filter(|c| c.change == "deleted")
            .map(|c| c.position)
            .collect();
        let mut versions: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for d in record.delivered.iter().filter(|d| d.stream == stream) {
            *given.entry(d.position).or_default() += 1;
            if let Some(p) = previous
                && d.position <= p
            {
                found.push(format!(
                    "{reader} was given {stream:?} {} ({}/{}) after {p}",
                    d.position, d.kind, d.name
                ));
            }
            previous = Some(d.position);
            match truth.get(&d.position) {
                Some(c) if c.kind == d.kind && c.name == d.name && c.version == d.version => {}
                Some(c) => found.push(format!(
                    "{reader} was given {stream:?} {} as {}/{} v{}, but it is {}/{} v{}",
                    d.position, d.kind, d.name, d.version, c.kind, c.name, c.version
                )),
                // Trimmed since: nothing to compare with.
                None if d.position <= floor => {}
                None => found.push(format!(
                    "{reader} was given {stream:?} {} ({}/{}), which is not committed",
                    d.position, d.kind, d.name
                )),
            }
            if stream == Stream::Changes {
                let key = (d.kind.as_str(), d.name.as_str());
                if let Some(&v) = versions.get(&key)
                    && (d.version < v || (d.version == v && !deletions.contains(&d.position)))
                {
                    found.push(format!(
                        "{reader} was given {}/{} at version {} after version {v}",
                        d.kind, d.name, d.version
                    ));
                }
                versions.insert(key, d.version);
            }
        }
        for (position, n) in &given {
            if *n > 1 {
                found.push(format!(
                    "{reader} was given {stream:?} {position} {n} times"
                ));
            }
        }
        for (position, c) in truth.range(..=through) {
            if !given.contains_key(position) {
                let told = record.trimmed.iter().any(|(s, after, oldest)| {
                    *s == stream && after < position && position < oldest
                });
                found.push(format!(
                    "{reader} skipped {stream:?} {position} ({}/{} v{}): it read through {through}{}",
                    c.kind,
                    c.name,
                    c.version,
                    if told {
                        " (the store told it that position was trimmed, but it is kept)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    found
        .into_iter()
        .map(|detail| Violation {
            rule: Rule::Feed,
            detail,
        })
        .collect()
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

#[cfg(test)]
mod feed_rule {
    use super::*;

    fn change(position: u64, name: &str, version: u64) -> Delivery {
        Delivery {
            stream: Stream::Changes,
            position,
            kind: "tasks".into(),
            name: name.into(),
            version,
        }
    }

    fn record(delivered: Vec<Delivery>, through: u64) -> FeedRecord {
        FeedRecord {
            reader: "reader".into(),
            delivered,
            through: [through, 0],
            ..FeedRecord::default()
        }
    }

    fn committed() -> Vec<Delivery> {
        vec![change(3, "a", 2), change(7, "b", 6), change(9, "a", 8)]
    }

    fn details(found: &[Violation]) -> Vec<&str> {
        assert!(found.iter().all(|v| v.rule == Rule::Feed));
        found.iter().map(|v| v.detail.as_str()).collect()
    }

    #[test]
    fn a_reader_given_everything_once_in_order_is_clean() {
        let found = judge_feed(&committed(), [0, 0], &record(committed(), 9));
        assert!(found.is_empty(), "{:?}", details(&found));
        // Not yet read through the last: nothing is owed beyond `through`.
        let found = judge_feed(&committed(), [0, 0], &record(committed()[..2].to_vec(), 8));
        assert!(found.is_empty(), "{:?}", details(&found));
    }

    #[test]
    fn a_reader_that_skips_is_caught() {
        // The hand-written broken reader: it went past 3 while 3 was in
        // flight, and never came back.
        let skipped = record(vec![change(7, "b", 6), change(9, "a", 8)], 9);
        let found = judge_feed(&committed(), [0, 0], &skipped);
        assert_eq!(details(&found).len(), 1, "{:?}", details(&found));
        assert!(details(&found)[0].contains("skipped Changes 3"));
    }

    #[test]
    fn a_reader_given_one_twice_or_out_of_order_is_caught() {
        let twice = record(
            vec![
                change(3, "a", 2),
                change(7, "b", 6),
                change(7, "b", 6),
                change(9, "a", 8),
            ],
            9,
        );
        let found = judge_feed(&committed(), [0, 0], &twice);
        assert!(
            details(&found)
                .iter()
                .any(|d| d.contains("given Changes 7 2 times"))
        );
        let reordered = record(
            vec![change(9, "a", 8), change(3, "a", 2), change(7, "b", 6)],
            9,
        );
        let found = judge_feed(&committed(), [0, 0], &reordered);
        assert!(
            details(&found)
                .iter()
                .any(|d| d.contains("Changes 3 (tasks/a) after 9"))
        );
        assert!(
            details(&found)
                .iter()
                .any(|d| d.contains("version 2 after version 8"))
        );
    }

    /// Retention trimmed positions 3 and 7: a reader given them before is
    /// not told they never committed, a reader that skipped them after
    /// being told they were trimmed owes nothing; what is kept is judged
    /// as before (9 skipped), and a "trimmed" answer for a kept position
    /// is a skip.
    #[test]
    fn trimmed_positions_are_judged_only_where_kept() {
        let kept = vec![change(9, "a", 8)];
        let found = judge_feed(&kept, [7, 0], &record(committed(), 9));
        assert!(found.is_empty(), "{:?}", details(&found));
        let mut told = record(vec![change(9, "a", 8)], 9);
        told.trimmed.push((Stream::Changes, 0, 8));
        let found = judge_feed(&kept, [7, 0], &told);
        assert!(found.is_empty(), "{:?}", details(&found));
        let found = judge_feed(&kept, [7, 0], &record(committed()[..2].to_vec(), 9));
        assert_eq!(details(&found).len(), 1, "{:?}", details(&found));
        assert!(details(&found)[0].contains("skipped Changes 9"));
        // Told 7 was trimmed, yet the database keeps it.
        let mut wrongly = record(vec![change(3, "a", 2), change(9, "a", 8)], 9);
        wrongly.trimmed.push((Stream::Changes, 3, 8));
        let found = judge_feed(&committed(), [0, 0], &wrongly);
        assert_eq!(details(&found).len(), 1, "{:?}", details(&found));
        assert!(details(&found)[0].contains("told it that position was trimmed"));
    }

    /// A deletion records the version the object had, so it repeats the
    /// version of the change before it: clean when the reader's copy shows
    /// it is a deletion, a violation otherwise.
    #[test]
    fn a_deletion_repeats_the_last_version() {
        let committed = vec![change(3, "a", 2), change(7, "a", 2)];
        let mut deleted = record(committed.clone(), 7);
        deleted
            .copy
            .changes
            .push(super::super::reader::CopiedChange {
                position: 7,
                at_micros: 0,
                kind: "tasks".into(),
                name: "a".into(),
                change: "deleted".into(),
                version: 2,
            });
        let found = judge_feed(&committed, [0, 0], &deleted);
        assert!(found.is_empty(), "{:?}", details(&found));
        let found = judge_feed(&committed, [0, 0], &record(committed.clone(), 7));
        assert!(
            details(&found)
                .iter()
                .any(|d| d.contains("version 2 after version 2"))
        );
    }

    #[test]
    fn a_reader_given_what_never_committed_is_caught() {
        let phantom = record(vec![change(3, "a", 2), change(5, "z", 4)], 5);
        let found = judge_feed(&committed(), [0, 0], &phantom);
        assert!(
            details(&found)
                .iter()
                .any(|d| d.contains("5 (tasks/z), which is not committed"))
        );
    }
}
