//! One simulated run: the driver that plays the supervisor's part (a
//! tenure per grant, a work queue fed by the change stream, timers, the
//! periodic resync), the user (the world's actions) and the faults, step
//! by step, then lets the world settle and judges the properties.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::faults::{FaultKind, Injected, Opportunity, Plan};
use super::invariants::{Bindings, When};
use super::service::Service;
use super::world::{ActionOp, World, WorldError};
use super::world_state::{CLUSTER, Shared, SimStore, SimWorld};
use crate::authority::memory::MemoryAuthority;
use crate::authority::{AcquireRequest, Acquired, Authority};
use crate::fence::{Fence, LeaseKey};
use crate::limits::{
    DEFAULT_OBJECTS_PER_KIND, MAX_CREATE_BURST, MAX_CREATES_PER_SECOND, MAX_PAGE_SIZE,
    SIM_QUIET_RECONCILES, SIM_SHRINK_MAX_RUNS,
};
use crate::quota::QuotaLimits;
use crate::runtime::{
    CompiledController, Description, GuestEnvironment, GuestError, GuestInstance, GuestLimits,
    ReconcileReason, Reconciled, RelatedMap, RelatedWatch, Runtime,
};
use crate::store::memory::MemoryStore;
use crate::store::{ApiWrite, Metadata, ObjectKey, Relations, Store, Written};
use crate::timeouts::{
    BACKOFF_MAX, BACKOFF_MIN, MAX_LEASE_TTL, MAX_REQUEUE, SIM_RECONCILE_TIME, SIM_TAKEOVER_GAP,
};

/// The built-in property: the world stops changing once faults and
/// actions are over, and a resync then changes nothing.
pub const QUIESCENCE: &str = "quiescence";
/// The built-in property: no store commit and no service application is
/// accepted from a tenure the fence no longer admits.
pub const NO_STALE_EFFECT: &str = "no stale effect accepted";
/// The built-in property: the guest never traps, runs past its deadline
/// or out of memory; only the aborts the simulation caused end it.
pub const NO_TRAP: &str = "no trap";

/// A property a run broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The property: a built-in one or an invariant's name.
    pub property: String,
    /// The step it was found at.
    pub step: u64,
    /// What was wrong.
    pub message: String,
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Its seed: `--seed` with `--runs 1` repeats it.
    pub seed: u64,
    /// Its `--steps`.
    pub steps: u64,
    /// The SHA-256 of its trace, in hex.
    pub digest: String,
    /// Its trace.
    pub lines: Vec<String>,
    /// The faults injected, in order.
    pub faults: Vec<Injected>,
    /// Reconciles run.
    pub reconciles: u64,
    /// Tenures (grants) the controller ran under.
    pub tenures: u64,
    /// The property it broke, if any.
    pub failure: Option<Failure>,
}

impl RunReport {
    /// Whether every property held.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// A world's controller compiled once, run as many times as asked.
pub struct Simulator {
    world: World,
    compiled: CompiledController,
    lease: String,
}

impl Simulator {
    /// Compile the world's component in `runtime`. A component that does
    /// not load is the world file's problem (`controller.component`).
    pub fn new(runtime: &Runtime, world: World) -> Result<Self, WorldError> {
        let lease = lease_name(&world.component);
        let limits = GuestLimits {
            http_allow: Arc::new(world.http_allow.clone()),
            settings: world.settings.clone(),
            // The create rate is judged on the machine's clock: at its
            // largest it never refuses within a run, so a run does not
            // depend on how fast the machine is.
            quota: QuotaLimits {
                creates_per_second: MAX_CREATES_PER_SECOND,
                create_burst: MAX_CREATE_BURST,
                objects_per_kind: DEFAULT_OBJECTS_PER_KIND,
            },
            ..GuestLimits::default()
        };
        let compiled = runtime
            .load(&lease, &world.component, limits, Vec::new())
            .map_err(|e| WorldError::at("controller.component", e.problem))?;
        Ok(Self {
            world,
            compiled,
            lease,
        })
    }

    /// The world.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// One run of `steps` steps with faults drawn from `seed`.
    pub async fn run(&self, seed: u64, steps: u64) -> RunReport {
        self.execute(seed, steps, Plan::random(seed, self.world.weights.clone()))
            .await
    }

    /// One run of `steps` steps from `seed` with exactly `faults`.
    pub async fn replay(&self, seed: u64, steps: u64, faults: Vec<Injected>) -> RunReport {
        self.execute(seed, steps, Plan::scheduled(faults)).await
    }

    /// The failed run `failed` with as few of its faults as still break the
    /// same property: first none at all, then dropping one fault at a
    /// time while the run still fails, at most [`SIM_SHRINK_MAX_RUNS`]
    /// runs.
    pub async fn shrink(&self, failed: &RunReport) -> RunReport {
        let Some(target) = failed.failure.as_ref().map(|f| f.property.clone()) else {
            return failed.clone();
        };
        let same = |report: &RunReport| {
            report
                .failure
                .as_ref()
                .is_some_and(|f| f.property == target)
        };
        let mut best = failed.clone();
        let mut runs = 0;
        let none = self.replay(failed.seed, failed.steps, Vec::new()).await;
        runs += 1;
        if same(&none) {
            return none;
        }
        loop {
            let mut progress = false;
            let mut i = 0;
            while i < best.faults.len() && runs < SIM_SHRINK_MAX_RUNS {
                let mut fewer = best.faults.clone();
                fewer.remove(i);
                let report = self.replay(failed.seed, failed.steps, fewer).await;
                runs += 1;
                if same(&report) && report.faults.len() < best.faults.len() {
                    best = report;
                    progress = true;
                } else {
                    i += 1;
                }
            }
            if !progress || runs >= SIM_SHRINK_MAX_RUNS {
                return best;
            }
        }
    }

    async fn execute(&self, seed: u64, steps: u64, plan: Plan) -> RunReport {
        let authority = Arc::new(MemoryAuthority::new());
        let services = self
            .world
            .services
            .iter()
            .map(|s| Service::new(&s.name, &s.url).expect("checked when the world was read"))
            .collect();
        let lease = LeaseKey::new(CLUSTER, &self.lease);
        let shared = Shared::new(authority.clone(), lease.clone(), plan, services, seed);
        let clock = shared.clone();
        let store = Arc::new(
            MemoryStore::new(authority.clone()).with_clock(Arc::new(move || clock.wall())),
        );
        let backend = Arc::new(SimStore::new(store.clone(), shared.clone()));
        // Fresh quota state for every run: a run never sees another's.
        let compiled = self
            .compiled
            .with_limits(self.compiled.limits().clone())
            .with_environment(GuestEnvironment::Simulated(Arc::new(SimWorld::new(
                shared.clone(),
            ))));
        let mut run = Run {
            world: &self.world,
            shared: shared.clone(),
            authority,
            store,
            backend,
            compiled,
            lease,
            guest: None,
            tenures: 0,
            queue: Queue::default(),
            cursor: 0,
            kinds: self.world.kinds(),
            step: 0,
            reconciles: 0,
            failure: None,
            attempts: BTreeMap::new(),
            last_reconciled: None,
            next_resync: None,
            grant: None,
            merged: false,
            judged: None,
        };
        run.go(steps).await;
        let failure = run.failure.take();
        let (reconciles, tenures) = (run.reconciles, run.tenures);
        drop(run);
        let mut state = shared.lock();
        if let Some(failure) = &failure {
            state.trace.line(format!(
                "FAILED {:?} at step {}: {}",
                failure.property, failure.step, failure.message
            ));
        }
        RunReport {
            seed,
            steps,
            digest: state.trace.digest(),
            lines: state.trace.lines().to_vec(),
            faults: state.plan.injected().to_vec(),
            reconciles,
            tenures,
            failure,
        }
    }
}

/// The lease a world's controller runs under: its component's file name,
/// as a DNS label.
fn lease_name(component: &std::path::Path) -> String {
    let stem = component
        .file_stem()
        .map(|s| s.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .trim_matches('-')
        .chars()
        .take(crate::names::MAX_LABEL_LEN)
        .collect();
    let name = name.trim_end_matches('-').to_string();
    if crate::names::check_label("lease", &name).is_ok() {
        name
    } else {
        "controller".into()
    }
}

/// The running tenure's guest.
struct Guest {
    fence: Fence,
    instance: GuestInstance,
    description: Description,
}

/// The work queue, as the worker keeps it: one entry per key, its causes
/// merged to the strongest reason; timers per key (the earlier wins),
/// consumed when the key runs for any reason.
#[derive(Default)]
struct Queue {
    ready: VecDeque<ObjectKey>,
    reasons: BTreeMap<ObjectKey, ReconcileReason>,
    timers: BTreeMap<ObjectKey, (Duration, ReconcileReason)>,
}

impl Queue {
    fn add(&mut self, key: ObjectKey, reason: ReconcileReason) {
        match self.reasons.get_mut(&key) {
            Some(queued) => *queued = queued.strongest(reason),
            None => {
                self.reasons.insert(key.clone(), reason);
                self.ready.push_back(key);
            }
        }
    }

    fn add_at(&mut self, key: ObjectKey, at: Duration, reason: ReconcileReason) {
        match self.timers.get_mut(&key) {
            Some(timer) if timer.0 <= at => {}
            _ => {
                self.timers.insert(key, (at, reason));
            }
        }
    }

    /// Timers due by `now` join the ready keys, earliest first.
    fn promote(&mut self, now: Duration) {
        let mut due: Vec<(Duration, ObjectKey, ReconcileReason)> = self
            .timers
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(key, (at, reason))| (*at, key.clone(), *reason))
            .collect();
        due.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (_, key, reason) in due {
            self.timers.remove(&key);
            self.add(key, reason);
        }
    }

    fn pop(&mut self) -> Option<(ObjectKey, ReconcileReason)> {
        let key = self.ready.pop_front()?;
        let reason = self.reasons.remove(&key)?;
        self.timers.remove(&key);
        Some((key, reason))
    }

    fn next_timer(&self) -> Option<Duration> {
        self.timers.values().map(|(at, _)| *at).min()
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

struct Run<'a> {
    world: &'a World,
    shared: Arc<Shared>,
    authority: Arc<MemoryAuthority>,
    store: Arc<MemoryStore>,
    backend: Arc<SimStore>,
    compiled: CompiledController,
    lease: LeaseKey,
    guest: Option<Guest>,
    tenures: u64,
    queue: Queue,
    cursor: u64,
    /// Every kind the run has seen (the world's, and the change stream's).
    kinds: BTreeSet<String>,
    step: u64,
    reconciles: u64,
    failure: Option<Failure>,
    /// Failed reconciles in a row, per key, for the backoff.
    attempts: BTreeMap<ObjectKey, u32>,
    last_reconciled: Option<ObjectKey>,
    next_resync: Option<Duration>,
    /// The current grant, while the lease is held.
    grant: Option<Fence>,
    /// The next feed read is skipped (`merged_wakeup`).
    merged: bool,
    /// The world (store position, changes counted) the `always`
    /// invariants last held in: unchanged since, they hold still.
    judged: Option<(u64, u64)>,
}

impl Run<'_> {
    fn trace(&self, line: String) {
        self.shared.lock().trace.line(line);
    }

    fn fail(&mut self, property: &str, message: String) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                property: property.to_string(),
                step: self.step,
                message,
            });
        }
    }

    async fn go(&mut self, steps: u64) {
        if let Err(why) = self.seed().await {
            self.fail("the world's objects", why);
            return;
        }
        for step in 1..=steps {
            self.begin(step);
            self.act(step).await;
            if self.guest.is_some() {
                self.between().await;
            }
            if self.failure.is_none() && self.guest.is_none() {
                self.start_tenure().await;
            }
            let merged = self.take_merged();
            if !merged {
                self.read_feed().await;
            }
            if let Some((key, reason)) = self.pick(true).await {
                self.reconcile(key, reason).await;
            }
            self.after_step().await;
            if self.failure.is_some() {
                return;
            }
        }
        self.settle(steps).await;
    }

    fn begin(&mut self, step: u64) {
        self.step = step;
        self.trace(format!("step {step}"));
        self.shared.begin_step(step);
    }

    async fn after_step(&mut self) {
        self.shared.advance(SIM_RECONCILE_TIME);
        let breach = self.shared.lock().breaches.first().cloned();
        if let Some(breach) = breach {
            self.fail(NO_STALE_EFFECT, breach);
            return;
        }
        self.judge(When::Always).await;
    }

    /// The world's objects, written as a user would before the controller
    /// starts; the change stream is then read past them (the first
    /// tenure's resync covers them).
    async fn seed(&mut self) -> Result<(), String> {
        for object in &self.world.objects {
            let key = key(&object.kind, &object.name);
            let write = ApiWrite::Put {
                key: key.clone(),
                value: object.value.to_string(),
                meta: Some(Metadata {
                    labels: object.labels.clone(),
                    ..Metadata::default()
                }),
                expected_version: None,
            };
            self.store
                .write(CLUSTER, &write)
                .await
                .map_err(|e| format!("{key} cannot be written: {e}"))?;
            self.trace(format!(
                "seed {key}: {}",
                super::trace::clip(&object.value.to_string())
            ));
        }
        loop {
            let page = self
                .store
                .changes(CLUSTER, &[], self.cursor, MAX_PAGE_SIZE)
                .await
                .map_err(|e| e.to_string())?;
            self.cursor = page.through;
            if page.changes.len() < MAX_PAGE_SIZE {
                return Ok(());
            }
        }
    }

    /// The users' writes due at `step`.
    async fn act(&mut self, step: u64) {
        let due: Vec<_> = self
            .world
            .actions
            .iter()
            .filter(|a| a.at == step)
            .cloned()
            .collect();
        for action in due {
            let key = key(&action.kind, &action.name);
            let (what, result) = match &action.op {
                ActionOp::Put(value) => (
                    format!("put {key} {}", super::trace::clip(&value.to_string())),
                    self.store
                        .put(CLUSTER, &key, &value.to_string(), None)
                        .await
                        .map(|o| format!("v{}", o.version)),
                ),
                ActionOp::Delete => (
                    format!("delete {key}"),
                    self.store
                        .write(
                            CLUSTER,
                            &ApiWrite::Delete {
                                key: key.clone(),
                                expected_version: None,
                            },
                        )
                        .await
                        .map(|written| match written {
                            Written::Removed => "removed".to_string(),
                            Written::Marked(o) => {
                                format!("marked for deletion (finalizers {:?})", o.meta.finalizers)
                            }
                            Written::Created(o) | Written::Replaced(o) => format!("v{}", o.version),
                        }),
                ),
            };
            let answer = match result {
                Ok(answer) => answer,
                Err(e) => format!("refused: {e}"),
            };
            self.kinds.insert(action.kind.clone());
            self.trace(format!("  user: {what} → {}", short(&answer)));
        }
    }

    /// A fault between reconciles, if one strikes.
    async fn between(&mut self) {
        let fault = {
            let mut state = self.shared.lock();
            let fault = state.plan.decide(Opportunity::Between);
            if let Some(fault) = &fault {
                state.trace.line(format!("  ! fault {}", fault.describe()));
            }
            fault
        };
        let Some(fault) = fault else { return };
        match fault.kind {
            FaultKind::LeaseLost => {
                {
                    let mut state = self.shared.lock();
                    self.shared.lose_lease(&mut state, "between reconciles");
                }
                self.end_tenure();
            }
            FaultKind::FreshInstance => {
                self.guest = None;
                self.shared.set_tenure(None);
                self.queue.clear();
                self.start_guest(false).await;
            }
            FaultKind::ClockJump => self.shared.advance(Duration::from_millis(fault.amount)),
            FaultKind::DuplicateWakeup => {
                let key = match self.last_reconciled.clone() {
                    Some(key) => Some(key),
                    None => {
                        let watched = self.watched_objects().await;
                        (!watched.is_empty())
                            .then(|| watched[(fault.amount as usize) % watched.len()].clone())
                    }
                };
                if let Some(key) = key {
                    self.trace(format!("  {key} is woken again"));
                    self.queue.add(key, ReconcileReason::Change);
                }
            }
            // Taken by `take_merged` before this step's feed read.
            FaultKind::MergedWakeup => self.merged = true,
            _ => {}
        }
    }

    fn take_merged(&mut self) -> bool {
        std::mem::take(&mut self.merged)
    }

    /// The tenure is over (its guest aborted or fenced): its guest, queue
    /// and timers go with it, and its successor is granted once the old
    /// lease ran out.
    fn end_tenure(&mut self) {
        self.guest = None;
        self.grant = None;
        self.shared.set_tenure(None);
        self.queue.clear();
        self.attempts.clear();
        self.next_resync = None;
        self.shared.advance(SIM_TAKEOVER_GAP);
    }

    /// The next grant of the lease, to the next replica, and its guest.
    async fn start_tenure(&mut self) {
        self.tenures += 1;
        let request = AcquireRequest {
            key: self.lease.clone(),
            holder: format!("replica-{}", self.tenures),
            ttl: MAX_LEASE_TTL,
        };
        let fence = match self.authority.acquire(&request).await {
            Ok(Acquired::Granted(grant)) => grant.fence,
            Ok(Acquired::Held { holder, epoch, .. }) => {
                self.fail(
                    NO_TRAP,
                    format!("the lease is still held by {holder} at epoch {epoch}"),
                );
                return;
            }
            Err(e) => {
                self.fail(NO_TRAP, format!("the lease cannot be granted: {e}"));
                return;
            }
        };
        self.trace(format!(
            "  tenure of epoch {} starts ({})",
            fence.epoch, fence.holder
        ));
        self.grant = Some(fence);
        self.start_guest(true).await;
    }

    /// A fresh guest instance for the current grant (G1), described and
    /// resynced.
    async fn start_guest(&mut self, new_tenure: bool) {
        let Some(fence) = self.grant.clone() else {
            return;
        };
        let revocation = self.compiled.revocation();
        let instance = self
            .compiled
            .instantiate(
                fence.clone(),
                self.backend.clone(),
                Arc::default(),
                revocation.clone(),
            )
            .await;
        let mut instance = match instance {
            Ok(instance) => instance,
            Err(e) => return self.fail(NO_TRAP, e.to_string()),
        };
        self.shared
            .set_tenure(Some((fence.clone(), revocation.clone())));
        let description = match instance.describe().await {
            Ok(description) => description,
            Err(e) => return self.fail(NO_TRAP, e.to_string()),
        };
        if !new_tenure {
            self.trace(format!(
                "  a fresh guest instance runs at epoch {}",
                fence.epoch
            ));
        }
        self.next_resync = description
            .resync_period
            .map(|period| self.shared.now() + period);
        self.guest = Some(Guest {
            fence,
            instance,
            description,
        });
        self.resync().await;
    }

    /// Every object of the watched kinds, and every key the related kinds
    /// map to, queued as a resync.
    async fn resync(&mut self) {
        let Some(guest) = &self.guest else { return };
        let watches = guest.description.watches.clone();
        let related = guest.description.related.clone();
        for kind in &watches {
            for object in self.list(kind).await {
                self.queue.add(key(kind, &object), ReconcileReason::Resync);
            }
        }
        for watch in &related {
            for name in self.list(&watch.kind).await {
                let object = self.store.get(CLUSTER, &key(&watch.kind, &name)).await;
                if let Ok(Some(object)) = object {
                    for target in related_keys(watch, &Relations::of(&object.meta)) {
                        self.queue.add(target, ReconcileReason::Resync);
                    }
                }
            }
        }
    }

    async fn list(&self, kind: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let Ok(page) = self
                .store
                .list(CLUSTER, kind, after.as_deref(), MAX_PAGE_SIZE)
                .await
            else {
                return names;
            };
            names.extend(page.objects.into_iter().map(|o| o.name));
            match page.next {
                Some(next) => after = Some(next),
                None => return names,
            }
        }
    }

    async fn watched_objects(&self) -> Vec<ObjectKey> {
        let Some(guest) = &self.guest else {
            return Vec::new();
        };
        let mut keys = Vec::new();
        for kind in guest.description.watches.clone() {
            keys.extend(self.list(&kind).await.iter().map(|name| key(&kind, name)));
        }
        keys
    }

    /// What the change stream shows since the last read: the running
    /// guest is woken for its watched kinds and the keys its related kinds
    /// map to, and told of every change (its cache of its own writes).
    /// Without a guest the stream waits for the next tenure, as the
    /// lease's settled position makes it wait in production.
    async fn read_feed(&mut self) {
        let Some(guest) = &self.guest else { return };
        let watches = guest.description.watches.clone();
        let related = guest.description.related.clone();
        let own_writes = guest.instance.own_writes();
        loop {
            let Ok(page) = self
                .store
                .changes(CLUSTER, &[], self.cursor, MAX_PAGE_SIZE)
                .await
            else {
                return;
            };
            for change in &page.changes {
                self.kinds.insert(change.kind.clone());
                let changed = key(&change.kind, &change.name);
                own_writes.observe(&changed, change.revision);
                for watch in related.iter().filter(|w| w.kind == change.kind) {
                    let mut targets = related_keys(watch, &change.relations);
                    if let Some(previous) = &change.previous {
                        targets.extend(related_keys(watch, previous));
                    }
                    for target in targets {
                        self.queue.add(target, ReconcileReason::Related);
                    }
                }
                if watches.contains(&change.kind) {
                    self.queue.add(changed, ReconcileReason::Change);
                }
            }
            self.cursor = page.through;
            if page.changes.len() < MAX_PAGE_SIZE {
                return;
            }
        }
    }

    /// The next key to reconcile: a ready one, else the virtual clock
    /// moves to the next timer (or, with `resync`, the periodic resync)
    /// and that one. `None`: nothing to do.
    async fn pick(&mut self, resync: bool) -> Option<(ObjectKey, ReconcileReason)> {
        self.guest.as_ref()?;
        let now = self.shared.now();
        if resync && self.next_resync.is_some_and(|at| at <= now) {
            self.periodic_resync().await;
        }
        self.queue.promote(now);
        if let Some(next) = self.queue.pop() {
            return Some(next);
        }
        let timer = self.queue.next_timer();
        let periodic = if resync { self.next_resync } else { None };
        let resync_first = match (timer, periodic) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(at), Some(p)) => p < at,
        };
        if resync_first {
            if let Some(at) = periodic {
                self.shared.advance_to(at);
            }
            self.periodic_resync().await;
        } else if let Some(at) = timer {
            self.shared.advance_to(at);
            self.queue.promote(at);
        }
        self.queue.pop()
    }

    async fn periodic_resync(&mut self) {
        let period = self
            .guest
            .as_ref()
            .and_then(|g| g.description.resync_period);
        self.trace("  periodic resync".into());
        self.resync().await;
        self.next_resync = period.map(|p| self.shared.now() + p);
    }

    /// Reconcile `key` in the running guest; whether it changed anything
    /// (a commit landed, a service applied a request).
    async fn reconcile(&mut self, key: ObjectKey, reason: ReconcileReason) -> bool {
        let Some(guest) = self.guest.as_mut() else {
            return false;
        };
        self.reconciles += 1;
        self.last_reconciled = Some(key.clone());
        let before = {
            let mut state = self.shared.lock();
            state.trace.line(format!(
                "  reconcile {key} ({reason}) at epoch {}",
                guest.fence.epoch
            ));
            state.changed
        };
        let result = guest
            .instance
            .reconcile_because(&key.kind, &key.name, reason)
            .await;
        let (changed, caused) = {
            let state = self.shared.lock();
            (state.changed > before, state.caused_abort)
        };
        let now = self.shared.now();
        match result {
            Ok(Reconciled::Done) => {
                self.trace("    → done".into());
                self.attempts.remove(&key);
            }
            Ok(Reconciled::RequeueAfter(delay)) => {
                self.trace(format!("    → requeue after {delay:?}"));
                self.attempts.remove(&key);
                self.queue
                    .add_at(key, now + delay.min(MAX_REQUEUE), ReconcileReason::Requeue);
            }
            Ok(Reconciled::Failed {
                message,
                retry_after,
            }) => {
                let attempts = self.attempts.entry(key.clone()).or_insert(0);
                *attempts += 1;
                let delay = retry_after
                    .map(|d| d.min(MAX_REQUEUE))
                    .unwrap_or_else(|| backoff(*attempts));
                self.trace(format!(
                    "    → failed, retry in {delay:?}: {}",
                    super::trace::clip(&message)
                ));
                self.queue.add_at(key, now + delay, ReconcileReason::Retry);
            }
            Ok(Reconciled::Fenced) => {
                self.trace("    → fenced: the guest stops".into());
                if !caused {
                    let mut state = self.shared.lock();
                    self.shared
                        .lose_lease(&mut state, "as the guest reported it fenced");
                }
                self.end_tenure();
            }
            Err(GuestError::Aborted { .. }) if caused => {
                self.trace("    → aborted, as the lease was lost".into());
                self.end_tenure();
            }
            Err(e) => {
                self.trace(format!("    → {e}"));
                self.fail(NO_TRAP, e.to_string());
            }
        }
        changed
    }

    /// No more faults or actions: the controller gets at most `steps`
    /// reconciles to stop changing anything, then a resync must change
    /// nothing; then the invariants judged at the end.
    async fn settle(&mut self, steps: u64) {
        self.shared.deliver_all_late();
        self.shared.lock().plan.disable();
        self.trace("settle: no more faults or actions".into());
        let mut quiet = 0u64;
        let mut drained = false;
        let mut reconciles = 0u64;
        while reconciles < steps {
            self.begin(self.step + 1);
            if self.guest.is_none() {
                self.start_tenure().await;
            }
            self.read_feed().await;
            let Some((key, reason)) = self.pick(false).await else {
                drained = true;
                break;
            };
            reconciles += 1;
            if self.reconcile(key, reason).await {
                quiet = 0;
            } else {
                quiet += 1;
            }
            self.after_step().await;
            if self.failure.is_some() {
                return;
            }
        }
        if !drained && quiet < SIM_QUIET_RECONCILES.min(steps) {
            let last = self.shared.lock().last_change.clone();
            self.fail(
                QUIESCENCE,
                format!(
                    "after the last fault and action the controller still changed things \
                     within the last {SIM_QUIET_RECONCILES} of {steps} reconciles without \
                     faults (the last change: {last})"
                ),
            );
            return;
        }
        self.begin(self.step + 1);
        self.trace("resync check: a resync of the settled world must change nothing".into());
        if self.guest.is_none() {
            self.start_tenure().await;
        }
        self.read_feed().await;
        let mut changed = false;
        for key in self.watched_objects().await {
            changed |= self.reconcile(key, ReconcileReason::Resync).await;
            if self.failure.is_some() {
                return;
            }
        }
        if changed {
            let last = self.shared.lock().last_change.clone();
            self.fail(
                QUIESCENCE,
                format!("a resync of the settled world changed something: {last}"),
            );
            return;
        }
        self.after_step().await;
        self.judge(When::End).await;
    }

    /// Judge the invariants of `when` against the world as it is.
    async fn judge(&mut self, when: When) {
        if self.failure.is_some() || !self.world.invariants.iter().any(|i| i.when == when) {
            return;
        }
        // Invariants are functions of the objects and the services: when
        // neither moved since they last held, they hold.
        let world = (
            *self.store.watch(CLUSTER).borrow(),
            self.shared.lock().changed,
        );
        if when == When::Always && self.judged == Some(world) {
            return;
        }
        let bindings = self.bindings().await;
        for invariant in self.world.invariants.iter().filter(|i| i.when == when) {
            if let Err(why) = invariant.judge(&bindings) {
                let name = invariant.name.clone();
                self.fail(&name, why);
                return;
            }
        }
        if when == When::Always {
            self.judged = Some(world);
        }
    }

    /// `objects` and `services` now.
    async fn bindings(&self) -> Bindings {
        let mut objects = serde_json::Map::new();
        for kind in &self.kinds {
            let mut items = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let Ok(page) = self
                    .store
                    .list(CLUSTER, kind, after.as_deref(), MAX_PAGE_SIZE)
                    .await
                else {
                    break;
                };
                for o in &page.objects {
                    let parse = |text: &str| serde_json::from_str(text).unwrap_or(Value::Null);
                    items.push(json!({
                        "name": o.name,
                        "version": o.version,
                        "generation": o.generation,
                        "value": parse(&o.value),
                        "labels": o.meta.labels,
                        "status": o.status.as_deref().map_or(Value::Null, parse),
                        "finalizers": o.meta.finalizers,
                        "deleting": o.deleting_since.is_some(),
                    }));
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            objects.insert(kind.clone(), Value::Array(items));
        }
        let services: serde_json::Map<String, Value> = self
            .shared
            .lock()
            .services
            .iter()
            .map(|s| (s.name.clone(), s.view()))
            .collect();
        Bindings::new(&Value::Object(objects), &Value::Object(services))
    }
}

/// The delay before the `attempts`-th retry of a failed reconcile: the
/// host's default backoff, doubling, without its jitter (a run must
/// repeat exactly).
fn backoff(attempts: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempts.saturating_sub(1).min(31))
        .unwrap_or(u32::MAX);
    BACKOFF_MIN.saturating_mul(factor).min(BACKOFF_MAX)
}

/// The keys a change of a related kind maps to, by its relations.
fn related_keys(watch: &RelatedWatch, relations: &Relations) -> Vec<ObjectKey> {
    match &watch.map {
        RelatedMap::Owner { kind } => relations
            .owner
            .iter()
            .filter(|owner| kind.as_ref().is_none_or(|k| &owner.kind == k))
            .cloned()
            .collect(),
        RelatedMap::Label {
            key: label,
            target_kind,
        } => relations
            .labels
            .get(label)
            .filter(|value| crate::names::check_label("name", value).is_ok())
            .map(|value| key(target_kind, value))
            .into_iter()
            .collect(),
    }
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

fn short(text: &str) -> String {
    super::trace::clip(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound_without_jitter() {
        assert_eq!(backoff(1), BACKOFF_MIN);
        assert_eq!(backoff(2), BACKOFF_MIN * 2);
        assert_eq!(backoff(40), BACKOFF_MAX);
    }

    #[test]
    fn a_lease_is_named_after_its_component() {
        assert_eq!(
            lease_name(std::path::Path::new("/x/provisioner_bug.wasm")),
            "provisioner-bug"
        );
        assert_eq!(lease_name(std::path::Path::new("/x/__.wasm")), "controller");
    }

    #[test]
    fn the_queue_merges_causes_and_timers_are_consumed_by_a_run() {
        let mut queue = Queue::default();
        let a = key("k", "a");
        queue.add(a.clone(), ReconcileReason::Resync);
        queue.add(a.clone(), ReconcileReason::Change);
        queue.add_at(a.clone(), Duration::from_secs(5), ReconcileReason::Requeue);
        assert_eq!(queue.pop(), Some((a.clone(), ReconcileReason::Change)));
        assert_eq!(queue.next_timer(), None, "consumed by the run");
        queue.add_at(a.clone(), Duration::from_secs(5), ReconcileReason::Requeue);
        queue.add_at(a.clone(), Duration::from_secs(9), ReconcileReason::Retry);
        queue.promote(Duration::from_secs(4));
        assert_eq!(queue.pop(), None);
        queue.promote(Duration::from_secs(5));
        assert_eq!(queue.pop(), Some((a, ReconcileReason::Requeue)));
    }
}
