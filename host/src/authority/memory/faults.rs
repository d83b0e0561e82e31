//! Deterministic fault injection for the memory backend. **For tests**:
//! nothing in a running host calls this; it exists so lease-loss paths are
//! as tested as the happy path, without sleeps.
//!
//! - [`Faults::steal`]: force loss: the lease is granted to a phantom
//!   holder at the next epoch, as if another replica had taken over.
//! - [`Faults::expire`]: force expiry: the current grant expires now.
//! - [`Faults::hold_renewals`] / [`Faults::fail_renewals`]: renewals park
//!   (or fail) until the returned guard is dropped; [`RenewalHold::parked`]
//!   tells a test when a renewal is stuck, so it can act at that moment.
//! - [`Faults::partition`]: every call on behalf of one holder fails as if
//!   the database were unreachable, until the guard is dropped.

use std::collections::BTreeMap;

use tokio::sync::watch;

use super::MemoryAuthority;
use crate::authority::AuthorityError;
use crate::fence::{Epoch, Fence, LeaseKey};

use super::MEMORY_ENDPOINT;

/// Which faults are switched on. Counts, so overlapping guards compose.
#[derive(Debug, Clone, Default)]
struct Switches {
    holding: usize,
    failing: usize,
    partitioned: BTreeMap<String, usize>,
}

pub(super) struct FaultState {
    switches: watch::Sender<Switches>,
    /// How many renew calls are parked at a hold right now. A separate
    /// channel from `switches`: a renewal parking must not wake itself.
    parked: watch::Sender<usize>,
}

fn injected(reason: &str) -> AuthorityError {
    AuthorityError::Unavailable {
        endpoint: MEMORY_ENDPOINT.to_string(),
        reason: format!("injected fault: {reason}"),
    }
}

impl FaultState {
    pub(super) fn new() -> Self {
        Self {
            switches: watch::Sender::new(Switches::default()),
            parked: watch::Sender::new(0),
        }
    }

    pub(super) fn check_partition(&self, holder: &str) -> Result<(), AuthorityError> {
        if self.switches.borrow().partitioned.contains_key(holder) {
            return Err(injected(&format!("holder {holder} is partitioned")));
        }
        Ok(())
    }

    /// Wait while renewals are held; fail if they fail or a holder is
    /// partitioned.
    pub(super) async fn renew_gate(&self, fences: &[Fence]) -> Result<(), AuthorityError> {
        let mut switches = self.switches.subscribe();
        loop {
            {
                let now = switches.borrow_and_update();
                if let Some(fence) = fences
                    .iter()
                    .find(|f| now.partitioned.contains_key(&f.holder))
                {
                    return Err(injected(&format!("holder {} is partitioned", fence.holder)));
                }
                if now.failing > 0 {
                    return Err(injected("renewals fail"));
                }
                if now.holding == 0 {
                    return Ok(());
                }
            }
            let _parked = Parked::new(&self.parked);
            // The sender lives as long as the authority, which outlives
            // this call (we borrow it).
            let _ = switches.changed().await;
        }
    }
}

/// Counts one parked renewal while alive; a renewal future dropped while
/// parked un-counts itself.
struct Parked<'a>(&'a watch::Sender<usize>);

impl<'a> Parked<'a> {
    fn new(parked: &'a watch::Sender<usize>) -> Self {
        parked.send_modify(|n| *n += 1);
        Self(parked)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// The fault injector of one [`MemoryAuthority`]. Tests only.
#[derive(Clone)]
pub struct Faults {
    authority: MemoryAuthority,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    pub(super) fn new(authority: MemoryAuthority) -> Self {
        Self { authority }
    }

    /// Force loss: grant `key` to `phantom` at the next epoch, whatever its
    /// state, ending the running tenure as `superseded`. The former holder
    /// finds out at its next renewal (`Lost`) or fenced write (`Fenced`).
    /// Returns the phantom's fence. The grant lasts as long as the former
    /// one would have (at least until now).
    pub fn steal(&self, key: &LeaseKey, phantom: &str) -> Fence {
        let now = self.authority.shared.clock.now();
        let mut state = self.authority.state();
        let expires_at = state
            .leases
            .get(key)
            .map_or(now, |row| row.expires_at.max(now));
        let (epoch, _, _) = state.grant(key, phantom, now, expires_at, None);
        Fence {
            key: key.clone(),
            epoch,
            holder: phantom.to_string(),
        }
    }

    /// Force expiry: the current grant of `key` expires now by this
    /// backend's clock (its tenure stays open until the next grant records
    /// it as `expired`, as in PostgreSQL). Returns the epoch that expired,
    /// or `None` if the lease was never granted.
    pub fn expire(&self, key: &LeaseKey) -> Option<Epoch> {
        let now = self.authority.shared.clock.now();
        let mut state = self.authority.state();
        let row = state.leases.get_mut(key)?;
        row.expires_at = row.expires_at.min(now);
        Some(row.epoch)
    }

    /// Hold renewals: every renew call parks until the returned guard is
    /// dropped, then proceeds and is judged by the clock at that moment.
    pub fn hold_renewals(&self) -> RenewalHold {
        self.switch(|s| s.holding += 1);
        RenewalHold {
            faults: self.clone(),
            undo: |s| s.holding -= 1,
        }
    }

    /// Fail renewals: every renew call returns `Unavailable` until the
    /// returned guard is dropped. Nothing is extended.
    pub fn fail_renewals(&self) -> RenewalHold {
        self.switch(|s| s.failing += 1);
        RenewalHold {
            faults: self.clone(),
            undo: |s| s.failing -= 1,
        }
    }

    /// Cut `holder` off: its acquire, renew, release and fenced writes fail
    /// with `Unavailable` until the guard is dropped. Other holders are
    /// unaffected, so a test can let one take over from a partitioned one.
    pub fn partition(&self, holder: &str) -> Partition {
        self.switch(|s| *s.partitioned.entry(holder.to_string()).or_default() += 1);
        Partition {
            faults: self.clone(),
            holder: holder.to_string(),
        }
    }

    /// How many renew calls are parked at a hold right now.
    pub fn parked_renewals(&self) -> usize {
        *self.authority.shared.faults.parked.borrow()
    }

    fn switch(&self, change: impl FnOnce(&mut Switches)) {
        self.authority.shared.faults.switches.send_modify(change);
    }
}

/// Renewals stay held (or failing) while this lives.
#[must_use = "the fault ends when the hold is dropped"]
pub struct RenewalHold {
    faults: Faults,
    undo: fn(&mut Switches),
}

impl RenewalHold {
    /// Wait until at least `count` renew calls are parked at a hold. A
    /// failing hold parks nothing: wait on a holding one.
    pub async fn parked(&self, count: usize) {
        let mut parked = self.faults.authority.shared.faults.parked.subscribe();
        // The sender lives in the authority, which `self` keeps alive.
        let _ = parked.wait_for(|&n| n >= count).await;
    }

    /// End the fault now (same as dropping the guard).
    pub fn release(self) {}
}

impl Drop for RenewalHold {
    fn drop(&mut self) {
        self.faults.switch(self.undo);
    }
}

/// A holder stays partitioned while this lives.
#[must_use = "the partition heals when the guard is dropped"]
pub struct Partition {
    faults: Faults,
    holder: String,
}

impl Drop for Partition {
    fn drop(&mut self) {
        let holder = self.holder.clone();
        self.faults.switch(move |s| {
            if let Some(n) = s.partitioned.get_mut(&holder) {
                *n -= 1;
                if *n == 0 {
                    s.partitioned.remove(&holder);
                }
            }
        });
    }
}
