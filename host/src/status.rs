//! What the supervisors report and the API shows: per-controller state and
//! metrics, the database check, and this host's claim on its holder name. Written by supervisors, read by the
//! HTTP surface; plain shared data with no behaviour of its own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;

use crate::authority::MoveReason;
use crate::authority::claim::ClaimState;
use crate::outbound::{LATENCY_BUCKETS as OUTBOUND_BUCKETS, OutboundCounters, Outcome};
use crate::runtime::CommitCounters;

/// Where a controller stands on this replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ControllerState {
    /// Not yet tried (e.g. waiting for the database check).
    Starting,
    /// This replica holds the lease and runs the guest.
    Leading {
        /// The tenure's epoch.
        epoch: u64,
        /// Set while the guest is being restarted after a failure (the
        /// lease is still held).
        #[serde(skip_serializing_if = "Option::is_none")]
        problem: Option<String>,
    },
    /// Another replica holds the lease; this one waits.
    Standby {
        /// The current holder, if known.
        holder: Option<String>,
    },
    /// Something is wrong; the reason says what.
    Failing {
        /// What failed.
        reason: String,
    },
    /// Stopped (shutdown or removed).
    Stopped,
}

/// Fixed-bucket histogram of durations, in seconds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

/// Bucket bounds (seconds) for reconcile durations and renew latencies.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Histogram {
    /// An empty histogram over `bounds` (ascending, seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Record one observation.
    pub fn observe(&self, value: Duration) {
        let secs = value.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros
            .fetch_add(value.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Cumulative bucket counts `(upper bound, count)`, the sum in seconds
    /// and the total count, as Prometheus expects them.
    pub fn snapshot(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let mut running = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| {
                running += c.load(Ordering::Relaxed);
                (*b, running)
            })
            .collect();
        (
            buckets,
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            self.count.load(Ordering::Relaxed),
        )
    }
}

/// Counters of one controller on this replica.
#[derive(Debug)]
pub struct ControllerMetrics {
    /// Leases acquired.
    pub acquisitions: AtomicU64,
    /// Leases lost, by reason (`renew_refused`, `renew_deadline`,
    /// `identity_changed`, `holder_taken`, `claim_lost` (this host's
    /// liveness session ended), `fenced`).
    pub losses: Mutex<BTreeMap<&'static str, u64>>,
    /// Guest instances hard-aborted or torn down, by reason (`lease_lost`,
    /// `trap`, `deadline`, `memory`, `shutdown`).
    pub aborts: Mutex<BTreeMap<&'static str, u64>>,
    /// Reconcile durations.
    pub reconcile_seconds: Histogram,
    /// Renew round-trip latency.
    pub renew_seconds: Histogram,
    /// From a loss detected to the guest's Store dropped (its task ended).
    pub abort_seconds: Histogram,
    /// Commit outcomes of every tenure on this replica.
    pub commits: Arc<CommitCounters>,
    /// The running guest's work queue: keys ready and how long the oldest
    /// has waited.
    pub queue: QueueGauges,
    /// Outbound HTTP requests of every tenure on this replica.
    pub outbound: OutboundMetrics,
    /// Whether its reconciles keep failing.
    pub health: ReconcileHealth,
}

/// Placement moves this process's grants recorded, by reason
/// (`leasehold_placement_moves_total`): each lease move is counted once, by
/// the host that took the lease, under the reason its grant recorded as the
/// lease's last move (an `over_share` move by the host it was handed over
/// to).
#[derive(Debug, Default)]
pub struct PlacementMoves([AtomicU64; 3]);

impl PlacementMoves {
    /// Count a move a grant of this process recorded.
    pub fn count(&self, reason: MoveReason) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The moves counted so far, by reason.
    pub fn counts(&self) -> [(MoveReason, u64); 3] {
        MoveReason::ALL.map(|reason| (reason, self.0[reason as usize].load(Ordering::Relaxed)))
    }
}

/// A controller's outbound request tallies as `/metrics` shows them.
///
/// The runtime counts into the [`OutboundCounters`] of the compiled
/// controller. A reload that recompiles the controller (its component
/// changed) brings new counters; what the old ones counted is carried over
/// here, so the exported counters never go back while the host runs.
#[derive(Debug, Default)]
pub struct OutboundMetrics {
    inner: Mutex<OutboundInner>,
}

#[derive(Debug, Default)]
struct OutboundInner {
    /// The counters the controller's guests count into now.
    current: Option<Arc<OutboundCounters>>,
    /// The totals of the counters it used before.
    carried: OutboundSnapshot,
}

/// Outbound request totals at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundSnapshot {
    /// Requests per outcome, in [`Outcome::ALL`] order.
    pub outcomes: Vec<(Outcome, u64)>,
    /// Cumulative counts per latency bucket bound in seconds, the last one
    /// `+Inf` ([`f64::INFINITY`]).
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the latencies, in seconds.
    pub sum: f64,
    /// How many latencies were observed.
    pub count: u64,
}

impl Default for OutboundSnapshot {
    fn default() -> Self {
        Self {
            outcomes: Outcome::ALL.iter().map(|o| (*o, 0)).collect(),
            buckets: OUTBOUND_BUCKETS
                .iter()
                .copied()
                .chain(std::iter::once(f64::INFINITY))
                .map(|bound| (bound, 0))
                .collect(),
            sum: 0.0,
            count: 0,
        }
    }
}

impl OutboundSnapshot {
    /// What `counters` hold now.
    pub fn of(counters: &OutboundCounters) -> Self {
        let (buckets, sum, count) = counters.histogram();
        Self {
            outcomes: Outcome::ALL
                .iter()
                .map(|o| (*o, counters.get(*o)))
                .collect(),
            buckets,
            sum,
            count,
        }
    }

    /// Add `other` (taken over the same buckets) to this.
    fn add(&mut self, other: &Self) {
        for ((_, total), (_, more)) in self.outcomes.iter_mut().zip(&other.outcomes) {
            *total += more;
        }
        for ((_, total), (_, more)) in self.buckets.iter_mut().zip(&other.buckets) {
            *total += more;
        }
        self.sum += other.sum;
        self.count += other.count;
    }

    /// Requests that ended with `outcome`.
    pub fn get(&self, outcome: Outcome) -> u64 {
        self.outcomes
            .iter()
            .find(|(o, _)| *o == outcome)
            .map_or(0, |(_, n)| *n)
    }
}

impl OutboundMetrics {
    fn inner(&self) -> std::sync::MutexGuard<'_, OutboundInner> {
        // Plain counters: a panic elsewhere cannot leave them half-written
        // in a way that matters more than losing the metric.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count from now on what `counters` count (the compiled controller's;
    /// attaching the same counters again changes nothing). The totals of
    /// the counters attached before are kept.
    pub fn attach(&self, counters: Arc<OutboundCounters>) {
        let mut inner = self.inner();
        if let Some(previous) = &inner.current {
            if Arc::ptr_eq(previous, &counters) {
                return;
            }
            let previous = OutboundSnapshot::of(previous);
            inner.carried.add(&previous);
        }
        inner.current = Some(counters);
    }

    /// The counters attached now, if any.
    pub fn counters(&self) -> Option<Arc<OutboundCounters>> {
        self.inner().current.clone()
    }

    /// The totals: everything carried over plus the current counters.
    pub fn snapshot(&self) -> OutboundSnapshot {
        let inner = self.inner();
        let mut total = inner.carried.clone();
        if let Some(current) = &inner.current {
            total.add(&OutboundSnapshot::of(current));
        }
        total
    }
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            acquisitions: AtomicU64::new(0),
            losses: Mutex::new(BTreeMap::new()),
            aborts: Mutex::new(BTreeMap::new()),
            reconcile_seconds: Histogram::new(LATENCY_BUCKETS),
            renew_seconds: Histogram::new(LATENCY_BUCKETS),
            abort_seconds: Histogram::new(LATENCY_BUCKETS),
            commits: Arc::new(CommitCounters::default()),
            queue: QueueGauges::default(),
            outbound: OutboundMetrics::default(),
            health: ReconcileHealth::default(),
        }
    }
}

/// When a controller counts as degraded: its reconciles failed this many
/// times in a row, or none has succeeded for this long while they fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DegradedRule {
    /// Failed reconciles in a row (`degraded_after_failures`).
    pub failures: u64,
    /// Failing without a success for this long (`degraded_after`).
    pub failing_for: Duration,
}

impl Default for DegradedRule {
    fn default() -> Self {
        Self {
            failures: crate::limits::DEGRADED_AFTER_FAILURES,
            failing_for: crate::timeouts::DEGRADED_AFTER,
        }
    }
}

/// A degraded controller as `/readyz` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Degraded {
    /// Failed reconciles since the last success.
    pub failures_in_a_row: u64,
    /// Seconds since the first of them.
    pub failing_for_seconds: u64,
    /// The last failure, as the guest or host told it (escaped, bounded).
    pub last_error: String,
}

/// A controller's run of failed reconciles on this replica: reset by any
/// success, counted by the worker.
#[derive(Debug, Default)]
pub struct ReconcileHealth {
    rule: Mutex<DegradedRule>,
    run: Mutex<FailureRun>,
}

#[derive(Debug, Default)]
struct FailureRun {
    count: u64,
    since: Option<tokio::time::Instant>,
    last_error: String,
}

impl ReconcileHealth {
    /// Use `rule` from now on (the controller's config).
    pub fn set_rule(&self, rule: DegradedRule) {
        *self.rule.lock().unwrap_or_else(|p| p.into_inner()) = rule;
    }

    /// A reconcile succeeded (or asked to be requeued): the run ends.
    pub fn succeeded(&self) {
        let mut run = self.run.lock().unwrap_or_else(|p| p.into_inner());
        if run.count > 0 {
            *run = FailureRun::default();
        }
    }

    /// A reconcile failed with `error` (the guest's text: escaped and cut
    /// to [`crate::limits::DEGRADED_ERROR_BYTES`] here).
    pub fn failed(&self, error: &str, now: tokio::time::Instant) {
        let mut run = self.run.lock().unwrap_or_else(|p| p.into_inner());
        run.count += 1;
        run.since.get_or_insert(now);
        let escaped = crate::text::escape(error);
        let mut cut = crate::limits::DEGRADED_ERROR_BYTES.min(escaped.len());
        while !escaped.is_char_boundary(cut) {
            cut -= 1;
        }
        run.last_error = escaped[..cut].to_string();
    }

    /// Failed reconciles since the last success.
    pub fn failures_in_a_row(&self) -> u64 {
        self.run.lock().unwrap_or_else(|p| p.into_inner()).count
    }

    /// The run of failures at `now` if it makes the controller degraded.
    pub fn degraded(&self, now: tokio::time::Instant) -> Option<Degraded> {
        let rule = *self.rule.lock().unwrap_or_else(|p| p.into_inner());
        let run = self.run.lock().unwrap_or_else(|p| p.into_inner());
        let failing_for = run
            .since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        let degraded =
            run.count > 0 && (run.count >= rule.failures || failing_for >= rule.failing_for);
        degraded.then(|| Degraded {
            failures_in_a_row: run.count,
            failing_for_seconds: failing_for.as_secs(),
            last_error: run.last_error.clone(),
        })
    }
}

/// The work queue as `/metrics` shows it, published by the worker each time
/// it takes or adds work. The age is measured when scraped, so it keeps
/// growing while a long reconcile holds the worker.
#[derive(Debug, Default)]
pub struct QueueGauges {
    /// Keys ready to reconcile now (delayed requeues and retries not yet
    /// due are not counted).
    depth: AtomicU64,
    /// Since when the longest-waiting ready key has been ready.
    oldest: Mutex<Option<std::time::Instant>>,
}

impl QueueGauges {
    /// Publish the queue's state: `depth` ready keys, the oldest ready
    /// since `oldest`.
    pub fn publish(&self, depth: usize, oldest: Option<std::time::Instant>) {
        self.depth.store(depth as u64, Ordering::Relaxed);
        *self.oldest.lock().unwrap_or_else(|p| p.into_inner()) = oldest;
    }

    /// Keys ready now.
    pub fn depth(&self) -> u64 {
        self.depth.load(Ordering::Relaxed)
    }

    /// How long the oldest ready key has waited at `now`; zero when none
    /// is ready.
    pub fn oldest_age(&self, now: std::time::Instant) -> Duration {
        self.oldest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }
}

fn bump(map: &Mutex<BTreeMap<&'static str, u64>>, key: &'static str) {
    *map.lock().expect("metrics lock").entry(key).or_default() += 1;
}

impl ControllerMetrics {
    /// Count a lost lease.
    pub fn lost(&self, reason: &'static str) {
        bump(&self.losses, reason);
    }

    /// Count a torn-down guest.
    pub fn aborted(&self, reason: &'static str) {
        bump(&self.aborts, reason);
    }
}

/// One controller's status.
#[derive(Debug)]
pub struct ControllerStatus {
    /// The controller (and lease) name.
    pub name: String,
    /// Current state; subscribers are woken on every change.
    pub state: tokio::sync::watch::Sender<ControllerState>,
    /// Counters.
    pub metrics: ControllerMetrics,
    /// The host's count of placement moves, which this controller's
    /// grants add to (shared by every controller of a [`Status`]).
    pub placement_moves: Arc<PlacementMoves>,
}

impl ControllerStatus {
    /// A controller not yet tried: `Starting`, every counter zero, its
    /// placement moves counted on their own.
    pub fn new(name: &str) -> Self {
        Self::counting_moves_in(name, Arc::default())
    }

    /// As [`ControllerStatus::new`], its placement moves counted in
    /// `moves`.
    fn counting_moves_in(name: &str, moves: Arc<PlacementMoves>) -> Self {
        Self {
            name: name.to_string(),
            state: tokio::sync::watch::Sender::new(ControllerState::Starting),
            metrics: ControllerMetrics::default(),
            placement_moves: moves,
        }
    }

    /// Set the state.
    pub fn set(&self, state: ControllerState) {
        self.state.send_if_modified(|current| {
            if *current != state {
                *current = state;
                true
            } else {
                false
            }
        });
    }

    /// Read the state.
    pub fn get(&self) -> ControllerState {
        self.state.borrow().clone()
    }

    /// Watch the state change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<ControllerState> {
        self.state.subscribe()
    }

    /// Whether this replica leads the controller now.
    pub fn leading(&self) -> bool {
        matches!(*self.state.borrow(), ControllerState::Leading { .. })
    }
}

/// Which backend a host runs on, as readiness reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// PostgreSQL.
    Postgres,
    /// The embedded backend: SQLite in the data directory.
    Embedded,
    /// The in-memory backend.
    Memory,
}

/// The database check as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DatabaseState {
    /// Not checked yet.
    Unknown,
    /// The in-memory backend (`url = "memory:"`): single process, not
    /// durable.
    Memory,
    /// The embedded backend (SQLite in `data_dir`): durable, shared by the
    /// hosts of this machine; its identity read.
    Embedded {
        /// The database uuid.
        database_id: String,
        /// Where: the database file.
        endpoint: String,
    },
    /// Reachable and identity verified.
    Verified {
        /// The database uuid.
        database_id: String,
        /// The server's system identifier.
        system_identifier: String,
        /// The endpoint, password redacted.
        endpoint: String,
    },
    /// Unreachable or wrong identity.
    Failing {
        /// What failed.
        reason: String,
    },
}

/// Everything this replica reports.
#[derive(Debug)]
pub struct Status {
    /// The cluster.
    pub cluster: String,
    /// This replica's holder identity.
    pub holder: String,
    /// The database check.
    pub database: Mutex<DatabaseState>,
    /// This host's claim on its holder name; `None` when the backend needs
    /// none (one process).
    holder_claim: Mutex<Option<ClaimState>>,
    /// Controllers by name; a config reload adds and removes them.
    controllers: RwLock<BTreeMap<String, Arc<ControllerStatus>>>,
    /// The names of `controllers`, in name order, for whoever registers
    /// them (the holder claim's host row).
    names: tokio::sync::watch::Sender<Vec<String>>,
    /// The leases of `controllers` that are shards of a sharded
    /// controller: the controller's name and the shard, by lease.
    shards: RwLock<BTreeMap<String, (String, crate::shard::Shard)>>,
    /// Placement moves of every controller's grants.
    placement_moves: Arc<PlacementMoves>,
}

impl Status {
    /// A status for `controllers`, all `Starting`.
    pub fn new(cluster: String, holder: String, controllers: &[String]) -> Self {
        let placement_moves = Arc::<PlacementMoves>::default();
        let controllers: BTreeMap<String, Arc<ControllerStatus>> = controllers
            .iter()
            .map(|name| {
                let status = ControllerStatus::counting_moves_in(name, placement_moves.clone());
                (name.clone(), Arc::new(status))
            })
            .collect();
        let names = tokio::sync::watch::Sender::new(controllers.keys().cloned().collect());
        Self {
            cluster,
            holder,
            database: Mutex::new(DatabaseState::Unknown),
            holder_claim: Mutex::new(None),
            controllers: RwLock::new(controllers),
            names,
            shards: RwLock::default(),
            placement_moves,
        }
    }

    /// The placement moves this process's grants recorded, by reason.
    pub fn placement_moves(&self) -> [(MoveReason, u64); 3] {
        self.placement_moves.counts()
    }

    /// Record that this replica runs `lease` as `shard` of the sharded
    /// controller `controller` (`GET /v1/leases` shows it).
    pub fn set_shard(&self, lease: &str, controller: &str, shard: crate::shard::Shard) {
        self.shards
            .write()
            .expect("status lock")
            .insert(lease.to_string(), (controller.to_string(), shard));
    }

    /// The sharded controller and the shard `lease` runs as here, if this
    /// replica runs it as a shard.
    pub fn shard_of(&self, lease: &str) -> Option<(String, crate::shard::Shard)> {
        self.shards.read().expect("status lock").get(lease).cloned()
    }

    /// The names of the controllers this replica runs, in name order;
    /// subscribers are woken when a reload changes them.
    pub fn controller_names(&self) -> tokio::sync::watch::Receiver<Vec<String>> {
        self.names.subscribe()
    }

    /// Publish the controller names after `controllers` changed.
    fn publish_names(&self, controllers: &BTreeMap<String, Arc<ControllerStatus>>) {
        let names: Vec<String> = controllers.keys().cloned().collect();
        self.names.send_if_modified(|current| {
            if *current == names {
                false
            } else {
                *current = names;
                true
            }
        });
    }

    /// Every controller this replica runs, in name order.
    pub fn controllers(&self) -> Vec<Arc<ControllerStatus>> {
        self.controllers
            .read()
            .expect("status lock")
            .values()
            .cloned()
            .collect()
    }

    /// One controller, if this replica runs it.
    pub fn controller(&self, name: &str) -> Option<Arc<ControllerStatus>> {
        self.controllers
            .read()
            .expect("status lock")
            .get(name)
            .cloned()
    }

    /// The status of `name`: the one already reported, or a new one in
    /// state `Starting`.
    pub fn add_controller(&self, name: &str) -> Arc<ControllerStatus> {
        let mut controllers = self.controllers.write().expect("status lock");
        let status = controllers
            .entry(name.to_string())
            .or_insert_with(|| {
                let moves = self.placement_moves.clone();
                Arc::new(ControllerStatus::counting_moves_in(name, moves))
            })
            .clone();
        self.publish_names(&controllers);
        status
    }

    /// Stop reporting `name` (it no longer runs here).
    pub fn remove_controller(&self, name: &str) {
        let mut controllers = self.controllers.write().expect("status lock");
        controllers.remove(name);
        self.shards.write().expect("status lock").remove(name);
        self.publish_names(&controllers);
    }

    /// Set the database state.
    pub fn set_database(&self, state: DatabaseState) {
        *self.database.lock().expect("status lock") = state;
    }

    /// Read the database state.
    pub fn database(&self) -> DatabaseState {
        self.database.lock().expect("status lock").clone()
    }

    /// Set the holder claim's state (`None`: no claim needed).
    pub fn set_holder_claim(&self, state: Option<ClaimState>) {
        *self.holder_claim.lock().expect("status lock") = state;
    }

    /// Read the holder claim's state (`None`: no claim needed).
    pub fn holder_claim(&self) -> Option<ClaimState> {
        self.holder_claim.lock().expect("status lock").clone()
    }

    /// Whether this replica leads `lease` now, at `epoch`: its supervisor
    /// says so. The only source of `held_here`: a holder name shared with
    /// another host must not make that host's leases look held here.
    pub fn leads_at(&self, lease: &str, epoch: u64) -> bool {
        self.controller(lease).is_some_and(|controller| {
            matches!(controller.get(), ControllerState::Leading { epoch: e, .. } if e == epoch)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_names_follow_added_and_removed_controllers() {
        let status = Status::new("east".into(), "a".into(), &["b".into(), "a".into()]);
        let mut names = status.controller_names();
        assert_eq!(*names.borrow_and_update(), ["a", "b"]);
        status.add_controller("c");
        assert!(names.has_changed().unwrap());
        assert_eq!(*names.borrow_and_update(), ["a", "b", "c"]);
        // Adding one already there changes nothing.
        status.add_controller("a");
        assert!(!names.has_changed().unwrap());
        status.remove_controller("b");
        assert_eq!(*names.borrow_and_update(), ["a", "c"]);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[0.001, 0.01, 0.1]);
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_secs(1));
        let (buckets, sum, count) = h.snapshot();
        assert_eq!(buckets, vec![(0.001, 1), (0.01, 2), (0.1, 3)]);
        assert_eq!(count, 4);
        assert!((sum - 1.0555).abs() < 1e-9);
    }

    #[test]
    fn outbound_totals_survive_new_counters_and_ignore_a_repeated_attach() {
        let metrics = OutboundMetrics::default();
        let empty = metrics.snapshot();
        assert_eq!(empty, OutboundSnapshot::default());
        assert_eq!(empty.outcomes.len(), Outcome::ALL.len());
        assert_eq!(empty.buckets.last(), Some(&(f64::INFINITY, 0)));

        let first = Arc::new(OutboundCounters::default());
        first.count(Outcome::Sent);
        first.count(Outcome::Denied);
        first.observe(Duration::from_millis(2));
        metrics.attach(first.clone());
        // The same counters again (a reload that kept the compiled
        // controller) must not count them twice.
        metrics.attach(first.clone());
        assert_eq!(metrics.snapshot().get(Outcome::Sent), 1);
        assert!(Arc::ptr_eq(&metrics.counters().unwrap(), &first));

        // A recompiled controller: new counters, the old totals kept.
        let second = Arc::new(OutboundCounters::default());
        second.count(Outcome::Sent);
        second.count(Outcome::TimedOut);
        second.observe(Duration::from_secs(30));
        metrics.attach(second.clone());
        // Counted after the switch, the old counters no longer show.
        first.count(Outcome::Sent);
        let total = metrics.snapshot();
        assert_eq!(total.get(Outcome::Sent), 2);
        assert_eq!(total.get(Outcome::Denied), 1);
        assert_eq!(total.get(Outcome::TimedOut), 1);
        assert_eq!(total.get(Outcome::Error), 0);
        assert_eq!(total.count, 2);
        assert!((total.sum - 30.002).abs() < 1e-6, "{}", total.sum);
        let at = |bound: f64| total.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(0.0025), 1);
        assert_eq!(at(10.0), 1);
        assert_eq!(at(f64::INFINITY), 2);
    }
}

#[cfg(test)]
mod degraded_tests {
    use super::*;

    fn rule(failures: u64, secs: u64) -> DegradedRule {
        DegradedRule {
            failures,
            failing_for: Duration::from_secs(secs),
        }
    }

    #[test]
    fn failures_in_a_row_or_a_long_failing_run_make_a_controller_degraded() {
        let health = ReconcileHealth::default();
        health.set_rule(rule(3, 300));
        let start = tokio::time::Instant::now();
        health.failed("first", start);
        health.failed("second", start);
        assert_eq!(health.degraded(start), None, "two failures of three");
        health.failed("third\nline", start);
        let degraded = health.degraded(start).expect("three in a row");
        assert_eq!(degraded.failures_in_a_row, 3);
        assert_eq!(degraded.last_error, "third\\nline", "escaped");
        health.succeeded();
        assert_eq!(health.degraded(start), None, "a success clears it");
        assert_eq!(health.failures_in_a_row(), 0);

        // One failure that lasts: degraded once the run is old enough.
        health.failed("slow", start);
        assert_eq!(health.degraded(start + Duration::from_secs(299)), None);
        let late = health
            .degraded(start + Duration::from_secs(300))
            .expect("failing for the whole duration");
        assert_eq!(late.failing_for_seconds, 300);
    }

    #[test]
    fn the_last_error_is_cut_at_a_character_boundary() {
        let health = ReconcileHealth::default();
        health.set_rule(rule(1, 300));
        let long = "é".repeat(crate::limits::DEGRADED_ERROR_BYTES);
        health.failed(&long, tokio::time::Instant::now());
        let shown = health
            .degraded(tokio::time::Instant::now())
            .unwrap()
            .last_error;
        assert!(shown.len() <= crate::limits::DEGRADED_ERROR_BYTES);
        assert!(shown.chars().all(|c| c == 'é'));
    }
}
