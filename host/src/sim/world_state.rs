//! The state one simulated run shares between its driver and the seams
//! the guest reaches: the store it calls ([`SimStore`], around the memory
//! store), and its clocks, randomness and network ([`SimWorld`], the
//! runtime's [`Simulation`]). Everything runs on one thread; the lock is
//! never held across an await.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::faults::{FaultKind, Injected, Opportunity, Plan, SplitMix};
use super::service::Service;
use super::trace::{Trace, clip};
use crate::authority::Authority;
use crate::authority::memory::MemoryAuthority;
use crate::fence::{Fence, LeaseKey};
use crate::runtime::{Revocation, SimulatedRequest, SimulatedResponse, SimulatedSend, Simulation};
use crate::store::memory::MemoryStore;
use crate::store::{
    ApiWrite, ChangePage, Committed, Event, NewEvent, Object, ObjectKey, Op, Page, Selector, Store,
    StoreError, Written,
};

/// Where the virtual wall clock starts: 2026-01-01T00:00:00Z, the SDKs'
/// fake hosts' start, so a run's times read the same in every run.
pub const SIM_EPOCH_UNIX_SECS: u64 = 1_767_225_600;

/// The cluster every simulated world lives in.
pub const CLUSTER: &str = "sim";

/// A request cut off by a lease loss that arrives at its service later.
struct Late {
    due: u64,
    service: usize,
    path: String,
    request: SimulatedRequest,
}

/// What the run's seams share with its driver.
pub struct Shared {
    /// Virtual nanoseconds since [`SIM_EPOCH_UNIX_SECS`].
    clock: AtomicU64,
    state: Mutex<State>,
    authority: Arc<MemoryAuthority>,
}

/// The mutable part, behind one lock.
pub struct State {
    /// The faults of the run.
    pub plan: Plan,
    /// Its trace.
    pub trace: Trace,
    /// Its services.
    pub services: Vec<Service>,
    late: Vec<Late>,
    step: u64,
    lease: LeaseKey,
    /// The running tenure's fence and revocation, if a guest runs.
    tenure: Option<(Fence, Revocation)>,
    /// Whether the simulation revoked the current guest (its abort is
    /// expected, not a trap).
    pub caused_abort: bool,
    /// Commits that landed and effects that services applied, so far.
    pub changed: u64,
    /// What the last change was, for a quiescence report.
    pub last_change: String,
    /// Breaches of the fence seen in the store or at a service.
    pub breaches: Vec<String>,
    seeds: SplitMix,
}

impl Shared {
    /// The shared state of a run of `lease` with `plan`, `services`, and
    /// guest seeds drawn from `seed`.
    pub fn new(
        authority: Arc<MemoryAuthority>,
        lease: LeaseKey,
        plan: Plan,
        services: Vec<Service>,
        seed: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            clock: AtomicU64::new(0),
            authority,
            state: Mutex::new(State {
                plan,
                trace: Trace::default(),
                services,
                late: Vec::new(),
                step: 0,
                lease,
                tenure: None,
                caused_abort: false,
                changed: 0,
                last_change: String::new(),
                breaches: Vec::new(),
                seeds: SplitMix::new(seed ^ 0x6775_6573_7473_6565),
            }),
        })
    }

    /// The state; one thread, so never contended.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Virtual time since the run began.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.clock.load(Ordering::SeqCst))
    }

    /// Move the virtual clock ahead.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.clock
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(nanos))
            })
            .ok();
    }

    /// Move the virtual clock to `at`, if that is ahead.
    pub fn advance_to(&self, at: Duration) {
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        self.clock.fetch_max(nanos, Ordering::SeqCst);
    }

    /// The virtual wall clock.
    pub fn wall(&self) -> chrono::DateTime<chrono::Utc> {
        let since = chrono::TimeDelta::from_std(self.now()).unwrap_or(chrono::TimeDelta::MAX);
        chrono::DateTime::from_timestamp(SIM_EPOCH_UNIX_SECS as i64, 0)
            .and_then(|start| start.checked_add_signed(since))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
    }

    /// A new step begins: late requests due now arrive first.
    pub fn begin_step(&self, step: u64) {
        let mut state = self.lock();
        state.step = step;
        state.plan.begin_step(step);
        state.deliver_late(|late| late.due <= step);
    }

    /// Every late request arrives now (the world settles).
    pub fn deliver_all_late(&self) {
        self.lock().deliver_late(|_| true);
    }

    /// The tenure whose guest now runs (`None`: none runs).
    pub fn set_tenure(&self, tenure: Option<(Fence, Revocation)>) {
        let mut state = self.lock();
        state.tenure = tenure;
        state.caused_abort = false;
    }

    /// The lease is lost: it expires now, and the running guest (if any)
    /// is revoked and so aborted, as the supervisor does on a loss.
    pub fn lose_lease(&self, state: &mut State, why: &str) {
        let epoch = self.authority.faults().expire(&state.lease);
        if let Some((_, revocation)) = state.tenure.take() {
            revocation.revoke();
            state.caused_abort = true;
        }
        state.trace.line(format!(
            "    lease lost {why}: epoch {} expired; the guest is aborted",
            epoch.map_or(0, |e| e.0)
        ));
    }

    /// The breach of the fence a landed commit of `fence` would be: it must
    /// be the lease's current, live grant.
    async fn check_commit(&self, fence: &Fence) -> Option<String> {
        let records = self.authority.observe(&fence.key.cluster).await.ok()?;
        let current = records.iter().find(|r| r.name == fence.key.name);
        match current {
            Some(r) if r.epoch == fence.epoch && r.holder == fence.holder && r.active => None,
            Some(r) => Some(format!(
                "a commit of epoch {} landed while the lease's grant was epoch {} of {} (live: {})",
                fence.epoch, r.epoch, r.holder, r.active
            )),
            None => Some(format!(
                "a commit of epoch {} landed on a lease never granted",
                fence.epoch
            )),
        }
    }
}

impl State {
    fn fault_line(&mut self, fault: &Injected) {
        self.trace.line(format!("    ! fault {}", fault.describe()));
    }

    fn changed(&mut self, what: String) {
        self.changed += 1;
        self.last_change = what;
    }

    fn deliver_late(&mut self, due: impl Fn(&Late) -> bool) {
        let (now, later): (Vec<Late>, Vec<Late>) = std::mem::take(&mut self.late)
            .into_iter()
            .partition(|late| due(late));
        self.late = later;
        for late in now {
            let decision = self.services[late.service].handle(&late.request, &late.path);
            self.trace.line(format!(
                "  late request arrives: {} {} epoch {} → {} {}",
                late.request.method,
                late.request.url,
                late.request
                    .header(crate::outbound::headers::EPOCH)
                    .unwrap_or("-"),
                decision.response.status,
                decision.outcome
            ));
            if decision.applied {
                self.changed(format!(
                    "a late {} {} applied",
                    late.request.method, late.request.url
                ));
            }
            if let Some(breach) = decision.stale {
                self.breaches.push(breach);
            }
        }
    }
}

/// The store a simulated guest calls: the memory store, with the run's
/// faults at every read and commit, each call and answer traced.
pub struct SimStore {
    inner: Arc<MemoryStore>,
    shared: Arc<Shared>,
}

impl SimStore {
    /// Around `inner`.
    pub fn new(inner: Arc<MemoryStore>, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// A read's fault, if one strikes; the call traced.
    fn read(&self, call: String) -> Option<Injected> {
        let mut state = self.shared.lock();
        state.trace.line(call);
        let fault = state.plan.decide(Opportunity::Read)?;
        state.fault_line(&fault);
        if fault.kind == FaultKind::LeaseLost {
            self.shared.lose_lease(&mut state, "during the read");
        }
        Some(fault)
    }

    fn answered(&self, line: String) {
        self.shared.lock().trace.line(line);
    }

    /// Someone else rewrites (or creates) the commit's first object.
    async fn rival(&self, ops: &[Op]) {
        let Some(op) = ops.first() else { return };
        let key = op.key();
        let value = match op {
            Op::Create { value, .. } | Op::CreateWith { value, .. } => value.clone(),
            _ => match self.inner.get(CLUSTER, key).await {
                Ok(Some(object)) => object.value,
                _ => return,
            },
        };
        let line = match self.inner.put(CLUSTER, key, &value, None).await {
            Ok(object) => format!("    someone else wrote {key} (now v{})", object.version),
            Err(e) => format!("    someone else's write of {key} failed: {e}"),
        };
        self.answered(line);
    }
}

/// Never answers: the guest was revoked inside this call, and the host's
/// revocation, not an answer, ends it (the guest is dropped here, as a
/// guest blocked in a host call is in production).
async fn never<T>() -> T {
    std::future::pending().await
}

fn unavailable(why: &str) -> StoreError {
    StoreError::Unavailable(format!("simulated fault: {why}"))
}

#[async_trait]
impl Store for SimStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        if let Some(fault) = self.read(format!("    get {key}")) {
            match fault.kind {
                FaultKind::LeaseLost => return never().await,
                _ => return Err(unavailable("the store is unreachable")),
            }
        }
        let result = self.inner.get(cluster, key).await;
        self.answered(match &result {
            Ok(Some(o)) => format!("      → v{} gen {}", o.version, o.generation),
            Ok(None) => "      → absent".into(),
            Err(e) => format!("      → {e}"),
        });
        result
    }

    async fn list(
        &self,
        cluster: &str,
        kind: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.list_selected(cluster, kind, &Selector::default(), after, limit)
            .await
    }

    async fn list_selected(
        &self,
        cluster: &str,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let call = format!(
            "    list {kind}{}{}",
            if selector.is_empty() {
                String::new()
            } else {
                format!(
                    " labels {:?} contains {}",
                    selector.labels,
                    selector
                        .contains
                        .as_ref()
                        .map_or_else(|| "-".into(), |c| clip(&c.to_string()))
                )
            },
            after.map(|a| format!(" after {a}")).unwrap_or_default()
        );
        if let Some(fault) = self.read(call) {
            match fault.kind {
                FaultKind::LeaseLost => return never().await,
                _ => return Err(unavailable("the store is unreachable")),
            }
        }
        let result = self
            .inner
            .list_selected(cluster, kind, selector, after, limit)
            .await;
        self.answered(match &result {
            Ok(page) => format!(
                "      → [{}]",
                page.objects
                    .iter()
                    .map(|o| format!("{} v{}", o.name, o.version))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => format!("      → {e}"),
        });
        result
    }

    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        let fault = {
            let mut state = self.shared.lock();
            state.trace.line(format!(
                "    commit at epoch {}: {}{}",
                fence.epoch,
                ops.iter().map(describe_op).collect::<Vec<_>>().join("; "),
                events
                    .iter()
                    .map(|e| format!("; event {} {}: {}", e.key, e.reason, clip(&e.message)))
                    .collect::<String>()
            ));
            let fault = state.plan.decide(Opportunity::Commit);
            if let Some(fault) = &fault {
                state.fault_line(fault);
                if fault.kind == FaultKind::LeaseLost && fault.variant == 0 {
                    self.shared.lose_lease(&mut state, "before the commit");
                }
            }
            fault
        };
        match fault.as_ref().map(|f| (f.kind, f.variant)) {
            Some((FaultKind::StoreUnavailable, _)) => {
                self.answered("      → unavailable, nothing written".into());
                return Err(unavailable("the commit did not reach the store"));
            }
            Some((FaultKind::Conflict, _)) => self.rival(ops).await,
            _ => {}
        }
        let result = self.inner.commit_fenced(fence, ops, events).await;
        match &result {
            Ok(committed) => {
                let breach = self.shared.check_commit(fence).await;
                let mut state = self.shared.lock();
                state
                    .trace
                    .line(format!("      → landed at r{}", committed.revision));
                let keys: Vec<String> = ops.iter().map(|op| op.key().to_string()).collect();
                state.changed(format!(
                    "a commit at epoch {} wrote {}{}",
                    fence.epoch,
                    keys.join(", "),
                    if events.is_empty() {
                        ""
                    } else {
                        " with events"
                    }
                ));
                state.breaches.extend(breach);
            }
            Err(e) => self.answered(format!("      → {}", short_error(e))),
        }
        match fault.map(|f| (f.kind, f.variant)) {
            Some((FaultKind::CommitReplyLost, _)) if result.is_ok() => {
                self.answered("      → its reply is lost".into());
                Err(unavailable("the commit's reply was lost"))
            }
            Some((FaultKind::LeaseLost, 1)) => {
                {
                    let mut state = self.shared.lock();
                    self.shared
                        .lose_lease(&mut state, "after the commit landed, before its reply");
                }
                never().await
            }
            _ => result,
        }
    }

    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError> {
        self.inner.put(cluster, key, value, expected_version).await
    }

    async fn delete(
        &self,
        cluster: &str,
        key: &ObjectKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        self.inner.delete(cluster, key, expected_version).await
    }

    async fn write(&self, cluster: &str, write: &ApiWrite) -> Result<Written, StoreError> {
        self.inner.write(cluster, write).await
    }

    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.events(cluster, after, limit).await
    }

    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        self.inner.changes(cluster, kinds, after, limit).await
    }

    fn watch(&self, cluster: &str) -> tokio::sync::watch::Receiver<u64> {
        self.inner.watch(cluster)
    }

    async fn count(&self, cluster: &str, kind: &str, limit: u64) -> Result<u64, StoreError> {
        self.inner.count(cluster, kind, limit).await
    }
}

fn short_error(error: &StoreError) -> String {
    match error {
        StoreError::Fenced { cause, .. } => format!("fenced ({})", cause.as_str()),
        StoreError::Conflict { key, .. } => format!("conflict on {key}"),
        StoreError::NotFound { key } => format!("{key} not found"),
        other => other.to_string(),
    }
}

/// An operation as a trace shows it.
fn describe_op(op: &Op) -> String {
    match op {
        Op::Create { key, value } => format!("create {key} {}", clip(value)),
        Op::CreateWith { key, value, meta } => {
            format!("create {key} {} {}", clip(value), describe_meta(meta))
        }
        Op::Update {
            key,
            expected_version,
            value,
        } => format!("update {key}@v{expected_version} {}", clip(value)),
        Op::Replace {
            key,
            expected_version,
            value,
            meta,
        } => format!(
            "replace {key}@v{expected_version}{}{}",
            value
                .as_ref()
                .map(|v| format!(" value {}", clip(v)))
                .unwrap_or_default(),
            meta.as_ref()
                .map(|m| format!(" {}", describe_meta(m)))
                .unwrap_or_default()
        ),
        Op::Delete {
            key,
            expected_version,
        } => format!("delete {key}@v{expected_version}"),
        Op::Status {
            key,
            expected_generation,
            status,
        } => format!(
            "status {key}{} {}",
            expected_generation
                .map(|g| format!("@gen{g}"))
                .unwrap_or_default(),
            status.as_deref().map_or_else(|| "null".into(), clip)
        ),
        Op::Check {
            key,
            expected_version,
        } => format!("check {key}@v{expected_version}"),
    }
}

fn describe_meta(meta: &crate::store::Metadata) -> String {
    format!(
        "labels {:?} owner {} finalizers {:?}",
        meta.labels,
        meta.owner
            .as_ref()
            .map_or_else(|| "-".into(), |o| o.to_string()),
        meta.finalizers
    )
}

/// The guest's world: the run's virtual clock, seeds and services.
pub struct SimWorld {
    shared: Arc<Shared>,
}

impl SimWorld {
    /// For the run sharing `shared`.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

fn ready(result: Result<SimulatedResponse, wasmtime_wasi_http::Error>) -> SimulatedSend {
    Box::pin(std::future::ready(result))
}

impl Simulation for SimWorld {
    fn wall_clock(&self) -> Duration {
        Duration::from_secs(SIM_EPOCH_UNIX_SECS) + self.shared.now()
    }

    fn monotonic_clock(&self) -> u64 {
        u64::try_from(self.shared.now().as_nanos()).unwrap_or(u64::MAX)
    }

    fn random_seed(&self) -> u64 {
        self.shared.lock().seeds.next_u64()
    }

    fn send(&self, request: SimulatedRequest) -> SimulatedSend {
        use wasmtime_wasi_http::Error;
        let shared = &self.shared;
        let mut state = shared.lock();
        let epoch = request
            .header(crate::outbound::headers::EPOCH)
            .unwrap_or("-")
            .to_string();
        state.trace.line(format!(
            "    http {} {} key={} epoch={epoch}{}",
            request.method,
            request.url,
            request.header("idempotency-key").unwrap_or("-"),
            if request.body.is_empty() {
                String::new()
            } else {
                format!(" body {}", clip(&String::from_utf8_lossy(&request.body)))
            }
        ));
        let fault = state.plan.decide(Opportunity::Send);
        if let Some(fault) = &fault {
            state.fault_line(fault);
        }
        let uri: Option<http::Uri> = request.url.parse().ok();
        let service = uri
            .as_ref()
            .and_then(|uri| state.services.iter().position(|s| s.serves(uri)));
        let path = uri
            .as_ref()
            .map_or_else(|| "/".to_string(), |uri| uri.path().to_string());
        let timeout = request
            .first_byte_timeout
            .unwrap_or(crate::timeouts::HTTP_OUT_FIRST_BYTE);
        let Some(service) = service else {
            state
                .trace
                .line("      → no simulated service serves this URL: destination not found".into());
            return ready(Err(Error::DestinationNotFound));
        };
        // Deliver to the service: its decision, traced, counted, checked.
        let deliver = |state: &mut State| -> SimulatedResponse {
            let decision = state.services[service].handle(&request, &path);
            state.trace.line(format!(
                "      → {} {} {}",
                decision.response.status,
                decision.outcome,
                clip(&String::from_utf8_lossy(&decision.response.body))
            ));
            if decision.applied {
                let name = state.services[service].name.clone();
                state.changed(format!(
                    "{} {} applied by {name} at epoch {epoch}",
                    request.method, request.url
                ));
            }
            state.breaches.extend(decision.stale);
            decision.response
        };
        match fault.as_ref().map(|f| (f.kind, f.variant, f.amount)) {
            None => ready(Ok(deliver(&mut state))),
            Some((FaultKind::RequestRefused, _, _)) => {
                state
                    .trace
                    .line("      → connection refused, nothing sent".into());
                ready(Err(Error::ConnectionRefused))
            }
            Some((FaultKind::RequestTimeout, _, _)) => {
                shared.advance(timeout);
                state
                    .trace
                    .line("      → timed out before the service saw it".into());
                ready(Err(Error::ConnectionReadTimeout))
            }
            Some((FaultKind::ReplyLost, _, _)) => {
                deliver(&mut state);
                state.trace.line("      → the reply is lost".into());
                ready(Err(Error::ConnectionTerminated))
            }
            Some((FaultKind::ServerError, _, _)) => {
                state.trace.line("      → 503, nothing applied".into());
                ready(Ok(SimulatedResponse {
                    status: 503,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: serde_json::json!({ "error": "simulated: unavailable" })
                        .to_string()
                        .into_bytes(),
                }))
            }
            Some((FaultKind::Slow, _, ms)) => {
                let delay = Duration::from_millis(ms);
                if delay >= timeout {
                    shared.advance(timeout);
                    deliver(&mut state);
                    state
                        .trace
                        .line("      → answered after the request's timeout".into());
                    ready(Err(Error::ConnectionReadTimeout))
                } else {
                    shared.advance(delay);
                    ready(Ok(deliver(&mut state)))
                }
            }
            Some((FaultKind::LeaseLost, 0, _)) => {
                shared.lose_lease(&mut state, "before the request was sent");
                Box::pin(never())
            }
            Some((FaultKind::LeaseLost, 1, steps)) => {
                let due = state.step + steps;
                state.late.push(Late {
                    due,
                    service,
                    path,
                    request: request.clone(),
                });
                shared.lose_lease(&mut state, "while the request was in flight");
                Box::pin(never())
            }
            Some((FaultKind::LeaseLost, _, _)) => {
                deliver(&mut state);
                shared.lose_lease(&mut state, "after the service applied the request");
                Box::pin(never())
            }
            Some(_) => ready(Ok(deliver(&mut state))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::{AcquireRequest, Acquired};

    /// The store half of "no stale effect accepted": a commit is judged
    /// against the lease's grant as it stands once the commit landed, so a
    /// commit of an expired or superseded tenure is a breach, the current
    /// grant's is not.
    #[tokio::test]
    async fn a_commit_of_a_tenure_no_longer_current_is_a_breach() {
        let authority = Arc::new(MemoryAuthority::new());
        let lease = LeaseKey::new(CLUSTER, "p");
        let shared = Shared::new(
            authority.clone(),
            lease.clone(),
            Plan::scheduled(Vec::new()),
            Vec::new(),
            1,
        );
        let request = AcquireRequest {
            key: lease.clone(),
            holder: "replica-1".into(),
            ttl: crate::timeouts::MAX_LEASE_TTL,
        };
        let Ok(Acquired::Granted(grant)) = authority.acquire(&request).await else {
            panic!("not granted");
        };
        assert_eq!(shared.check_commit(&grant.fence).await, None);
        authority.faults().expire(&lease);
        let expired = shared.check_commit(&grant.fence).await;
        assert!(expired.is_some_and(|b| b.contains("live: false")));
        let successor = authority.faults().steal(&lease, "replica-2");
        let stale = shared.check_commit(&grant.fence).await.unwrap();
        assert!(
            stale.contains(&format!("epoch {}", successor.epoch)),
            "{stale}"
        );
    }
}
