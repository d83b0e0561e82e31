//! Revoking a tenure's fence: the first step of a hard abort (G3).
//!
//! `revoke` sets a flag every host call checks before touching the
//! database, wakes the task running the guest so it drops the guest's
//! future, and bumps the engine epoch so CPU-bound guest code reaches its
//! deadline check at once instead of at the next tick.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::watch;
use wasmtime::EngineWeak;

/// A shared, one-way switch: once revoked, always revoked.
#[derive(Clone)]
pub struct Revocation {
    inner: Arc<Inner>,
}

struct Inner {
    flag: AtomicBool,
    /// When the tenure's lease stops counting as held (L3), as nanoseconds
    /// after `base`; `u64::MAX` until the owner sets it.
    valid_until: AtomicU64,
    base: Instant,
    /// Another clock the tenure also ends by, if its owner gave one (the
    /// host's liveness, under crash detection `session`).
    lapse: OnceLock<Arc<dyn Lapse>>,
    tx: watch::Sender<bool>,
    engine: EngineWeak,
}

/// A second clock a tenure ends by, besides its renew deadline: judged on
/// the instant itself wherever [`Revocation::is_lost_at`] is asked (the
/// send of an outbound request), so it holds even before the owner's own
/// timer or notification has revoked the tenure.
pub trait Lapse: Send + Sync {
    /// Whether the tenure is over as of `now` by this clock.
    fn lapsed_at(&self, now: Instant) -> bool;
}

impl Revocation {
    pub(crate) fn new(engine: &wasmtime::Engine) -> Self {
        let (tx, _) = watch::channel(false);
        Self {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
                valid_until: AtomicU64::new(u64::MAX),
                base: Instant::now(),
                lapse: OnceLock::new(),
                tx,
                engine: engine.weak(),
            }),
        }
    }

    /// Revoke the fence. Idempotent.
    pub fn revoke(&self) {
        // Order matters: the flag is visible before the wake-up and the
        // epoch bump, so whoever is woken (the epoch callback or the task's
        // select) sees it set. An epoch bump that the guest absorbs while it
        // is yielded is harmless: the select drops the future regardless.
        if !self.inner.flag.swap(true, Ordering::SeqCst) {
            self.inner.tx.send_replace(true);
            if let Some(engine) = self.inner.engine.upgrade() {
                engine.increment_epoch();
            }
        }
    }

    /// Whether the fence was revoked.
    pub fn is_revoked(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// Record until when the tenure's lease counts as held: the renew
    /// deadline after the last renewal sent that succeeded (L3). The owner
    /// revokes at that instant anyway; this lets effects that leave the
    /// process (outbound requests) refuse on the clock itself, even if the
    /// owner's timer fires late (a paused process, a busy executor).
    pub fn set_valid_until(&self, until: Instant) {
        let nanos = until
            .checked_duration_since(self.inner.base)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1));
        self.inner.valid_until.store(nanos, Ordering::SeqCst);
    }

    /// Make the tenure also end by `lapse` (set once; later calls are
    /// ignored): the host's liveness under crash detection `session`,
    /// which a standby may act on without waiting for the lease to expire.
    pub fn set_lapse(&self, lapse: Arc<dyn Lapse>) {
        let _ = self.inner.lapse.set(lapse);
    }

    /// Whether the tenure is over as of `now`: revoked, past the instant
    /// given to [`set_valid_until`](Self::set_valid_until), or lapsed by
    /// the clock given to [`set_lapse`](Self::set_lapse).
    pub fn is_lost_at(&self, now: Instant) -> bool {
        if self.is_revoked() {
            return true;
        }
        if self
            .inner
            .lapse
            .get()
            .is_some_and(|lapse| lapse.lapsed_at(now))
        {
            return true;
        }
        let until = self.inner.valid_until.load(Ordering::SeqCst);
        if until == u64::MAX {
            return false;
        }
        let elapsed = now.saturating_duration_since(self.inner.base).as_nanos();
        elapsed >= u128::from(until)
    }

    /// Resolves once the fence is revoked (at once if it already is).
    pub async fn revoked(&self) {
        let mut rx = self.inner.tx.subscribe();
        // The sender lives in `self`, so this only ends when the value is true.
        let _ = rx.wait_for(|revoked| *revoked).await;
    }
}
