//! The host's write quotas, when a test asks for them
//! ([`FakeHost::set_quotas`]): the create rate (a token bucket of
//! `create_burst`, refilled at `max_creates_per_second` by the fake's
//! clock) and the cap on objects of one kind (`max_objects_per_kind`,
//! counted in the fake's store), judged as the host's `quota.rs` judges
//! them, in its order and with its refusal texts. A refused commit writes
//! nothing and spends nothing.
//!
//! Off until set: the fake's clock moves only when a test moves it, so a
//! test creating more than a burst's worth of objects would be refused
//! where a real host, minutes apart, would not.

use std::time::SystemTime;

use crate::error::{QUOTA_EXCEEDED_PREFIX, Quota};
use crate::sys::Op;

use super::FakeHost;

/// A controller's write quotas, as its `[[controllers]]` entry sets them
/// (`max_creates_per_second`, `create_burst`, `max_objects_per_kind`).
/// [`QuotaLimits::default`] is the host's defaults.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, QuotaLimits, StoreError, Transaction};
///
/// let host = FakeHost::new();
/// host.set_quotas(QuotaLimits { max_objects_per_kind: 1, ..QuotaLimits::default() });
/// Transaction::new().create("tasks", "a", &1).commit()?;
/// match Transaction::new().create("tasks", "b", &1).commit() {
///     Err(StoreError::QuotaExceeded(q)) => assert_eq!(q.kind.as_deref(), Some("tasks")),
///     other => panic!("expected a quota refusal, got {other:?}"),
/// }
/// # Ok::<(), StoreError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Steady rate of creates.
    pub max_creates_per_second: u32,
    /// Creates allowed at once before the rate applies.
    pub create_burst: u32,
    /// Most objects of one kind this controller's creates may bring about.
    pub max_objects_per_kind: u64,
}

impl Default for QuotaLimits {
    /// The host's defaults: 100 creates per second, a burst of 1000, 100000
    /// objects per kind.
    fn default() -> Self {
        Self {
            max_creates_per_second: 100,
            create_burst: 1000,
            max_objects_per_kind: 100_000,
        }
    }
}

/// The quotas in force and the create bucket.
#[derive(Debug, Clone)]
pub(super) struct QuotaState {
    limits: QuotaLimits,
    tokens: f64,
    at: SystemTime,
}

impl QuotaState {
    /// A full bucket at `now`.
    pub(super) fn new(limits: QuotaLimits, now: SystemTime) -> Self {
        Self {
            limits,
            tokens: f64::from(limits.create_burst),
            at: now,
        }
    }

    fn refill(&mut self, now: SystemTime) {
        // A clock set back earns nothing.
        if let Ok(elapsed) = now.duration_since(self.at) {
            let earned = elapsed.as_secs_f64() * f64::from(self.limits.max_creates_per_second);
            self.tokens = (self.tokens + earned).min(f64::from(self.limits.create_burst));
            self.at = now;
        }
    }

    /// Admit a commit of `ops` by `controller` at `now`, `count` giving how
    /// many objects a kind holds: the creates it may spend, or the host's
    /// refusal text.
    pub(super) fn admit(
        &mut self,
        controller: &str,
        ops: &[Op],
        count: impl Fn(&str) -> u64,
        now: SystemTime,
    ) -> Result<u32, String> {
        let mut creates: Vec<(String, u64)> = Vec::new();
        for op in ops {
            if let Op::Create { key, .. } | Op::CreateWith { key, .. } = op {
                match creates.iter_mut().find(|(kind, _)| *kind == key.kind) {
                    Some((_, n)) => *n += 1,
                    None => creates.push((key.kind.clone(), 1)),
                }
            }
        }
        creates.sort();
        let wanted: u64 = creates.iter().map(|(_, n)| n).sum();
        if wanted == 0 {
            return Ok(0);
        }
        let n = u32::try_from(wanted).unwrap_or(u32::MAX);
        let QuotaLimits {
            max_creates_per_second: rate,
            create_burst: burst,
            max_objects_per_kind: cap,
        } = self.limits;
        let head = |quota: Quota, fields: String| {
            format!(
                "{QUOTA_EXCEEDED_PREFIX}controller={controller} quota={} {fields}",
                quota.key()
            )
        };
        if n > burst {
            return Err(format!(
                "{}: this commit creates {n} objects, more than controller {controller:?} may \
                 ever create at once (create_burst {burst}); split it; nothing was written",
                head(Quota::CreatesPerSecond, format!("limit={rate}"))
            ));
        }
        self.refill(now);
        if self.tokens < f64::from(n) {
            // Rounded up, so a guest that waits this long finds the creates.
            let wait_ms = ((f64::from(n) - self.tokens) / f64::from(rate) * 1000.0).ceil() as u64;
            return Err(format!(
                "{}: controller {controller:?} may create {rate} objects per second (create_burst \
                 {burst}) and has spent them; this commit creates {n}; retry later; nothing was \
                 written",
                head(
                    Quota::CreatesPerSecond,
                    format!("limit={rate} retry_after_ms={wait_ms}")
                )
            ));
        }
        for (kind, adding) in &creates {
            let current = count(kind);
            if current.saturating_add(*adding) > cap {
                return Err(format!(
                    "{}: kind {kind:?} holds {current} objects and this commit creates {adding} \
                     more; controller {controller:?} may bring it to at most {cap} \
                     (max_objects_per_kind); delete some or raise the limit; nothing was written",
                    head(Quota::ObjectsPerKind, format!("limit={cap} kind={kind}"))
                ));
            }
        }
        Ok(n)
    }

    /// Spend the creates of a commit that landed.
    pub(super) fn spend(&mut self, creates: u32) {
        self.tokens -= f64::from(creates);
    }
}

impl FakeHost {
    /// Enforce the host's write quotas on the guest's commits from now on,
    /// as the host does with these limits (the create bucket starts full;
    /// the fake's clock refills it). Off until called: see the module's
    /// notes. A refusal is the host's `invalid` text, which the SDK types
    /// as [`StoreError::QuotaExceeded`](crate::StoreError::QuotaExceeded).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, QuotaLimits, StoreError, Transaction};
    ///
    /// let host = FakeHost::new();
    /// host.set_quotas(QuotaLimits { create_burst: 2, max_creates_per_second: 1, ..QuotaLimits::default() });
    /// Transaction::new().create("tasks", "a", &1).create("tasks", "b", &1).commit()?;
    /// assert!(matches!(
    ///     Transaction::new().create("tasks", "c", &1).commit(),
    ///     Err(StoreError::QuotaExceeded(_))
    /// ));
    /// host.advance(std::time::Duration::from_secs(1));
    /// Transaction::new().create("tasks", "c", &1).commit()?;
    /// # Ok::<(), StoreError>(())
    /// ```
    pub fn set_quotas(&self, limits: QuotaLimits) {
        let mut state = self.state.borrow_mut();
        let now = state.now;
        state.quota = Some(QuotaState::new(limits, now));
    }
}
