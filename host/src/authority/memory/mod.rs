//! The in-memory lease backend (`url = "memory:"`, and the tests): **one
//! process only, nothing durable**.
//!
//! It keeps the PostgreSQL backend's semantics (L1–L6) inside one mutex so
//! that single-process development and tests behave like production. Two
//! replicas each using their own memory backend would both lead: this is
//! never a deployment option for more than one process (docs/design.md, point 7).
//!
//! The clock is [`tokio::time::Instant`], so tests pause and advance time
//! deterministically; times are shown as UTC by anchoring the monotonic
//! clock to the wall clock once, at construction. The wall clock is never
//! consulted again, so expiry cannot jump with it.
//!
//! [`Faults`] injects loss, expiry, held renewals and partitions, for tests.
//!
//! Crash detection: a holder's liveness session is this very process, so
//! it is alive whenever anyone can ask. A grant records the mode it was
//! asked for (shown by `observe`), but only release or expiry ever frees a
//! lease here; a crash ends every holder at once anyway.
//!
//! Must never: await while holding the state lock (a paused-time test would
//! deadlock), or call back into a store from inside [`FenceLock::while_fenced`].

mod faults;
mod hosts;
mod sharding;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tokio::time::Instant;

pub use faults::{Faults, Partition, RenewalHold};

use super::fence_check::{FenceLock, RowView, judge};
use super::wakes::ReleaseWakes;
use super::{
    AcquireRequest, Acquired, Authority, AuthorityError, CrashDetection, DatabaseIdentity,
    EndReason, Grant, LeaseRecord, MoveReason, PlacementMove, RecordedSharding, Renewed,
    ShardingRule, TenureRecord, validate_fence, validate_key, validate_request, validate_ttl,
};
use crate::fence::{Epoch, Fence, LeaseKey};
use crate::limits::MAX_HISTORY;
use crate::names::check_label;

/// The endpoint the memory backend reports: in every identity, history row
/// and error, so nobody mistakes it for a shared database.
pub const MEMORY_ENDPOINT: &str = "memory (single process, not durable)";

/// The single-process lease backend. Cheap to clone: clones share state.
#[derive(Clone)]
pub struct MemoryAuthority {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MemoryAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryAuthority")
            .field("endpoint", &MEMORY_ENDPOINT)
            .finish_non_exhaustive()
    }
}

struct Shared {
    state: Mutex<State>,
    clock: Clock,
    identity: DatabaseIdentity,
    wakes: ReleaseWakes,
    faults: faults::FaultState,
}

/// Monotonic time, shown as UTC.
struct Clock {
    origin: Instant,
    origin_utc: DateTime<Utc>,
}

impl Clock {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            origin_utc: Utc::now(),
        }
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn utc(&self, at: Instant) -> DateTime<Utc> {
        let since = at.saturating_duration_since(self.origin);
        TimeDelta::from_std(since)
            .ok()
            .and_then(|d| self.origin_utc.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

#[derive(Default)]
struct State {
    leases: BTreeMap<LeaseKey, LeaseRow>,
    /// Per lease, oldest first, at most [`MAX_HISTORY`] (older ones are
    /// dropped: unlike PostgreSQL, this backend must bound its memory).
    tenures: BTreeMap<LeaseKey, Vec<TenureRow>>,
    /// The host registry (placement's view of the live hosts).
    hosts: hosts::Registry,
    /// Controllers' recorded sharding ([`super::sharding`]).
    shardings: sharding::Records,
}

struct LeaseRow {
    holder: String,
    epoch: Epoch,
    acquired_at: Instant,
    expires_at: Instant,
    released: bool,
    /// The mode the grant asked for (display only, see the module doc).
    crash_detection: CrashDetection,
    /// Why placement handed this lease over, left by the release that
    /// marked it released, for the next grant (as `handover_reason` on
    /// PostgreSQL, migration 17).
    handover: Option<MoveReason>,
    /// The last placement move, as the grant that made it recorded it.
    last_move: Option<MoveRow>,
    /// The settled position a tenure last recorded (as `settled` on
    /// PostgreSQL, migration 18); kept across grants.
    settled: Option<u64>,
}

/// A lease's last placement move, on this backend's clock.
#[derive(Clone)]
struct MoveRow {
    reason: MoveReason,
    at: Instant,
    from: Option<String>,
    to: String,
}

impl LeaseRow {
    fn live(&self, now: Instant) -> bool {
        !self.released && self.expires_at > now
    }

    fn is_current(&self, fence: &Fence) -> bool {
        self.epoch == fence.epoch && self.holder == fence.holder
    }
}

struct TenureRow {
    epoch: Epoch,
    holder: String,
    acquired_at: Instant,
    ended: Option<(Instant, EndReason)>,
    writes: u64,
    last_write_at: Option<Instant>,
    outbound_requests: u64,
    /// The sending host's clock, as recorded (not this backend's).
    last_outbound_at: Option<DateTime<Utc>>,
}

impl State {
    fn tenure_mut(&mut self, key: &LeaseKey, epoch: Epoch) -> Option<&mut TenureRow> {
        self.tenures
            .get_mut(key)?
            .iter_mut()
            .rev()
            .find(|t| t.epoch == epoch)
    }

    /// Grant `key` to `holder` at the next epoch, ending every open tenure:
    /// `expired` if the row had expired (at its expiry time), otherwise
    /// `superseded` (now). The caller has checked that a grant is allowed,
    /// or is a fault forcing one. Records the lease's last move as
    /// PostgreSQL's grant does: when `holder` differs from the previous
    /// holder, the reason a handover left, else `moved`.
    fn grant(
        &mut self,
        key: &LeaseKey,
        holder: &str,
        now: Instant,
        expires_at: Instant,
        moved: Option<MoveReason>,
    ) -> (Epoch, Option<MoveReason>, Option<u64>) {
        let previous = self.leases.get(key);
        let epoch = Epoch(previous.map_or(0, |row| row.epoch.0) + 1);
        let made = match previous {
            Some(row) if row.holder != holder => row.handover.or(moved).map(|reason| MoveRow {
                reason,
                at: now,
                from: Some(row.holder.clone()),
                to: holder.to_string(),
            }),
            Some(_) => None,
            None => moved.map(|reason| MoveRow {
                reason,
                at: now,
                from: None,
                to: holder.to_string(),
            }),
        };
        let recorded = made.as_ref().map(|m| m.reason);
        let last_move = made.or_else(|| previous.and_then(|row| row.last_move.clone()));
        let settled = previous.and_then(|row| row.settled);
        let (end_reason, ended_at) = match previous {
            Some(row) if row.expires_at <= now => (EndReason::Expired, row.expires_at),
            _ => (EndReason::Superseded, now),
        };
        let tenures = self.tenures.entry(key.clone()).or_default();
        debug_assert!(
            tenures.iter().all(|t| t.epoch < epoch),
            "L1: a grant's epoch is above every earlier tenure's"
        );
        for open in tenures.iter_mut().filter(|t| t.ended.is_none()) {
            open.ended = Some((ended_at.max(open.acquired_at), end_reason));
        }
        if tenures.len() >= MAX_HISTORY {
            tenures.remove(0);
        }
        tenures.push(TenureRow {
            epoch,
            holder: holder.to_string(),
            acquired_at: now,
            ended: None,
            writes: 0,
            last_write_at: None,
            outbound_requests: 0,
            last_outbound_at: None,
        });
        self.leases.insert(
            key.clone(),
            LeaseRow {
                holder: holder.to_string(),
                epoch,
                acquired_at: now,
                expires_at,
                released: false,
                crash_detection: CrashDetection::Ttl,
                handover: None,
                last_move,
                settled,
            },
        );
        (epoch, recorded, settled)
    }
}

impl Default for MemoryAuthority {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryAuthority {
    /// A fresh, empty authority. Its identity has a random database id and
    /// system identifier 0, so a pinned PostgreSQL identity never matches it.
    pub fn new() -> Self {
        // No warning here: `leasehold check` makes one to ask a component
        // what it watches, whatever backend the config names; the service
        // warns when it chooses this backend.
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                clock: Clock::new(),
                identity: DatabaseIdentity {
                    database_id: uuid::Uuid::new_v4(),
                    system_identifier: 0,
                    database_oid: 0,
                    database_name: String::new(),
                    timeline: None,
                    in_recovery: false,
                    read_only: false,
                    endpoint: MEMORY_ENDPOINT.to_string(),
                },
                wakes: ReleaseWakes::new(),
                faults: faults::FaultState::new(),
            }),
        }
    }

    /// The fault injector of this authority (tests only; see [`Faults`]).
    pub fn faults(&self) -> Faults {
        Faults::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic inside a store's `while_fenced` closure poisons the lock
        // before any lease state is touched, so the state is still whole.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn utc(&self, at: Instant) -> DateTime<Utc> {
        self.shared.clock.utc(at)
    }

    /// An acquire, judged first under `sharding` when given
    /// ([`Authority::acquire_sharded`]): under the state lock, whether the
    /// lease is then granted or held.
    fn acquire_judged(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
        sharding: Option<&ShardingRule>,
    ) -> Result<Acquired, AuthorityError> {
        validate_request(request)?;
        self.shared.faults.check_partition(&request.holder)?;
        let now = self.shared.clock.now();
        let expires_at = self.expiry(&request.key, now, request.ttl)?;
        let mut state = self.state();
        if let Some(rule) = sharding {
            let epoch = state.leases.get(&request.key).map(|row| row.epoch);
            state.shardings.judge_or_record(
                &request.key,
                epoch,
                rule,
                &request.holder,
                self.utc(now),
            )?;
        }
        if let Some(row) = state.leases.get(&request.key)
            && row.live(now)
        {
            return Ok(Acquired::Held {
                holder: row.holder.clone(),
                epoch: row.epoch,
                expires_at: self.utc(row.expires_at),
            });
        }
        let (epoch, moved, settled) =
            state.grant(&request.key, &request.holder, now, expires_at, moved);
        if let Some(row) = state.leases.get_mut(&request.key) {
            row.crash_detection = detection;
        }
        Ok(Acquired::Granted(Grant {
            fence: Fence {
                key: request.key.clone(),
                epoch,
                holder: request.holder.clone(),
            },
            acquired_at: self.utc(now),
            expires_at: self.utc(expires_at),
            moved,
            settled,
        }))
    }

    fn expiry(
        &self,
        key: &LeaseKey,
        now: Instant,
        ttl: Duration,
    ) -> Result<Instant, AuthorityError> {
        now.checked_add(ttl).ok_or_else(|| AuthorityError::Invalid {
            key: key.clone(),
            reason: format!("ttl {} is too large", humantime::format_duration(ttl)),
        })
    }
}

#[async_trait]
impl Authority for MemoryAuthority {
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
        Ok(self.shared.identity.clone())
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError> {
        self.acquire_detected(request, CrashDetection::Ttl).await
    }

    async fn acquire_detected(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
    ) -> Result<Acquired, AuthorityError> {
        self.acquire_placed(request, detection, None).await
    }

    async fn acquire_placed(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
    ) -> Result<Acquired, AuthorityError> {
        self.acquire_judged(request, detection, moved, None)
    }

    async fn acquire_sharded(
        &self,
        request: &AcquireRequest,
        detection: CrashDetection,
        moved: Option<MoveReason>,
        sharding: Option<&ShardingRule>,
    ) -> Result<Acquired, AuthorityError> {
        self.acquire_judged(request, detection, moved, sharding)
    }

    async fn shardings(&self, cluster: &str) -> Result<Vec<RecordedSharding>, AuthorityError> {
        check_label("cluster", cluster)?;
        Ok(self.state().shardings.of(cluster))
    }

    async fn reshard(
        &self,
        cluster: &str,
        controller: &str,
        next: Option<&ShardingRule>,
        by: &str,
    ) -> Result<Option<RecordedSharding>, AuthorityError> {
        super::sharding::validate_reshard(cluster, controller, next)?;
        let now = self.shared.clock.now();
        let at = self.utc(now);
        let mut state = self.state();
        let State {
            leases, shardings, ..
        } = &mut *state;
        shardings.reshard(cluster, controller, next, by, at, |lease| {
            leases
                .get(&LeaseKey::new(cluster, lease))
                .filter(|row| row.live(now))
                .map(|row| (row.holder.clone(), row.epoch))
        })
    }

    async fn renew(&self, fences: &[Fence], ttl: Duration) -> Result<Vec<Renewed>, AuthorityError> {
        self.renew_settled(fences, &[], ttl).await
    }

    async fn renew_settled(
        &self,
        fences: &[Fence],
        settled: &[Option<u64>],
        ttl: Duration,
    ) -> Result<Vec<Renewed>, AuthorityError> {
        let Some(first) = fences.first() else {
            return Ok(Vec::new());
        };
        for fence in fences {
            validate_fence(fence)?;
        }
        validate_ttl(&first.key, ttl)?;
        // Held or failed renewals stop here, before the clock is read: a
        // renewal released late is judged at the time it reaches the state,
        // like a delayed round trip to a database.
        self.shared.faults.renew_gate(fences).await?;
        let now = self.shared.clock.now();
        let mut state = self.state();
        let mut results = Vec::with_capacity(fences.len());
        for (i, fence) in fences.iter().enumerate() {
            let expires_at = self.expiry(&fence.key, now, ttl)?;
            let result = match state.leases.get_mut(&fence.key) {
                Some(row) if row.is_current(fence) && row.live(now) => {
                    debug_assert!(!row.released, "renew never extends a released tenure");
                    row.expires_at = expires_at;
                    if let Some(position) = settled.get(i).copied().flatten() {
                        row.settled = Some(position);
                    }
                    Renewed::Extended {
                        expires_at: self.utc(expires_at),
                    }
                }
                _ => Renewed::Lost,
            };
            results.push(result);
        }
        Ok(results)
    }

    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError> {
        self.release_placed(fence, reason, None).await
    }

    async fn release_placed(
        &self,
        fence: &Fence,
        reason: EndReason,
        moved: Option<MoveReason>,
    ) -> Result<(), AuthorityError> {
        self.release_settled(fence, reason, moved, None).await
    }

    async fn release_settled(
        &self,
        fence: &Fence,
        reason: EndReason,
        moved: Option<MoveReason>,
        settled: Option<u64>,
    ) -> Result<(), AuthorityError> {
        validate_fence(fence)?;
        self.shared.faults.check_partition(&fence.holder)?;
        let now = self.shared.clock.now();
        let released = {
            let mut state = self.state();
            // Mark released only while this fence is still the current
            // grant: a stale holder must never release its successor.
            let released = match state.leases.get_mut(&fence.key) {
                Some(row) if row.is_current(fence) && !row.released => {
                    row.released = true;
                    row.handover = moved;
                    if settled.is_some() {
                        row.settled = settled;
                    }
                    true
                }
                _ => false,
            };
            if let Some(tenure) = state.tenure_mut(&fence.key, fence.epoch)
                && tenure.ended.is_none()
                && tenure.holder == fence.holder
            {
                tenure.ended = Some((now, reason));
            }
            released
        };
        if released {
            self.shared.wakes.wake(&fence.key.cluster);
        }
        Ok(())
    }

    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
        check_label("cluster", cluster)?;
        let now = self.shared.clock.now();
        let state = self.state();
        Ok(state
            .leases
            .iter()
            .filter(|(key, _)| key.cluster == cluster)
            .map(|(key, row)| LeaseRecord {
                name: key.name.clone(),
                holder: row.holder.clone(),
                epoch: row.epoch,
                acquired_at: self.utc(row.acquired_at),
                expires_at: self.utc(row.expires_at),
                released: row.released,
                active: row.live(now),
                crash_detection: row.crash_detection,
                holder_session: None,
                last_move: row.last_move.as_ref().map(|m| PlacementMove {
                    reason: m.reason,
                    at: self.utc(m.at),
                    from: m.from.clone(),
                    to: m.to.clone(),
                }),
            })
            .collect())
    }

    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        validate_key(key)?;
        let state = self.state();
        let Some(tenures) = state.tenures.get(key) else {
            return Ok(Vec::new());
        };
        Ok(tenures
            .iter()
            .rev()
            .filter(|t| before.is_none_or(|b| t.epoch < b))
            .take(limit.min(MAX_HISTORY))
            .map(|t| TenureRecord {
                epoch: t.epoch,
                holder: t.holder.clone(),
                endpoint: MEMORY_ENDPOINT.to_string(),
                acquired_at: self.utc(t.acquired_at),
                ended_at: t.ended.map(|(at, _)| self.utc(at)),
                end_reason: t.ended.map(|(_, reason)| reason),
                writes: t.writes,
                last_write_at: t.last_write_at.map(|at| self.utc(at)),
                outbound_requests: t.outbound_requests,
                last_outbound_at: t.last_outbound_at,
            })
            .collect())
    }

    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<DateTime<Utc>>,
    ) -> Result<(), AuthorityError> {
        validate_fence(fence)?;
        self.shared.faults.check_partition(&fence.holder)?;
        let mut state = self.state();
        if let Some(tenure) = state.tenure_mut(&fence.key, fence.epoch)
            && tenure.holder == fence.holder
        {
            tenure.outbound_requests = tenure.outbound_requests.max(requests);
            tenure.last_outbound_at = tenure.last_outbound_at.max(last_at);
        }
        Ok(())
    }

    fn released(&self, cluster: &str) -> watch::Receiver<u64> {
        self.shared.wakes.subscribe(cluster)
    }
}

impl FenceLock for MemoryAuthority {
    fn while_fenced(
        &self,
        fence: &Fence,
        write: &mut dyn FnMut() -> bool,
    ) -> Result<(), AuthorityError> {
        self.shared.faults.check_partition(&fence.holder)?;
        let now = self.shared.clock.now();
        // The state lock is held across `write`: no grant, renewal or
        // release can interleave, which is the memory form of L4's lock
        // on the tenure row.
        let mut state = self.state();
        let view = state.leases.get(&fence.key).map(|row| RowView {
            holder: &row.holder,
            epoch: row.epoch.0,
            released: row.released,
            live: row.expires_at > now,
        });
        judge(fence, view)?;
        if write()
            && let Some(tenure) = state.tenure_mut(&fence.key, fence.epoch)
        {
            tenure.writes += 1;
            tenure.last_write_at = Some(now);
        }
        Ok(())
    }
}
