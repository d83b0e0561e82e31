//! Per-controller write quotas: how fast a controller's guest may create
//! objects (a token bucket: `max_creates_per_second`, `create_burst`) and
//! how many objects of one kind its creates may bring about
//! (`max_objects_per_kind`, counted in the store).
//!
//! Owns the quota state that outlives guest instances: one [`WriteQuota`]
//! per controller on this replica, shared by every instance and tenure of
//! it, so a guest that restarts (or is restarted by failing) does not get a
//! fresh budget. G1 still holds: nothing of the guest survives; this state
//! is the host's. The cap on objects is counted in the store, so it holds
//! across host restarts and replicas too; the rate bucket is per replica
//! and starts full.
//!
//! A refused commit writes nothing. The guest sees `store-error::invalid`
//! (the WIT contract is unchanged, so built components keep linking) whose
//! message starts with [`REFUSAL_PREFIX`] and carries `key=value` fields up
//! to the first `": "`, which the guest SDK turns into its typed
//! `StoreError::QuotaExceeded`:
//!
//! ```text
//! quota exceeded: controller=flood quota=max_creates_per_second limit=20 retry_after_ms=50: ...
//! quota exceeded: controller=flood quota=max_objects_per_kind limit=30 kind=marks: ...
//! ```
//!
//! Exactness: creates are charged before the commit and given back when
//! the commit is refused for certain (fence, conflict, invalid), so at
//! most `create_burst + max_creates_per_second × elapsed` creates land. The
//! count of a kind is read from the store (bounded by `LIMIT cap + 1`) at
//! most every [`crate::timeouts::QUOTA_RECOUNT`] and kept exact in between
//! for the controller's own commits, which are serialized here. Writers
//! other than this controller (the API, other controllers) are not limited
//! by its quota; what they create counts against it from the next count.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::fence::{Epoch, Fence};
use crate::limits::{DEFAULT_CREATE_BURST, DEFAULT_CREATES_PER_SECOND, DEFAULT_OBJECTS_PER_KIND};
use crate::store::{Op, Store, StoreError};
use crate::timeouts::QUOTA_RECOUNT;

/// The start of every quota refusal's message: stable, documented, parsed
/// by the guest SDK.
pub const REFUSAL_PREFIX: &str = "quota exceeded: ";

/// A controller's write quotas, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Steady rate of creates (`max_creates_per_second`).
    pub creates_per_second: u32,
    /// Creates allowed at once before the rate applies (`create_burst`).
    pub create_burst: u32,
    /// Most objects of one kind this controller's creates may bring about
    /// (`max_objects_per_kind`).
    pub objects_per_kind: u64,
}

impl Default for QuotaLimits {
    fn default() -> Self {
        Self {
            creates_per_second: DEFAULT_CREATES_PER_SECOND,
            create_burst: DEFAULT_CREATE_BURST,
            objects_per_kind: DEFAULT_OBJECTS_PER_KIND,
        }
    }
}

/// Which quota refused a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Quota {
    /// The create rate (`max_creates_per_second` with `create_burst`).
    CreatesPerSecond,
    /// The cap on objects of one kind (`max_objects_per_kind`).
    ObjectsPerKind,
}

impl Quota {
    /// Every quota, for metrics that export each at 0 before it happens.
    pub const ALL: [Quota; 2] = [Quota::CreatesPerSecond, Quota::ObjectsPerKind];

    /// Its config key: also its name in refusals and in the
    /// `leasehold_quota_refusals_total{quota=...}` metric.
    pub fn key(self) -> &'static str {
        match self {
            Quota::CreatesPerSecond => "max_creates_per_second",
            Quota::ObjectsPerKind => "max_objects_per_kind",
        }
    }
}

/// A commit refused by a quota; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{REFUSAL_PREFIX}controller={controller} quota={} limit={limit}{}: {detail}", quota.key(), fields(retry_after, kind.as_deref()))]
pub struct QuotaExceeded {
    /// The controller whose quota it is.
    pub controller: String,
    /// Which quota.
    pub quota: Quota,
    /// The configured limit (creates per second, or objects per kind).
    pub limit: u64,
    /// For the rate: when enough creates will have been earned again.
    pub retry_after: Option<Duration>,
    /// For the cap: the kind that is full.
    pub kind: Option<String>,
    /// What happened and what to do, for people.
    pub detail: String,
}

fn fields(retry_after: &Option<Duration>, kind: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(wait) = retry_after {
        // Rounded up, so a guest that waits this long finds the creates.
        let ms = wait.as_nanos().div_ceil(1_000_000);
        out.push_str(&format!(" retry_after_ms={ms}"));
    }
    if let Some(kind) = kind {
        out.push_str(&format!(" kind={kind}"));
    }
    out
}

/// Why a commit was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// A quota refused it.
    #[error(transparent)]
    Refused(#[from] QuotaExceeded),
    /// The store could not count the kind; the commit was not attempted.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a token bucket says to a request for `n` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Take {
    /// Taken.
    Taken,
    /// Not enough now; enough will have been earned after this long.
    Wait(Duration),
    /// More than the bucket ever holds: no wait helps.
    Never,
}

/// A token bucket with time passed in, so its logic is tested without
/// sleeping. Starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens, earning `per_second`.
    pub fn full(per_second: u32, burst: u32, now: Instant) -> Self {
        Self {
            per_second: f64::from(per_second),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        // A clock read before `at` (another caller went first) earns
        // nothing rather than going backwards.
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.at = self.at.max(now);
    }

    /// Take `n` tokens at `now`, or say how long until there are enough.
    pub fn take(&mut self, n: u32, now: Instant) -> Take {
        let n = f64::from(n);
        if n > self.burst {
            return Take::Never;
        }
        self.refill(now);
        if self.tokens >= n {
            self.tokens -= n;
            return Take::Taken;
        }
        if self.per_second <= 0.0 {
            return Take::Never;
        }
        Take::Wait(Duration::from_secs_f64((n - self.tokens) / self.per_second))
    }

    /// Return `n` tokens taken for creates that did not land.
    pub fn give_back(&mut self, n: u32) {
        self.tokens = (self.tokens + f64::from(n)).min(self.burst);
    }

    /// Tokens available at `now`.
    pub fn available(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }
}

/// The count of one kind as last read from the store, kept up to date with
/// this controller's own commits.
#[derive(Debug, Clone, Copy)]
struct KindCount {
    count: u64,
    /// The tenure it was counted in: a new tenure counts again (another
    /// replica's guest may have created objects meanwhile).
    epoch: Epoch,
    counted_at: Instant,
}

/// The quota state of one controller on this replica.
#[derive(Debug)]
pub struct WriteQuota {
    controller: String,
    limits: QuotaLimits,
    bucket: Mutex<TokenBucket>,
    /// Held from a creating commit's count check until its outcome is
    /// known, so the controller's own commits cannot both pass one count.
    counts: tokio::sync::Mutex<HashMap<String, KindCount>>,
}

/// An admitted commit: settle it with the commit's outcome.
pub struct Permit<'a> {
    quota: &'a WriteQuota,
    charged: u32,
    /// Set once the commit is sent: a permit dropped after that (the
    /// guest was aborted mid-commit) cannot know whether it landed.
    sent: bool,
    creates: BTreeMap<String, u64>,
    deletes: BTreeMap<String, u64>,
    counts: Option<tokio::sync::MutexGuard<'a, HashMap<String, KindCount>>>,
}

fn per_kind<'o>(ops: &'o [Op], pick: impl Fn(&'o Op) -> Option<&'o str>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for kind in ops.iter().filter_map(pick) {
        *out.entry(kind.to_string()).or_insert(0) += 1;
    }
    out
}

impl WriteQuota {
    /// Fresh quota state for `controller` (a full bucket, nothing counted).
    pub fn new(controller: &str, limits: QuotaLimits) -> Self {
        Self {
            controller: controller.to_string(),
            limits,
            bucket: Mutex::new(TokenBucket::full(
                limits.creates_per_second,
                limits.create_burst,
                Instant::now(),
            )),
            counts: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The configured limits.
    pub fn limits(&self) -> QuotaLimits {
        self.limits
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        // The bucket is plain numbers: a panic elsewhere cannot leave it
        // inconsistent.
        self.bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admit a commit of `ops` under `fence`, or refuse it. Charges its
    /// creates and, for each kind it creates, checks the kind's count
    /// (from the store when the last count is stale).
    pub async fn admit(
        &self,
        store: &dyn Store,
        fence: &Fence,
        ops: &[Op],
    ) -> Result<Permit<'_>, AdmitError> {
        // Every create counts, with metadata or without.
        let creates = per_kind(ops, |op| op.creates().map(|key| key.kind.as_str()));
        let deletes = per_kind(ops, |op| match op {
            Op::Delete { key, .. } => Some(&key.kind),
            _ => None,
        });
        let mut permit = Permit {
            quota: self,
            charged: 0,
            sent: false,
            creates,
            deletes,
            counts: None,
        };
        let wanted: u64 = permit.creates.values().sum();
        if wanted == 0 {
            return Ok(permit);
        }
        // At most MAX_OPS_PER_COMMIT creates, so this never saturates in
        // practice; saturating only makes an absurd commit refused.
        let n = u32::try_from(wanted).unwrap_or(u32::MAX);
        let take = self.bucket().take(n, Instant::now());
        match take {
            Take::Taken => permit.charged = n,
            Take::Wait(wait) => return Err(self.rate_refusal(n, Some(wait)).into()),
            Take::Never => return Err(self.rate_refusal(n, None).into()),
        }
        let mut counts = self.counts.lock().await;
        let now = Instant::now();
        let cap = self.limits.objects_per_kind;
        for (kind, &adding) in &permit.creates {
            let fresh = counts
                .get(kind)
                .filter(|c| {
                    c.epoch == fence.epoch && now.duration_since(c.counted_at) < QUOTA_RECOUNT
                })
                .map(|c| c.count);
            let current = match fresh {
                Some(count) => count,
                None => {
                    // `permit` gives the charge back if this fails.
                    let count = store
                        .count(&fence.key.cluster, kind, cap.saturating_add(1))
                        .await?;
                    // Forget kinds not counted lately, so a guest creating
                    // under ever new kinds cannot grow this map.
                    counts.retain(|_, c| now.duration_since(c.counted_at) < QUOTA_RECOUNT);
                    counts.insert(
                        kind.clone(),
                        KindCount {
                            count,
                            epoch: fence.epoch,
                            counted_at: now,
                        },
                    );
                    count
                }
            };
            if current.saturating_add(adding) > cap {
                return Err(QuotaExceeded {
                    controller: self.controller.clone(),
                    quota: Quota::ObjectsPerKind,
                    limit: cap,
                    retry_after: None,
                    kind: Some(kind.clone()),
                    detail: format!(
                        "kind {kind:?} holds {current} objects and this commit creates {adding} \
                         more; controller {:?} may bring it to at most {cap} \
                         (max_objects_per_kind); delete some or raise the limit; nothing was written",
                        self.controller
                    ),
                }
                .into());
            }
        }
        permit.counts = Some(counts);
        Ok(permit)
    }

    fn rate_refusal(&self, creates: u32, wait: Option<Duration>) -> QuotaExceeded {
        let QuotaLimits {
            creates_per_second: rate,
            create_burst: burst,
            ..
        } = self.limits;
        let detail = match wait {
            Some(_) => format!(
                "controller {:?} may create {rate} objects per second (create_burst {burst}) and \
                 has spent them; this commit creates {creates}; retry later; nothing was written",
                self.controller
            ),
            None => format!(
                "this commit creates {creates} objects, more than controller {:?} may ever \
                 create at once (create_burst {burst}); split it; nothing was written",
                self.controller
            ),
        };
        QuotaExceeded {
            controller: self.controller.clone(),
            quota: Quota::CreatesPerSecond,
            limit: u64::from(rate),
            retry_after: wait,
            kind: None,
            detail,
        }
    }
}

impl Permit<'_> {
    /// Mark the commit as sent to the store: from now on only
    /// [`Permit::settle`] gives the charge back.
    pub fn sent(&mut self) {
        self.sent = true;
    }

    /// Record the outcome of the admitted commit: creates that did not land
    /// for certain are given back; counts follow what landed, and are
    /// forgotten when the outcome is unknown.
    pub async fn settle<T>(mut self, outcome: &Result<T, StoreError>) {
        if self.creates.is_empty() && self.deletes.is_empty() {
            return;
        }
        match outcome {
            Ok(_) => {
                let quota = self.quota;
                let counts = match self.counts.take() {
                    Some(held) => held,
                    None => quota.counts.lock().await,
                };
                let mut counts = counts;
                for (kind, n) in &self.creates {
                    if let Some(c) = counts.get_mut(kind) {
                        c.count = c.count.saturating_add(*n);
                    }
                }
                for (kind, n) in &self.deletes {
                    if let Some(c) = counts.get_mut(kind) {
                        c.count = c.count.saturating_sub(*n);
                    }
                }
                self.charged = 0;
            }
            Err(StoreError::Unavailable(_)) => {
                // The commit may have landed: keep the charge, count again.
                let mut counts = match self.counts.take() {
                    Some(held) => held,
                    None => self.quota.counts.lock().await,
                };
                for kind in self.creates.keys().chain(self.deletes.keys()) {
                    counts.remove(kind);
                }
                self.charged = 0;
            }
            // Refused for certain: nothing landed. `Drop` gives the charge
            // back.
            Err(_) => self.sent = false,
        }
    }
}

impl Drop for Permit<'_> {
    /// A permit dropped before its commit was sent (a refusal after
    /// charging, a failed count) gives its charge back. One dropped while
    /// its commit was in flight keeps the charge and forgets the counts of
    /// its kinds: the commit may have landed.
    fn drop(&mut self) {
        if self.charged == 0 {
            return;
        }
        if !self.sent {
            self.quota.bucket().give_back(self.charged);
        } else if let Some(counts) = self.counts.as_mut() {
            for kind in self.creates.keys() {
                counts.remove(kind);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::authority::memory::MemoryAuthority;
    use crate::authority::{AcquireRequest, Acquired, Authority};
    use crate::fence::LeaseKey;
    use crate::store::{Committed, Event, MemoryStore, NewEvent, Object, ObjectKey, Page};

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_bucket_starts_full_and_refills_at_its_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(10, 20, t0);
        assert_eq!(bucket.take(20, t0), Take::Taken);
        // Empty: one token takes 100 ms to earn.
        match bucket.take(1, t0) {
            Take::Wait(wait) => assert_eq!(wait.as_millis(), 100),
            other => panic!("expected a wait, got {other:?}"),
        }
        assert_eq!(bucket.take(1, at(t0, 100)), Take::Taken);
        // Half a second earns five.
        assert_eq!(bucket.take(5, at(t0, 600)), Take::Taken);
        assert!(matches!(bucket.take(1, at(t0, 600)), Take::Wait(_)));
    }

    #[test]
    fn a_bucket_never_holds_more_than_its_burst() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(10, 20, t0);
        // An hour idle earns no more than the burst.
        assert_eq!(bucket.available(at(t0, 3_600_000)), 20.0);
        assert_eq!(bucket.take(21, at(t0, 3_600_000)), Take::Never);
        assert_eq!(bucket.take(20, at(t0, 3_600_000)), Take::Taken);
        bucket.give_back(50);
        assert_eq!(bucket.available(at(t0, 3_600_000)), 20.0);
    }

    #[test]
    fn a_clock_read_out_of_order_earns_nothing() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(10, 10, at(t0, 1000));
        assert_eq!(bucket.take(10, at(t0, 1000)), Take::Taken);
        assert_eq!(bucket.available(t0), 0.0);
        assert_eq!(bucket.available(at(t0, 1100)), 1.0);
    }

    #[test]
    fn landed_creates_stay_within_burst_plus_rate_times_elapsed() {
        let t0 = Instant::now();
        let (rate, burst) = (50u32, 100u32);
        let mut bucket = TokenBucket::full(rate, burst, t0);
        let mut landed = 0u64;
        // A guest asking every millisecond for ten seconds.
        for ms in 0..10_000 {
            if bucket.take(1, at(t0, ms)) == Take::Taken {
                landed += 1;
            }
        }
        let bound = u64::from(burst) + u64::from(rate) * 10;
        assert!(landed <= bound, "{landed} > {bound}");
        assert!(landed >= bound - 1, "{landed} well below {bound}");
    }

    #[test]
    fn refusals_carry_the_documented_prefix_and_fields() {
        let quota = WriteQuota::new(
            "flood",
            QuotaLimits {
                creates_per_second: 20,
                create_burst: 40,
                objects_per_kind: 30,
            },
        );
        let text = quota
            .rate_refusal(1, Some(Duration::from_micros(49_001)))
            .to_string();
        assert!(
            text.starts_with(
                "quota exceeded: controller=flood quota=max_creates_per_second limit=20 \
                 retry_after_ms=50: "
            ),
            "{text}"
        );
        let text = quota.rate_refusal(41, None).to_string();
        assert!(
            text.starts_with(
                "quota exceeded: controller=flood quota=max_creates_per_second limit=20: "
            ),
            "{text}"
        );
        assert!(text.contains("split it"), "{text}");
    }

    struct Rig {
        authority: Arc<MemoryAuthority>,
        store: Arc<MemoryStore>,
        fence: Fence,
    }

    async fn rig() -> Rig {
        let authority = Arc::new(MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let request = AcquireRequest {
            key: LeaseKey::new("c1", "flood"),
            holder: "host-a".into(),
            ttl: Duration::from_secs(60),
        };
        let Ok(Acquired::Granted(grant)) = authority.acquire(&request).await else {
            panic!("the lease is free")
        };
        Rig {
            authority,
            store,
            fence: grant.fence,
        }
    }

    fn creates(kind: &str, names: std::ops::Range<u32>) -> Vec<Op> {
        names
            .map(|i| Op::Create {
                key: ObjectKey {
                    kind: kind.into(),
                    name: format!("o-{i}"),
                },
                value: "{}".into(),
            })
            .collect()
    }

    /// Admit, commit and settle like the store host does.
    async fn commit(
        quota: &WriteQuota,
        rig: &Rig,
        ops: &[Op],
    ) -> Result<Result<(), StoreError>, QuotaExceeded> {
        let permit = match quota.admit(rig.store.as_ref(), &rig.fence, ops).await {
            Ok(permit) => permit,
            Err(AdmitError::Refused(refusal)) => return Err(refusal),
            Err(AdmitError::Store(e)) => panic!("count failed: {e}"),
        };
        let mut permit = permit;
        permit.sent();
        let outcome = rig.store.commit_fenced(&rig.fence, ops, &[]).await;
        permit.settle(&outcome).await;
        Ok(outcome.map(|_| ()))
    }

    fn limits(rate: u32, burst: u32, cap: u64) -> QuotaLimits {
        QuotaLimits {
            creates_per_second: rate,
            create_burst: burst,
            objects_per_kind: cap,
        }
    }

    #[tokio::test]
    async fn the_cap_counts_what_the_store_holds() {
        let rig = rig().await;
        // Objects already there count, whoever made them.
        commit(
            &WriteQuota::new("flood", limits(1000, 1000, 1000)),
            &rig,
            &creates("marks", 0..8),
        )
        .await
        .unwrap()
        .unwrap();
        // A fresh quota (a restarted host) counts them from the store.
        let quota = WriteQuota::new("flood", limits(1000, 1000, 10));
        commit(&quota, &rig, &creates("marks", 8..10))
            .await
            .unwrap()
            .unwrap();
        let refusal = commit(&quota, &rig, &creates("marks", 10..11))
            .await
            .unwrap_err();
        assert_eq!(refusal.quota, Quota::ObjectsPerKind);
        assert_eq!(refusal.kind.as_deref(), Some("marks"));
        assert!(
            refusal.to_string().starts_with(
                "quota exceeded: controller=flood quota=max_objects_per_kind limit=10 kind=marks: "
            ),
            "{refusal}"
        );
        assert_eq!(rig.store.count("c1", "marks", 100).await.unwrap(), 10);
        // Other kinds have their own cap.
        commit(&quota, &rig, &creates("other", 0..3))
            .await
            .unwrap()
            .unwrap();
        // A delete by the controller makes room at once.
        let delete = Op::Delete {
            key: ObjectKey {
                kind: "marks".into(),
                name: "o-0".into(),
            },
            expected_version: rig
                .store
                .get(
                    "c1",
                    &ObjectKey {
                        kind: "marks".into(),
                        name: "o-0".into(),
                    },
                )
                .await
                .unwrap()
                .unwrap()
                .version,
        };
        commit(&quota, &rig, &[delete]).await.unwrap().unwrap();
        commit(&quota, &rig, &creates("marks", 20..21))
            .await
            .unwrap()
            .unwrap();
        assert!(
            commit(&quota, &rig, &creates("marks", 21..22))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_commit_that_does_not_land_gives_its_creates_back() {
        let rig = rig().await;
        let quota = WriteQuota::new("flood", limits(1, 3, 1000));
        commit(&quota, &rig, &creates("marks", 0..2))
            .await
            .unwrap()
            .unwrap();
        // A conflict (o-1 exists) writes nothing and costs nothing.
        let conflict = commit(&quota, &rig, &creates("marks", 1..2)).await.unwrap();
        assert!(
            matches!(conflict, Err(StoreError::Conflict { .. })),
            "{conflict:?}"
        );
        commit(&quota, &rig, &creates("marks", 2..3))
            .await
            .unwrap()
            .unwrap();
        let refusal = commit(&quota, &rig, &creates("marks", 3..4))
            .await
            .unwrap_err();
        assert_eq!(refusal.quota, Quota::CreatesPerSecond);
        assert!(refusal.retry_after.is_some());
        // A fenced commit is given back too.
        rig.authority.faults().steal(&rig.fence.key, "host-b");
        let quota = WriteQuota::new("flood", limits(1, 1, 1000));
        let fenced = commit(&quota, &rig, &creates("marks", 5..6)).await.unwrap();
        assert!(
            matches!(fenced, Err(StoreError::Fenced { .. })),
            "{fenced:?}"
        );
        assert_eq!(quota.bucket().available(Instant::now()), 1.0);
    }

    /// A store with only the required methods, so `count` is the trait's
    /// default (paging through `list`), as in test wrappers.
    struct ListOnly(Arc<MemoryStore>);

    #[async_trait::async_trait]
    impl Store for ListOnly {
        async fn get(&self, c: &str, k: &ObjectKey) -> Result<Option<Object>, StoreError> {
            self.0.get(c, k).await
        }
        async fn list(
            &self,
            c: &str,
            kind: &str,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Page, StoreError> {
            self.0.list(c, kind, after, limit).await
        }
        async fn commit_fenced(
            &self,
            f: &Fence,
            ops: &[Op],
            events: &[NewEvent],
        ) -> Result<Committed, StoreError> {
            self.0.commit_fenced(f, ops, events).await
        }
        async fn put(
            &self,
            c: &str,
            k: &ObjectKey,
            v: &str,
            expected: Option<u64>,
        ) -> Result<Object, StoreError> {
            self.0.put(c, k, v, expected).await
        }
        async fn delete(
            &self,
            c: &str,
            k: &ObjectKey,
            expected: Option<u64>,
        ) -> Result<(), StoreError> {
            self.0.delete(c, k, expected).await
        }
        async fn events(
            &self,
            c: &str,
            after: u64,
            limit: usize,
        ) -> Result<Vec<Event>, StoreError> {
            self.0.events(c, after, limit).await
        }
        fn watch(&self, c: &str) -> tokio::sync::watch::Receiver<u64> {
            self.0.watch(c)
        }
    }

    #[tokio::test]
    async fn the_default_count_pages_through_list_and_stops_at_its_limit() {
        let rig = rig().await;
        // More than one page of the largest listing.
        let n = crate::limits::MAX_PAGE_SIZE as u32 + 20;
        for chunk in (0..n)
            .collect::<Vec<_>>()
            .chunks(crate::limits::MAX_OPS_PER_COMMIT)
        {
            let ops = creates("marks", chunk[0]..chunk[chunk.len() - 1] + 1);
            rig.store
                .commit_fenced(&rig.fence, &ops, &[])
                .await
                .unwrap();
        }
        rig.store
            .put(
                "c1",
                &ObjectKey {
                    kind: "other".into(),
                    name: "a".into(),
                },
                "1",
                None,
            )
            .await
            .unwrap();
        let store = ListOnly(rig.store.clone());
        assert_eq!(
            store.count("c1", "marks", u64::MAX).await.unwrap(),
            u64::from(n)
        );
        assert_eq!(store.count("c1", "marks", 7).await.unwrap(), 7);
        assert_eq!(store.count("c1", "marks", 501).await.unwrap(), 501);
        assert_eq!(store.count("c1", "none", 10).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn the_count_is_taken_again_in_a_new_tenure() {
        let rig = rig().await;
        let quota = WriteQuota::new("flood", limits(1000, 1000, 5));
        commit(&quota, &rig, &creates("marks", 0..5))
            .await
            .unwrap()
            .unwrap();
        // Another writer empties the kind; a new tenure sees it at once.
        for i in 0..5 {
            let key = ObjectKey {
                kind: "marks".into(),
                name: format!("o-{i}"),
            };
            rig.store.delete("c1", &key, None).await.unwrap();
        }
        let next = Fence {
            epoch: Epoch(rig.fence.epoch.0 + 1),
            ..rig.fence.clone()
        };
        let permit = quota
            .admit(rig.store.as_ref(), &next, &creates("marks", 0..5))
            .await;
        assert!(permit.is_ok(), "a stale count refused the commit");
    }
}
