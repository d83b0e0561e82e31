//! Revoking a tenure's fence: the first step of a hard abort (G3).
//!
//! `revoke` sets a flag every host call checks before touching the
//! database, wakes the task running the guest so it drops the guest's
//! future, and bumps the engine epoch so CPU-bound guest code reaches its
//! deadline check at once instead of at the next tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;
use wasmtime::EngineWeak;

/// A shared, one-way switch: once revoked, always revoked.
#[derive(Clone)]
pub struct Revocation {
    inner: Arc<Inner>,
}

struct Inner {
    flag: AtomicBool,
    tx: watch::Sender<bool>,
    engine: EngineWeak,
}

impl Revocation {
    pub(crate) fn new(engine: &wasmtime::Engine) -> Self {
        let (tx, _) = watch::channel(false);
        Self {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
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

    /// Resolves once the fence is revoked (at once if it already is).
    pub async fn revoked(&self) {
        let mut rx = self.inner.tx.subscribe();
        // The sender lives in `self`, so this only ends when the value is true.
        let _ = rx.wait_for(|revoked| *revoked).await;
    }
}
