//! One supervisor per controller: acquire -> run the tenure (renew, run the
//! guest) -> on loss hard-abort -> record -> back off -> acquire again.
//!
//! Owns: the lease cycle of one controller on this replica, the
//! self-fencing deadline (L3), guest restarts inside a tenure (G4) and the
//! graceful release on shutdown (L5). A tenure is an explicit state
//! machine: `Machine` decides (one handler per event, each returning the
//! next `Phase`; its doc lists every transition against L3 and L5) and
//! `Tenure` carries the decisions out.
//!
//! Crash detection (`crash_detection`, [`CrashDetection`]): under
//! `session` (the default) a grant records this host's liveness session, a
//! standby also wakes when the backend finds the holder's liveness session
//! gone ([`Authority::dead_holder`]), and a tenure ends the moment this
//! host's own liveness (claim) session ends, or once the gate shows a
//! later session than the one it was granted under; its guest's outbound
//! requests refuse once that session has not answered for the liveness
//! budget ([`Authority::liveness`], L8). A `ttl` tenure does not rest on
//! the liveness session (no standby takes it over before it expires), so
//! a claim session that ends leaves it running while its renewals succeed.
//!
//! Must never: acquire before the gate ([`identity`]) passed — the
//! database identity verified, the database accepting writes, this host's
//! holder name claimed; let a guest run past the renew deadline, or into a
//! liveness session other than its tenure's; write to the store itself.

mod backoff;
pub mod identity;
pub mod placement;
mod queue;
mod renewer;
mod settled;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use backoff::Backoff;
pub use identity::IdentityCheck;
pub use queue::WorkQueue;
pub use renewer::{Registration, Renewer};
pub use settled::Settled;
pub use worker::{reconcile_outcome, reconcile_span};

use crate::authority::{
    AcquireRequest, Acquired, Authority, AuthorityError, CrashDetection, EndReason, Grant,
    LeaseTiming, Renewed, ShardingRule,
};
use crate::fence::{Fence, LeaseKey};
use crate::notify::{BEAT_EVERY, Heartbeat, Pulse};
use crate::outbound::TenureOutbound;
use crate::runtime::{CompiledController, GuestError, Revocation};
use crate::status::{ControllerState, ControllerStatus};
use crate::store::Store;
use crate::telemetry::{self, LeaseStep};
use tracing::Instrument;
use worker::{WorkerContext, WorkerExit};

/// How one supervisor behaves.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The cluster.
    pub cluster: String,
    /// This replica's identity.
    pub holder: String,
    /// Lease timing.
    pub timing: LeaseTiming,
    /// First retry delay (acquire errors, guest restarts, key failures).
    pub backoff_min: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
    /// Work queue bound.
    pub max_queue: usize,
    /// How long a running reconcile may finish on shutdown.
    pub shutdown_grace: Duration,
}

/// Everything a supervisor talks to.
pub struct Supervisor {
    config: SupervisorConfig,
    authority: Arc<dyn Authority>,
    renewer: Renewer,
    store: Arc<dyn Store>,
    controller: CompiledController,
    status: Arc<ControllerStatus>,
    identity: watch::Receiver<IdentityCheck>,
    shutdown: watch::Receiver<bool>,
    /// How this controller's tenures may be taken over if this host dies.
    crash_detection: CrashDetection,
    /// Where each tenure's loop beats, for the service manager's watchdog
    /// ([`crate::notify`]); none unless set.
    heartbeat: Option<Heartbeat>,
    /// This controller's seat in the host's lease placement, while
    /// [`Supervisor::run`] runs and the renewer carries a placement.
    seat: Option<placement::Seat>,
    /// The sharding this host runs the lease under, judged against the
    /// database's record with every acquire
    /// ([`Authority::acquire_sharded`]); `Err`: it could not be told (the
    /// guest could not be described), so nothing is acquired. `None`: not
    /// judged.
    sharding: Option<Result<ShardingRule, String>>,
}

/// How a tenure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TenureEnd {
    /// Lost; the reason names why (a metric label).
    Lost(&'static str),
    /// Released on shutdown.
    Released,
}

/// A running guest: its task and its abort switch.
struct RunningGuest {
    task: JoinHandle<WorkerExit>,
    revocation: Revocation,
}

impl Drop for RunningGuest {
    /// A guest never outlives its supervisor: when the supervisor's task
    /// is itself aborted (a controller that did not stop in time, see
    /// `service::controllers`), dropping its future drops this, which
    /// revokes the fence and aborts the guest's task instead of detaching
    /// it. A finished task is left alone (no spurious epoch bump).
    fn drop(&mut self) {
        if !self.task.is_finished() {
            self.revocation.revoke();
            self.task.abort();
        }
    }
}

/// Proof that a tenure's guest has stopped: made only by
/// [`Supervisor::abort`] once the guest's task ended, or by
/// [`Supervisor::run_tenure`] when no guest was running. Recording the end
/// of a tenure (the release) takes one, so it cannot come first (L5).
struct GuestStopped(());

impl Supervisor {
    /// A supervisor for `controller`, reporting into `status`, gated by
    /// `identity`, stopping when `shutdown` becomes true. Its leases are
    /// renewed by the host's shared `renewer`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: SupervisorConfig,
        authority: Arc<dyn Authority>,
        renewer: Renewer,
        store: Arc<dyn Store>,
        controller: CompiledController,
        status: Arc<ControllerStatus>,
        identity: watch::Receiver<IdentityCheck>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            config,
            authority,
            renewer,
            store,
            controller,
            status,
            identity,
            shutdown,
            crash_detection: CrashDetection::default(),
            heartbeat: None,
            seat: None,
            sharding: None,
        }
    }

    /// This supervisor with its lease judged under `sharding` at every
    /// acquire (see [`Supervisor::sharding`]'s field).
    pub fn with_sharding(mut self, sharding: Result<ShardingRule, String>) -> Self {
        self.sharding = Some(sharding);
        self
    }

    /// This supervisor with its tenures' loops registered with
    /// `heartbeat`: each beats at least every
    /// [`crate::notify::BEAT_EVERY`] while the tenure runs.
    pub fn with_heartbeat(mut self, heartbeat: Heartbeat) -> Self {
        self.heartbeat = Some(heartbeat);
        self
    }

    /// This supervisor with crash detection `mode` (the controller's
    /// `crash_detection`; [`CrashDetection::Session`] unless set).
    pub fn with_crash_detection(mut self, mode: CrashDetection) -> Self {
        self.crash_detection = mode;
        self
    }

    fn name(&self) -> &str {
        self.controller.name()
    }

    fn key(&self) -> LeaseKey {
        LeaseKey::new(&self.config.cluster, self.name())
    }

    fn stopping(&self) -> bool {
        // A dropped sender counts as a stop request.
        *self.shutdown.borrow() || self.shutdown.has_changed().is_err()
    }

    /// Run until shutdown. Every held lease is released before this returns.
    pub async fn run(mut self) {
        let mut backoff = Backoff::new(self.config.backoff_min, self.config.backoff_max);
        let mut released = self.authority.released(&self.config.cluster);
        // Standbys poll at the renew interval (with jitter) besides waking
        // on release notifications: a holder that died silently is only
        // noticed once its grant expires.
        let mut standby_poll = Backoff::new(
            self.config.timing.renew_interval,
            self.config.timing.renew_interval,
        );
        // While standing by under crash detection `session`: woken when the
        // holder's liveness session is found gone. Dropped otherwise, so a
        // host looks for dead holders only while it waits for one.
        let mut dead_holder: Option<watch::Receiver<u64>> = None;
        self.seat = self
            .renewer
            .placement()
            .map(|placement| placement.join(self.controller.name(), self.config.timing));
        while !self.stopping() {
            // Read once and marked seen: a verdict published from here on
            // wakes the tenure (or this loop) through `changed`. The claim
            // session it names is the one an acquire now is made under.
            let (refusal, claim_session) = {
                let verdict = self.identity.borrow_and_update();
                (verdict.refusal(), verdict.claim_session())
            };
            if let Some(reason) = refusal {
                dead_holder = None;
                self.status.set(ControllerState::Failing { reason });
                tokio::select! {
                    changed = self.identity.changed() => {
                        if changed.is_err() {
                            // The identity check is gone: the service is
                            // shutting down.
                            break;
                        }
                    }
                    changed = self.shutdown.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
                continue;
            }
            // Placement: ask only while this host is below its fair share,
            // or no other live host is below its own (placement.rs).
            if let Some(seat) = &mut self.seat
                && !seat.may_acquire()
            {
                if !matches!(self.status.get(), ControllerState::Standby { .. }) {
                    self.status.set(ControllerState::Standby { holder: None });
                }
                let wait = standby_poll.next_delay();
                tokio::select! {
                    _ = seat.changed() => {}
                    Ok(()) = released.changed() => {}
                    _ = tokio::time::sleep(wait) => {}
                    changed = self.shutdown.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
                continue;
            }
            let sharding = match &self.sharding {
                Some(Err(reason)) => {
                    let reason = format!(
                        "controller unit {}: its sharding is unknown, so it leads nothing: {reason}",
                        self.name()
                    );
                    self.status.set(ControllerState::Failing { reason });
                    self.sleep_or_stop(backoff.next_delay()).await;
                    continue;
                }
                Some(Ok(rule)) => Some(rule.clone()),
                None => None,
            };
            let request = AcquireRequest {
                key: self.key(),
                holder: self.config.holder.clone(),
                ttl: self.config.timing.ttl,
            };
            let sent = Instant::now();
            released.borrow_and_update();
            if let Some(dead) = &mut dead_holder {
                dead.borrow_and_update();
            }
            // Why placement allowed this acquire beyond the share, for the
            // grant to record with the lease's last move.
            let moved = self.seat.as_ref().and_then(placement::Seat::move_reason);
            match self
                .authority
                .acquire_sharded(&request, self.crash_detection, moved, sharding.as_ref())
                .await
            {
                Ok(Acquired::Granted(grant)) => {
                    dead_holder = None;
                    backoff.reset();
                    if let Some(seat) = &mut self.seat {
                        seat.granted();
                    }
                    // A move is counted where it is made: by the grant
                    // that recorded it.
                    if let Some(reason) = grant.moved {
                        self.status.placement_moves.count(reason);
                    }
                    self.status
                        .metrics
                        .acquisitions
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    telemetry::acquired(
                        self.name(),
                        grant.fence.epoch.0,
                        &self.config.holder,
                        sent.elapsed(),
                    );
                    let sent = self.confirm_late_grant(&grant, sent).await;
                    let end = self.run_tenure(grant, sent, claim_session).await;
                    if let Some(seat) = &self.seat {
                        seat.ended();
                    }
                    if let TenureEnd::Lost(_) = end {
                        // Give a successor the chance to take over before we
                        // try again.
                        self.sleep_or_stop(backoff.next_delay()).await;
                    }
                }
                Ok(Acquired::Held { holder, .. }) => {
                    if let Some(seat) = &self.seat {
                        seat.not_granted();
                    }
                    self.status.set(ControllerState::Standby {
                        holder: Some(holder),
                    });
                    if dead_holder.is_none() && self.crash_detection == CrashDetection::Session {
                        dead_holder = self.authority.dead_holder(&self.key());
                    }
                    let wait = standby_poll.next_delay();
                    tokio::select! {
                        // A closed release channel is only a lost wake-up
                        // source; the poll below still runs.
                        Ok(()) = released.changed() => {}
                        // The holder's liveness session is gone: try now.
                        Some(()) = async { dead_holder.as_mut()?.changed().await.ok() },
                            if dead_holder.is_some() => {}
                        _ = tokio::time::sleep(wait) => {}
                        changed = self.shutdown.changed() => {
                            if changed.is_err() {
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    dead_holder = None;
                    if let Some(seat) = &self.seat {
                        seat.not_granted();
                    }
                    let delay = backoff.next_delay();
                    if let AuthorityError::Sharding(refusal) = &e {
                        // Not a passing failure: this host's config or guest
                        // disagrees with the record every host leads by.
                        tracing::error!(
                            controller = refusal.controller,
                            lease = %refusal.key,
                            epoch = refusal.epoch.map(|e| e.0),
                            holder = self.config.holder,
                            error = %e,
                            retry_in = ?delay,
                            "refusing to lead: the sharding recorded for the lease is not this host's"
                        );
                    } else {
                        tracing::warn!(controller = self.name(), holder = self.config.holder, error = %e, retry_in = ?delay, "cannot acquire the lease");
                    }
                    self.status.set(ControllerState::Failing {
                        reason: e.to_string(),
                    });
                    self.sleep_or_stop(delay).await;
                }
            }
        }
        self.status.set(ControllerState::Stopped);
    }

    async fn sleep_or_stop(&mut self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.shutdown.wait_for(|stop| *stop) => {}
        }
    }

    fn start_guest(
        &self,
        fence: &Fence,
        stop: &watch::Receiver<bool>,
        valid_until: Instant,
        tenure_outbound: Arc<TenureOutbound>,
        settled: Arc<Settled>,
        lapse: Option<Arc<dyn crate::runtime::Lapse>>,
    ) -> RunningGuest {
        let revocation = self.controller.revocation();
        revocation.set_valid_until(valid_until.into_std());
        if let Some(lapse) = lapse {
            revocation.set_lapse(lapse);
        }
        let controller = self.controller.clone();
        let store = self.store.clone();
        let counters = self.status.metrics.commits.clone();
        let ctx = WorkerContext {
            cluster: self.config.cluster.clone(),
            store: self.store.clone(),
            status: self.status.clone(),
            max_queue: self.config.max_queue,
            backoff_min: self.config.backoff_min,
            backoff_max: self.config.backoff_max,
            stop: stop.clone(),
            settled,
            shard: self.controller.shard().map(crate::shard::Sharding::by_name),
        };
        let fence = fence.clone();
        let guest_revocation = revocation.clone();
        let task = tokio::spawn(async move {
            match controller
                .instantiate_with(fence, store, counters, guest_revocation, tenure_outbound)
                .await
            {
                Ok(guest) => worker::run(guest, ctx).await,
                Err(e) => WorkerExit::Guest(e),
            }
        });
        RunningGuest { task, revocation }
    }

    /// Hard abort (G3): revoke the fence (host calls fail at once and
    /// CPU-bound code traps at its next epoch check), drop the task's future
    /// (a guest blocked in a host call is cancelled with its database
    /// work), and wait until the Store is gone.
    async fn abort(&self, mut guest: RunningGuest, reason: &'static str) -> GuestStopped {
        guest.revocation.revoke();
        guest.task.abort();
        let _ = (&mut guest.task).await;
        debug_assert!(
            guest.task.is_finished(),
            "L5: the guest's task ended before the release"
        );
        self.status.metrics.aborted(reason);
        GuestStopped(())
    }

    /// A grant that arrived after the renew deadline counted from its
    /// acquire's send (the acquire waited on the lease row, e.g. behind a
    /// stalled transaction of the previous holder) would count as lost at
    /// once and waste its epoch. No guest has run yet, so renew it once and
    /// count from that renewal's send instead (L3 holds as for any
    /// renewal); if the renewal fails, keep the acquire's send time and let
    /// the tenure end as lost.
    async fn confirm_late_grant(&self, grant: &Grant, acquire_sent: Instant) -> Instant {
        let timing = self.config.timing;
        if acquire_sent.elapsed() < timing.renew_deadline {
            return acquire_sent;
        }
        let sent = Instant::now();
        match self
            .authority
            .renew(std::slice::from_ref(&grant.fence), timing.ttl)
            .await
            .as_deref()
        {
            Ok([Renewed::Extended { .. }]) => sent,
            _ => acquire_sent,
        }
    }

    /// A lease's first tenure (no settled position on record): record the
    /// head the store's feed shows as the lease's position, before any
    /// guest starts, so a successor starts from there even if this tenure
    /// dies before its first renewal. One renewal, bounded by the renew
    /// interval; `None` if it did not extend the lease (the worker then
    /// starts at its own head, and the first renewal records it).
    async fn record_first_position(&self, fence: &Fence) -> Option<u64> {
        let head = *self.store.watch(&self.config.cluster).borrow();
        let timing = self.config.timing;
        let renewed = tokio::time::timeout(
            timing.renew_interval,
            self.authority
                .renew_settled(std::slice::from_ref(fence), &[Some(head)], timing.ttl),
        )
        .await;
        match renewed {
            Ok(Ok(outcomes)) if matches!(outcomes[..], [Renewed::Extended { .. }]) => Some(head),
            _ => None,
        }
    }

    /// Run one tenure (see [`Tenure`] for its states and transitions),
    /// then stop its guest and only then record its end (L5).
    /// `claim_session`: the liveness session the acquire was made under
    /// (from the gate), if the gate names one.
    async fn run_tenure(
        &mut self,
        grant: Grant,
        acquire_sent: Instant,
        claim_session: Option<u64>,
    ) -> TenureEnd {
        let fence = grant.fence;
        let settled = Arc::new(match grant.settled {
            Some(position) => Settled::new(Some(position), true),
            None => Settled::new(self.record_first_position(&fence).await, false),
        });
        let mut tenure = Tenure::begin(
            self,
            fence.clone(),
            acquire_sent,
            claim_session,
            settled.clone(),
        );
        let end = tenure.run().await;
        // A tenure placement handed over records that with its release.
        let moved = tenure
            .handing_over
            .then_some(placement::MoveReason::OverShare);
        // The loss is known from here (the machine decided it just now);
        // the abort latency runs until the guest's Store is gone.
        let detected = Instant::now();
        let (guest, outbound) = tenure.finish();
        let lost = match end {
            TenureEnd::Lost(why) => {
                telemetry::lease_span(LeaseStep::Lost, self.name(), fence.epoch.0, why)
            }
            TenureEnd::Released => tracing::Span::none(),
        };
        async {
            let stopped = match guest {
                Some(running) => {
                    let reason = match end {
                        TenureEnd::Lost(_) => "lease_lost",
                        TenureEnd::Released => "shutdown",
                    };
                    let span =
                        telemetry::lease_span(LeaseStep::Abort, self.name(), fence.epoch.0, reason);
                    let stopped = self.abort(running, reason).instrument(span).await;
                    if let TenureEnd::Lost(_) = end {
                        self.status
                            .metrics
                            .abort_seconds
                            .observe(detected.elapsed());
                    }
                    stopped
                }
                None => GuestStopped(()),
            };
            self.record_end(&fence, end, moved, &outbound, settled.get(), stopped)
                .await;
        }
        .instrument(lost)
        .await;
        end
    }

    /// Count and report how the tenure ended, then record its outbound
    /// requests and its end and, if the row is still ours, release it so a
    /// standby need not wait for the ttl. Takes the proof that the guest
    /// stopped: L5 orders the release after the guest, and this signature
    /// enforces it (and no request of the tenure can follow its tally).
    async fn record_end(
        &self,
        fence: &Fence,
        end: TenureEnd,
        moved: Option<placement::MoveReason>,
        outbound: &TenureOutbound,
        settled: Option<u64>,
        _stopped: GuestStopped,
    ) {
        let name = self.name();
        let epoch = fence.epoch.0;
        let holder = &fence.holder;
        let reason = match end {
            TenureEnd::Lost(why) => {
                self.status.metrics.lost(why);
                // Say so now, not after the release attempt below: that
                // may wait out TENURE_END_RECORD (a partition), and
                // meanwhile a successor may lead while this replica still
                // reported leading.
                self.status.set(ControllerState::Failing {
                    reason: format!("lease lost at epoch {epoch}: {why}"),
                });
                EndReason::Lost
            }
            TenureEnd::Released => EndReason::Released,
        };
        // Only an orderly end hands the lease over.
        let moved = moved.filter(|_| end == TenureEnd::Released);
        // One bound for the whole end record, so a stop still fits in
        // `service::controllers::stop_bound`. The statistics come first, so
        // a tenure its holder released already shows them, but may take
        // only a share of the bound: the release matters more.
        let now = Instant::now();
        let deadline = now + crate::timeouts::TENURE_END_RECORD;
        let statistics_until = now + crate::timeouts::TENURE_END_RECORD / 3;
        record_outbound(
            self.authority.as_ref(),
            self.name(),
            fence,
            outbound,
            statistics_until,
        )
        .await;
        let release = tokio::time::timeout_at(
            deadline,
            self.authority
                .release_settled(fence, reason, moved, settled),
        )
        .await;
        match release {
            Ok(Ok(())) => tracing::info!(
                controller = name,
                epoch,
                holder,
                reason = reason.as_str(),
                "tenure ended"
            ),
            Ok(Err(e)) => {
                tracing::warn!(controller = name, epoch, holder, error = %e, "could not record the end of the tenure; it will expire")
            }
            Err(_) => tracing::warn!(
                controller = name,
                epoch,
                holder,
                "recording the end of the tenure timed out; it will expire"
            ),
        }
        if end == TenureEnd::Released {
            self.status.set(ControllerState::Stopped);
        }
    }
}

/// Write the tenure's outbound tally into its history row, best effort
/// and bounded by `until`: a statistic is never worth holding the release
/// up for. A tenure that sent nothing needs no write (the row says 0
/// already).
async fn record_outbound(
    authority: &dyn Authority,
    name: &str,
    fence: &Fence,
    outbound: &TenureOutbound,
    until: Instant,
) {
    let (requests, last) = outbound.tally();
    if requests == 0 && last.is_none() {
        return;
    }
    let last_at = last.map(chrono::DateTime::<chrono::Utc>::from);
    let recorded =
        tokio::time::timeout_at(until, authority.record_outbound(fence, requests, last_at)).await;
    let (epoch, holder) = (fence.epoch.0, &fence.holder);
    match recorded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(
            controller = name,
            epoch,
            holder,
            requests,
            error = %e,
            "could not record the tenure's outbound requests in its history"
        ),
        Err(_) => tracing::warn!(
            controller = name,
            epoch,
            holder,
            requests,
            "recording the tenure's outbound requests timed out; its history shows fewer"
        ),
    }
}

/// Where a tenure is; [`Machine`] documents the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Granted (or restart due): a guest is to start now, if the renew
    /// deadline has not passed.
    Starting,
    /// A guest runs.
    Running,
    /// The guest failed; a fresh one starts at `at`, inside the same
    /// tenure (G4).
    Restarting {
        /// When the fresh guest starts.
        at: Instant,
    },
    /// Stop requested: the running guest finishes its reconcile until
    /// `grace_until`.
    Stopping {
        /// When the reconcile is aborted anyway.
        grace_until: Instant,
    },
    /// Over. A guest still running is aborted, and only then is the end
    /// recorded (L5).
    Ended(TenureEnd),
}

/// A renewal outcome, as the tenure's decisions need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// Extended; the renewal was sent at `sent`.
    Extended {
        /// When the renewal was sent: L3 counts from here.
        sent: Instant,
    },
    /// Refused: the lease is no longer this fence's.
    Refused,
    /// The round trip failed; the deadline still bounds the tenure.
    Failed,
}

/// How a guest's task ended, as the tenure's decisions need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GuestEnd {
    /// It stopped taking work (it was asked to).
    Stopped,
    /// It saw `fenced`: the lease is no longer current.
    Fenced,
    /// It failed and was torn down (trap, deadline, memory, panic).
    Failed,
}

/// What [`Machine::advance`] decided before the next wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Advance {
    /// Nothing to do now.
    Wait,
    /// Start a guest now (the phase is now `Running`).
    StartGuest,
    /// The renew deadline has passed: the tenure ended as lost (L3).
    DeadlinePassed,
}

/// The decisions of one tenure, free of I/O so that each transition can
/// be checked (and tested) on its own; [`Tenure`] performs them.
///
/// The lease counts as this holder's until `valid_until`: the send time
/// of the last successful renewal (at first, of the acquire) plus
/// `renew_deadline` (L3). Transitions (every handler returns the next
/// phase; the deadline is checked first, before any guest starts):
///
/// | from | event | to |
/// |---|---|---|
/// | any but `Ended` | `valid_until` reached (deadline fired, or found passed before a start) | `Ended(Lost("renew_deadline"))` |
/// | any but `Ended` | renewal refused | `Ended(Lost("renew_refused"))` |
/// | any | renewal extended | same; `valid_until` = max(it, sent + deadline) |
/// | any | renewal failed, renewer gone | same |
/// | any but `Ended` | identity mismatch / holder name taken / liveness session ended or replaced | `Ended(Lost("identity_changed" / "holder_taken" / "claim_lost"))` |
/// | `Starting` | before `valid_until` | `Running` (a guest starts) |
/// | `Running` | guest failed (or stopped unasked) | `Restarting { at: now + backoff }` |
/// | `Running`, `Stopping` | guest fenced | `Ended(Lost("fenced"))` |
/// | `Restarting` | `at` reached | `Starting` |
/// | `Running` | stop requested | `Stopping { grace_until: now + grace }` |
/// | `Starting`, `Restarting` | stop requested | `Ended(Released)` |
/// | `Stopping` | guest stopped or failed | `Ended(Released)` |
/// | `Stopping` | grace over | `Ended(Released)` (the guest is aborted) |
///
/// After `Ended`, [`Supervisor::run_tenure`] aborts a guest that still
/// runs and waits for its task to end before it records the end and
/// releases the lease (L5).
#[derive(Debug, Clone)]
struct Machine {
    phase: Phase,
    valid_until: Instant,
    renew_deadline: Duration,
    shutdown_grace: Duration,
}

impl Machine {
    fn new(acquire_sent: Instant, renew_deadline: Duration, shutdown_grace: Duration) -> Self {
        Self {
            phase: Phase::Starting,
            valid_until: acquire_sent + renew_deadline,
            renew_deadline,
            shutdown_grace,
        }
    }

    fn ended(&self) -> bool {
        matches!(self.phase, Phase::Ended(_))
    }

    /// Before each wait: the deadline first (L3: no guest starts, or keeps
    /// running, once it passed), then a due start.
    fn advance(&mut self, now: Instant) -> Advance {
        if self.ended() {
            return Advance::Wait;
        }
        if now >= self.valid_until {
            self.phase = self.on_deadline();
            return Advance::DeadlinePassed;
        }
        if self.phase == Phase::Starting {
            debug_assert!(
                now < self.valid_until,
                "L3: a guest starts only before the renew deadline"
            );
            self.phase = Phase::Running;
            return Advance::StartGuest;
        }
        Advance::Wait
    }

    /// The renew deadline fired.
    fn on_deadline(&self) -> Phase {
        match self.phase {
            Phase::Ended(end) => Phase::Ended(end),
            _ => Phase::Ended(TenureEnd::Lost("renew_deadline")),
        }
    }

    /// A renewal outcome arrived.
    fn on_renewal(&mut self, renewal: Renewal, now: Instant) -> Phase {
        match renewal {
            Renewal::Extended { sent } => {
                // Counted from the send, never from the answer (L3): the
                // deadline can only reach the answer's time + deadline.
                self.valid_until = self.valid_until.max(sent + self.renew_deadline);
                debug_assert!(
                    sent <= now && self.valid_until <= now + self.renew_deadline,
                    "L3: the deadline counts from a renewal already sent"
                );
                self.phase
            }
            Renewal::Refused if !self.ended() => Phase::Ended(TenureEnd::Lost("renew_refused")),
            Renewal::Refused | Renewal::Failed => self.phase,
        }
    }

    /// The gate's verdict changed; `ends` names why it ends tenures, if
    /// it does.
    fn on_identity(&self, ends: Option<&'static str>) -> Phase {
        match ends {
            Some(why) if !self.ended() => Phase::Ended(TenureEnd::Lost(why)),
            _ => self.phase,
        }
    }

    /// The guest's task ended; a fresh guest would start at `restart_at`.
    fn on_guest_exit(&self, end: GuestEnd, restart_at: Instant) -> Phase {
        match (self.phase, end) {
            (Phase::Running | Phase::Stopping { .. }, GuestEnd::Fenced) => {
                Phase::Ended(TenureEnd::Lost("fenced"))
            }
            // Nothing is left to wait for: the guest is gone.
            (Phase::Stopping { .. }, GuestEnd::Stopped | GuestEnd::Failed) => {
                Phase::Ended(TenureEnd::Released)
            }
            // A worker stops only when asked, which makes the phase
            // `Stopping`; were it to stop unasked, the lease is still
            // held, so it is restarted like a failed one.
            (Phase::Running, GuestEnd::Failed | GuestEnd::Stopped) => {
                Phase::Restarting { at: restart_at }
            }
            // No guest runs in the other phases.
            (phase, _) => phase,
        }
    }

    /// The restart timer fired.
    fn on_restart_due(&self, now: Instant) -> Phase {
        match self.phase {
            Phase::Restarting { at } if at <= now => Phase::Starting,
            phase => phase,
        }
    }

    /// Stop was requested (shutdown, or the controller is removed).
    fn on_stop_requested(&self, now: Instant) -> Phase {
        match self.phase {
            Phase::Running => Phase::Stopping {
                grace_until: now + self.shutdown_grace,
            },
            Phase::Starting | Phase::Restarting { .. } => Phase::Ended(TenureEnd::Released),
            phase => phase,
        }
    }

    /// The shutdown grace is over: the reconcile is aborted.
    fn on_grace_over(&self) -> Phase {
        match self.phase {
            Phase::Stopping { .. } => Phase::Ended(TenureEnd::Released),
            phase => phase,
        }
    }
}

/// What woke the tenure.
enum Event {
    DeadlineFired,
    /// `None`: the renewer stopped (shutdown); the deadline still bounds
    /// the tenure.
    Renewal(Option<renewer::Outcome>),
    /// `open` is false once the gate's channel closed (shutdown).
    IdentityChanged {
        open: bool,
    },
    GuestExited(Result<WorkerExit, tokio::task::JoinError>),
    RestartDue,
    /// `open` is false once the stop channel's sender is gone, which
    /// also means: stop.
    StopRequested {
        open: bool,
    },
    GraceOver,
    /// Placement asks for the lease to be handed over (orderly release,
    /// as on a stop request, but the supervisor stands by afterwards).
    HandoverRequested,
    /// Nothing happened for [`BEAT_EVERY`]: the loop turns to beat.
    Beat,
}

/// One tenure in progress: the [`Machine`]'s decisions carried out (the
/// guest started and stopped, renewals followed, the gate and the stop
/// request watched), with the logs and metrics of each event.
struct Tenure<'s> {
    sup: &'s mut Supervisor,
    fence: Fence,
    machine: Machine,
    /// Present exactly while the phase is `Running` or `Stopping` (and
    /// after `Ended`, until [`Supervisor::run_tenure`] aborts it).
    guest: Option<RunningGuest>,
    renewals: Registration,
    /// False once the renewer stopped: without this guard a closed
    /// channel would be ready on every poll and starve the other events.
    renewer_open: bool,
    /// False once the gate's channel closed (same reason).
    identity_open: bool,
    /// False once the stop channel's sender is gone (same reason).
    shutdown_open: bool,
    /// Tells the worker to stop taking work.
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
    restarts: Backoff,
    /// The tenure's outbound requests: one tally for every guest the
    /// tenure (re)starts, written to its history when it ends.
    outbound: Arc<TenureOutbound>,
    /// The liveness session the tenure was granted under, if the gate
    /// named one: a gate naming another ends the tenure.
    claim_session: Option<u64>,
    /// The tenure's settled position (see [`settled`]): every guest it
    /// starts reads the change stream from it, and its renewals record it.
    settled: Arc<Settled>,
    /// This tenure's loop in the host's heartbeat, if there is one; it
    /// beats on every turn and unregisters when the tenure ends.
    pulse: Option<Pulse>,
    /// Placement asked for the lease to be handed over; the tenure is
    /// ending as on a stop request.
    handing_over: bool,
    /// Under crash detection `session`, the host's liveness as of the
    /// claim session the tenure was granted under: its guests' outbound
    /// requests refuse once it lapsed (L8).
    lapse: Option<Arc<dyn crate::runtime::Lapse>>,
}

impl<'s> Tenure<'s> {
    fn begin(
        sup: &'s mut Supervisor,
        fence: Fence,
        acquire_sent: Instant,
        claim_session: Option<u64>,
        settled: Arc<Settled>,
    ) -> Self {
        let timing = sup.config.timing;
        tracing::info!(
            controller = sup.name(),
            epoch = fence.epoch.0,
            holder = fence.holder,
            "lease acquired; leading"
        );
        sup.status.set(ControllerState::Leading {
            epoch: fence.epoch.0,
            problem: None,
        });
        let renewals = sup.renewer.register_settled(
            fence.clone(),
            timing.ttl,
            timing.renew_interval,
            settled.clone(),
        );
        let (stop_tx, stop_rx) = watch::channel(false);
        let restarts = Backoff::new(sup.config.backoff_min, sup.config.backoff_max);
        let machine = Machine::new(
            acquire_sent,
            timing.renew_deadline,
            sup.config.shutdown_grace,
        );
        let lapse = match (sup.crash_detection, claim_session) {
            (CrashDetection::Session, Some(generation)) => sup
                .authority
                .liveness(&sup.config.cluster, &sup.config.holder)
                .map(|liveness| {
                    Arc::new(identity::SessionLapse {
                        liveness,
                        generation,
                    }) as Arc<dyn crate::runtime::Lapse>
                }),
            _ => None,
        };
        let pulse = sup.heartbeat.as_ref().map(|heartbeat| {
            heartbeat.register(format!(
                "tenure {} epoch {}",
                sup.controller.name(),
                fence.epoch.0
            ))
        });
        Self {
            sup,
            fence,
            machine,
            guest: None,
            renewals,
            renewer_open: true,
            identity_open: true,
            shutdown_open: true,
            stop_tx,
            stop_rx,
            restarts,
            outbound: Arc::default(),
            claim_session,
            settled,
            pulse,
            handing_over: false,
            lapse,
        }
    }

    /// Drive the machine until the tenure ended.
    async fn run(&mut self) -> TenureEnd {
        // A verdict published while the lease was being acquired counts
        // before anything starts. Read once (and marked seen), so the
        // decision and the log below see the same verdict.
        let ends = self.read_gate();
        self.machine.phase = self.machine.on_identity(ends);
        loop {
            if let Some(pulse) = &self.pulse {
                pulse.beat();
            }
            match self.machine.advance(Instant::now()) {
                Advance::StartGuest => {
                    self.guest = Some(self.sup.start_guest(
                        &self.fence,
                        &self.stop_rx,
                        self.machine.valid_until,
                        self.outbound.clone(),
                        self.settled.clone(),
                        self.lapse.clone(),
                    ));
                }
                Advance::DeadlinePassed => {
                    tracing::error!(
                        controller = self.sup.name(),
                        epoch = self.fence.epoch.0,
                        holder = self.fence.holder,
                        "renew deadline passed; the lease counts as lost"
                    );
                }
                Advance::Wait => {}
            }
            if let Phase::Ended(end) = self.machine.phase {
                return end;
            }
            // The guest's effects that leave the process (outbound HTTP)
            // refuse on this instant itself, should the deadline's timer
            // below fire late.
            if let Some(guest) = &self.guest {
                guest
                    .revocation
                    .set_valid_until(self.machine.valid_until.into_std());
            }
            debug_assert_eq!(
                self.guest.is_some(),
                matches!(self.machine.phase, Phase::Running | Phase::Stopping { .. }),
                "a guest runs exactly in the Running and Stopping phases"
            );
            let event = self.next_event().await;
            self.machine.phase = self.handle(event);
        }
    }

    /// The guest still running after the tenure ended, if any, for the
    /// supervisor to abort before it records the end, and the tenure's
    /// outbound tally. Renewals stop here.
    fn finish(self) -> (Option<RunningGuest>, Arc<TenureOutbound>) {
        let Self {
            guest,
            renewals,
            outbound,
            ..
        } = self;
        drop(renewals);
        (guest, outbound)
    }

    /// The gate's verdict, read once and marked seen: why it ends this
    /// tenure, if it does (logged here).
    fn read_gate(&mut self) -> Option<&'static str> {
        let verdict = self.sup.identity.borrow_and_update().clone();
        let replaced;
        let session_bound = self.sup.crash_detection == CrashDetection::Session;
        let (why, reason) = match (verdict.ends_tenure(), verdict.claim_session()) {
            // A `ttl` grant records no liveness session and is taken over
            // only once it expired: losing the claim session endangers
            // nothing its renewals do not already guard.
            (Some(("claim_lost", _)), _) if !session_bound => return None,
            (Some(ends), _) => ends,
            (None, Some(_)) if !session_bound => return None,
            // The name is held on a later session than the tenure's: the
            // tenure's own session ended in between (a loss this tenure
            // did not see), and its lease may already be another's.
            (None, Some(now)) if Some(now) != self.claim_session => {
                replaced = format!(
                    "this host's liveness session changed since the lease was granted \
                     (session {now}, granted under {})",
                    self.claim_session
                        .map_or_else(|| "none".to_string(), |s| s.to_string())
                );
                ("claim_lost", replaced.as_str())
            }
            (None, _) => return None,
        };
        tracing::error!(
            controller = self.sup.name(),
            epoch = self.fence.epoch.0,
            holder = self.fence.holder,
            reason,
            "giving up the lease: {}",
            why.replace('_', " ")
        );
        Some(why)
    }

    async fn next_event(&mut self) -> Event {
        let restart_at = match self.machine.phase {
            Phase::Restarting { at } => Some(at),
            _ => None,
        };
        let grace_until = match self.machine.phase {
            Phase::Stopping { grace_until } => Some(grace_until),
            _ => None,
        };
        let watch_stop = self.shutdown_open && grace_until.is_none();
        let watch_handover = !self.handing_over && grace_until.is_none();
        let guest = self.guest.as_mut().map(|g| &mut g.task);
        let seat = self.sup.seat.as_mut();
        tokio::select! {
            // The deadline wins over every other ready event (L3).
            biased;
            _ = tokio::time::sleep_until(self.machine.valid_until) => Event::DeadlineFired,
            outcome = self.renewals.next(), if self.renewer_open => Event::Renewal(outcome),
            changed = self.sup.identity.changed(), if self.identity_open => {
                Event::IdentityChanged { open: changed.is_ok() }
            }
            exit = join_guest(guest) => Event::GuestExited(exit),
            _ = sleep_until_some(restart_at) => Event::RestartDue,
            changed = self.sup.shutdown.changed(), if watch_stop => {
                Event::StopRequested { open: changed.is_ok() }
            }
            _ = sleep_until_some(grace_until) => Event::GraceOver,
            _ = handover_requested(seat), if watch_handover => Event::HandoverRequested,
            // Last: only a heartbeat, so the loop turns (and beats) at
            // least every BEAT_EVERY.
            _ = tokio::time::sleep(BEAT_EVERY), if self.pulse.is_some() => Event::Beat,
        }
    }

    /// One handler per event: log, count, carry out the event's effects,
    /// and return the machine's next phase.
    fn handle(&mut self, event: Event) -> Phase {
        let name = self.sup.name().to_string();
        let epoch = self.fence.epoch.0;
        let holder = self.fence.holder.clone();
        let now = Instant::now();
        match event {
            Event::DeadlineFired => {
                tracing::error!(
                    controller = name,
                    epoch,
                    holder,
                    "renew deadline passed; the lease counts as lost"
                );
                self.machine.on_deadline()
            }
            Event::Renewal(None) => {
                self.renewer_open = false;
                self.machine.phase
            }
            Event::Renewal(Some((sent, result))) => {
                self.sup
                    .status
                    .metrics
                    .renew_seconds
                    .observe(sent.elapsed());
                let renewal = match result {
                    Ok(Renewed::Extended { .. }) => Renewal::Extended { sent },
                    Ok(Renewed::Lost) => {
                        tracing::error!(
                            controller = name,
                            epoch,
                            holder,
                            "renew refused; the lease was lost"
                        );
                        Renewal::Refused
                    }
                    Err(e) => {
                        tracing::warn!(controller = name, epoch, holder, error = %e, "renew failed; retrying until the renew deadline");
                        Renewal::Failed
                    }
                };
                self.machine.on_renewal(renewal, now)
            }
            Event::IdentityChanged { open: false } => {
                // The service is shutting down.
                self.identity_open = false;
                self.machine.phase
            }
            Event::IdentityChanged { open: true } => {
                let ends = self.read_gate();
                self.machine.on_identity(ends)
            }
            Event::GuestExited(exit) => {
                // The task has ended: nothing is left to abort.
                drop(self.guest.take());
                let delay = match exit {
                    Ok(WorkerExit::Fenced) => Duration::ZERO,
                    _ => self.restarts.next_delay(),
                };
                let end = match exit {
                    Ok(WorkerExit::Stopped) => GuestEnd::Stopped,
                    Ok(WorkerExit::Fenced) => {
                        tracing::error!(
                            controller = name,
                            epoch,
                            holder,
                            "the guest was fenced; the lease is no longer current"
                        );
                        GuestEnd::Fenced
                    }
                    Ok(WorkerExit::Guest(e)) => {
                        self.sup.status.metrics.aborted(guest_failure_label(&e));
                        tracing::error!(controller = name, epoch, holder, error = %e, restart_in = ?delay, "guest torn down; restarting it in this tenure");
                        self.sup.status.set(ControllerState::Leading {
                            epoch,
                            problem: Some(format!("guest restarting: {e}")),
                        });
                        GuestEnd::Failed
                    }
                    Err(join) => {
                        self.sup.status.metrics.aborted("trap");
                        tracing::error!(controller = name, epoch, holder, error = %join, "guest task failed; restarting it");
                        GuestEnd::Failed
                    }
                };
                self.machine.on_guest_exit(end, now + delay)
            }
            Event::RestartDue => {
                let next = self.machine.on_restart_due(now);
                if next == Phase::Starting {
                    self.sup.status.set(ControllerState::Leading {
                        epoch,
                        problem: None,
                    });
                }
                next
            }
            Event::StopRequested { open } => {
                self.shutdown_open = open;
                if open && !*self.sup.shutdown.borrow() {
                    return self.machine.phase;
                }
                tracing::info!(
                    controller = name,
                    epoch,
                    holder,
                    "shutting down: finishing the running reconcile"
                );
                let _ = self.stop_tx.send(true);
                self.machine.on_stop_requested(now)
            }
            Event::GraceOver => {
                tracing::warn!(
                    controller = name,
                    epoch,
                    holder,
                    "reconcile did not finish within the shutdown grace; aborting it"
                );
                self.machine.on_grace_over()
            }
            Event::HandoverRequested => {
                self.handing_over = true;
                tracing::info!(
                    controller = name,
                    epoch,
                    holder,
                    reason = placement::MoveReason::OverShare.as_str(),
                    "placement: handing the lease over; finishing the running reconcile"
                );
                let _ = self.stop_tx.send(true);
                self.machine.on_stop_requested(now)
            }
            Event::Beat => self.machine.phase,
        }
    }
}

/// The guest task's end, or never when no guest runs.
async fn join_guest(
    task: Option<&mut JoinHandle<WorkerExit>>,
) -> Result<WorkerExit, tokio::task::JoinError> {
    match task {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

/// Placement's request to hand the lease over, or never without a seat.
async fn handover_requested(seat: Option<&mut placement::Seat>) {
    match seat {
        Some(seat) => seat.handover_requested().await,
        None => std::future::pending().await,
    }
}

/// Sleep until `at`, or forever when there is no `at`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn guest_failure_label(error: &GuestError) -> &'static str {
    match error {
        GuestError::Aborted { .. } => "lease_lost",
        GuestError::DeadlineExceeded { .. } => "deadline",
        GuestError::OutOfMemory { .. } => "memory",
        GuestError::Trap { .. } | GuestError::Poisoned { .. } => "trap",
        GuestError::Described { .. } => "describe",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_millis(700);
    const GRACE: Duration = Duration::from_secs(5);
    /// Bound on the waits below; they end at once unless the behaviour broke.
    const WAIT: Duration = Duration::from_secs(10);

    fn machine(acquire_sent: Instant) -> Machine {
        Machine::new(acquire_sent, DEADLINE, GRACE)
    }

    #[test]
    fn a_grant_whose_deadline_already_passed_starts_no_guest() {
        let now = Instant::now();
        let mut m = machine(now - DEADLINE);
        assert_eq!(m.advance(now), Advance::DeadlinePassed);
        assert_eq!(m.phase, Phase::Ended(TenureEnd::Lost("renew_deadline")));
        // Once ended, nothing starts either.
        assert_eq!(m.advance(now), Advance::Wait);
    }

    #[test]
    fn a_restart_that_falls_due_after_the_deadline_starts_no_guest() {
        let sent = Instant::now();
        let mut m = machine(sent);
        assert_eq!(m.advance(sent), Advance::StartGuest);
        assert_eq!(m.phase, Phase::Running);
        let at = sent + DEADLINE;
        m.phase = m.on_guest_exit(GuestEnd::Failed, at);
        assert_eq!(m.phase, Phase::Restarting { at });
        m.phase = m.on_restart_due(at);
        assert_eq!(m.phase, Phase::Starting);
        assert_eq!(m.advance(at), Advance::DeadlinePassed);
        assert_eq!(m.phase, Phase::Ended(TenureEnd::Lost("renew_deadline")));
    }

    #[test]
    fn the_deadline_counts_from_the_last_successful_renewal_sent() {
        let sent = Instant::now();
        let mut m = machine(sent);
        m.advance(sent);
        let later = sent + DEADLINE / 2;
        assert_eq!(
            m.on_renewal(Renewal::Extended { sent: later }, later),
            Phase::Running
        );
        assert_eq!(m.valid_until, later + DEADLINE);
        // An older renewal answered late never moves the deadline back.
        assert_eq!(
            m.on_renewal(Renewal::Extended { sent }, later),
            Phase::Running
        );
        assert_eq!(m.valid_until, later + DEADLINE);
        // A failed round trip extends nothing.
        assert_eq!(m.on_renewal(Renewal::Failed, later), Phase::Running);
        assert_eq!(m.valid_until, later + DEADLINE);
        assert_eq!(
            m.on_renewal(Renewal::Refused, later),
            Phase::Ended(TenureEnd::Lost("renew_refused"))
        );
    }

    #[test]
    fn stop_lets_a_running_guest_finish_and_ends_at_once_without_one() {
        let now = Instant::now();
        let mut m = machine(now);
        assert_eq!(
            m.on_stop_requested(now),
            Phase::Ended(TenureEnd::Released),
            "no guest yet"
        );
        m.advance(now);
        m.phase = m.on_stop_requested(now);
        assert_eq!(
            m.phase,
            Phase::Stopping {
                grace_until: now + GRACE
            }
        );
        assert_eq!(
            m.on_guest_exit(GuestEnd::Stopped, now),
            Phase::Ended(TenureEnd::Released)
        );
        assert_eq!(m.on_grace_over(), Phase::Ended(TenureEnd::Released));
        assert_eq!(
            m.on_guest_exit(GuestEnd::Fenced, now),
            Phase::Ended(TenureEnd::Lost("fenced"))
        );
        m.phase = Phase::Restarting { at: now + GRACE };
        assert_eq!(m.on_stop_requested(now), Phase::Ended(TenureEnd::Released));
    }

    #[test]
    fn a_gate_verdict_that_ends_tenures_ends_every_phase() {
        let now = Instant::now();
        let mut m = machine(now);
        for phase in [
            Phase::Starting,
            Phase::Running,
            Phase::Restarting { at: now },
            Phase::Stopping { grace_until: now },
        ] {
            m.phase = phase;
            assert_eq!(m.on_identity(None), phase);
            assert_eq!(
                m.on_identity(Some("holder_taken")),
                Phase::Ended(TenureEnd::Lost("holder_taken")),
                "{phase:?}"
            );
            assert_eq!(
                m.on_deadline(),
                Phase::Ended(TenureEnd::Lost("renew_deadline")),
                "{phase:?}"
            );
        }
    }

    /// The memory authority, with `record_outbound` answering never.
    struct Unanswered(crate::authority::memory::MemoryAuthority);

    #[async_trait::async_trait]
    impl Authority for Unanswered {
        async fn identity(
            &self,
        ) -> Result<crate::authority::DatabaseIdentity, crate::authority::AuthorityError> {
            self.0.identity().await
        }
        async fn acquire(
            &self,
            r: &AcquireRequest,
        ) -> Result<Acquired, crate::authority::AuthorityError> {
            self.0.acquire(r).await
        }
        async fn renew(
            &self,
            f: &[Fence],
            ttl: Duration,
        ) -> Result<Vec<Renewed>, crate::authority::AuthorityError> {
            self.0.renew(f, ttl).await
        }
        async fn release(
            &self,
            f: &Fence,
            r: EndReason,
        ) -> Result<(), crate::authority::AuthorityError> {
            self.0.release(f, r).await
        }
        async fn observe(
            &self,
            c: &str,
        ) -> Result<Vec<crate::authority::LeaseRecord>, crate::authority::AuthorityError> {
            self.0.observe(c).await
        }
        async fn history_before(
            &self,
            k: &LeaseKey,
            b: Option<crate::fence::Epoch>,
            l: usize,
        ) -> Result<Vec<crate::authority::TenureRecord>, crate::authority::AuthorityError> {
            self.0.history_before(k, b, l).await
        }
        async fn record_outbound(
            &self,
            _: &Fence,
            _: u64,
            _: Option<chrono::DateTime<chrono::Utc>>,
        ) -> Result<(), crate::authority::AuthorityError> {
            std::future::pending().await
        }
        fn released(&self, c: &str) -> watch::Receiver<u64> {
            self.0.released(c)
        }
    }

    async fn granted(authority: &dyn Authority) -> Fence {
        let request = AcquireRequest {
            key: LeaseKey::new("east", "caller"),
            holder: "host-a".into(),
            ttl: Duration::from_secs(10),
        };
        match authority.acquire(&request).await.unwrap() {
            Acquired::Granted(grant) => grant.fence,
            Acquired::Held { .. } => panic!("held"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenures_outbound_tally_reaches_its_history() {
        let authority = crate::authority::memory::MemoryAuthority::new();
        let fence = granted(&authority).await;
        let tally = TenureOutbound::default();
        // Nothing sent: nothing written, the row keeps 0 and null.
        record_outbound(&authority, "caller", &fence, &tally, Instant::now() + WAIT).await;
        let history = authority.history(&fence.key, 1).await.unwrap();
        assert_eq!(
            (history[0].outbound_requests, history[0].last_outbound_at),
            (0, None)
        );

        let before = chrono::Utc::now();
        tally.note();
        tally.note();
        tally.note();
        record_outbound(&authority, "caller", &fence, &tally, Instant::now() + WAIT).await;
        let history = authority.history(&fence.key, 1).await.unwrap();
        assert_eq!(history[0].outbound_requests, 3);
        let last = history[0].last_outbound_at.expect("a last request time");
        assert!(
            last >= before - chrono::TimeDelta::seconds(1),
            "{last} < {before}"
        );
        assert!(last <= chrono::Utc::now(), "{last}");
    }

    #[tokio::test(start_paused = true)]
    async fn recording_the_outbound_tally_never_outlasts_its_bound() {
        let authority = Unanswered(crate::authority::memory::MemoryAuthority::new());
        let fence = granted(&authority).await;
        let tally = TenureOutbound::default();
        tally.note();
        let bound = crate::timeouts::TENURE_END_RECORD / 3;
        let start = Instant::now();
        tokio::time::timeout(
            WAIT,
            record_outbound(&authority, "caller", &fence, &tally, start + bound),
        )
        .await
        .expect("the record waited past its bound for a database that never answers");
        assert_eq!(start.elapsed(), bound);
        // And the release is still possible afterwards.
        authority
            .release(&fence, EndReason::Released)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_dropped_running_guest_is_revoked_and_aborted_not_detached() {
        let (guard, dropped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<WorkerExit>().await
        });
        let revocation = Revocation::new(&wasmtime::Engine::default());
        drop(RunningGuest {
            task,
            revocation: revocation.clone(),
        });
        assert!(revocation.is_revoked(), "the fence was not revoked");
        // The guard goes when the task's future is dropped by the abort.
        let closed = tokio::time::timeout(WAIT, dropped)
            .await
            .expect("the guest task still runs: it was detached, not aborted");
        assert!(closed.is_err(), "the guard was never sent");
    }
}
