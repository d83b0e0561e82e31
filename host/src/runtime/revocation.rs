//! Revoking a tenure's fence: the first step of a hard abort (G3).
//!
//! `revoke` sets a flag every host call checks before touching the
//! database, wakes the task running the guest so it drops the guest's
//! future, and bumps the engine epoch so CPU-bound guest code reaches its
//! deadline check at once instead of at the next tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    tx: watch::Sender<bool>,
    engine: EngineWeak,
}

impl Revocation {
    pub(crate) fn new(engine: &wasmtime::Engine) -> Self {
        let (tx, _) = watch::channel(false);
        Self {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
                valid_until: AtomicU64::new(u64::MAX),
                base: Instant::now(),
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

    /// Whether the tenure is over as of `now`: revoked, or past the instant
    /// given to [`set_valid_until`](Self::set_valid_until).
    pub fn is_lost_at(&self, now: Instant) -> bool {
        if self.is_revoked() {
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
