//! One supervisor per controller: acquire -> run the tenure (renew, run the
//! guest) -> on loss hard-abort -> record -> back off -> acquire again.
//!
//! Owns: the lease cycle of one controller on this replica, the
//! self-fencing deadline (L3), guest restarts inside a tenure (G4) and the
//! graceful release on shutdown (L5).
//!
//! Must never: acquire before the gate ([`identity`]) passed — the
//! database identity verified, the database accepting writes, this host's
//! holder name claimed; let a guest run past the renew deadline; write to
//! the store itself.

mod backoff;
pub mod identity;
mod queue;
mod renewer;
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

use crate::authority::{
    AcquireRequest, Acquired, Authority, EndReason, Grant, LeaseTiming, Renewed,
};
use crate::fence::{Fence, LeaseKey};
use crate::runtime::{CompiledController, GuestError, Revocation};
use crate::status::{ControllerState, ControllerStatus};
use crate::store::Store;
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
        }
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
        while !self.stopping() {
            let refusal = self.identity.borrow().refusal();
            if let Some(reason) = refusal {
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
            let request = AcquireRequest {
                key: self.key(),
                holder: self.config.holder.clone(),
                ttl: self.config.timing.ttl,
            };
            let sent = Instant::now();
            released.borrow_and_update();
            match self.authority.acquire(&request).await {
                Ok(Acquired::Granted(grant)) => {
                    backoff.reset();
                    self.status
                        .metrics
                        .acquisitions
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let sent = self.confirm_late_grant(&grant, sent).await;
                    let end = self.run_tenure(grant, sent).await;
                    if let TenureEnd::Lost(_) = end {
                        // Give a successor the chance to take over before we
                        // try again.
                        self.sleep_or_stop(backoff.next_delay()).await;
                    }
                }
                Ok(Acquired::Held { holder, .. }) => {
                    self.status.set(ControllerState::Standby {
                        holder: Some(holder),
                    });
                    let wait = standby_poll.next_delay();
                    tokio::select! {
                        // A closed release channel is only a lost wake-up
                        // source; the poll below still runs.
                        Ok(()) = released.changed() => {}
                        _ = tokio::time::sleep(wait) => {}
                        changed = self.shutdown.changed() => {
                            if changed.is_err() {
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(controller = self.name(), holder = self.config.holder, error = %e, retry_in = ?delay, "cannot acquire the lease");
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

    fn start_guest(&self, fence: &Fence, stop: &watch::Receiver<bool>) -> RunningGuest {
        let revocation = self.controller.revocation();
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
        };
        let fence = fence.clone();
        let guest_revocation = revocation.clone();
        let task = tokio::spawn(async move {
            match controller
                .instantiate(fence, store, counters, guest_revocation)
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
    async fn abort(&self, guest: RunningGuest, reason: &'static str) {
        guest.revocation.revoke();
        guest.task.abort();
        let _ = guest.task.await;
        self.status.metrics.aborted(reason);
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

    async fn run_tenure(&mut self, grant: Grant, acquire_sent: Instant) -> TenureEnd {
        let fence = grant.fence.clone();
        let timing = self.config.timing;
        let name = self.name().to_string();
        let epoch = fence.epoch.0;
        let holder = fence.holder.clone();
        tracing::info!(controller = name, epoch, holder, "lease acquired; leading");
        self.status.set(ControllerState::Leading {
            epoch,
            problem: None,
        });

        // L3: the lease counts as ours only until the last successful renew
        // *sent* plus the deadline, which is below the ttl.
        let mut valid_until = acquire_sent + timing.renew_deadline;
        let mut renewals = self
            .renewer
            .register(fence.clone(), timing.ttl, timing.renew_interval);
        let mut renewer_open = true;
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut guest: Option<RunningGuest> = None;
        let mut restarts = Backoff::new(self.config.backoff_min, self.config.backoff_max);
        let mut restart_at: Option<Instant> = Some(Instant::now());
        let mut grace_until: Option<Instant> = None;
        let far = || Instant::now() + Duration::from_secs(3600);
        let mut identity_open = true;
        let mut shutdown_open = true;

        let end = loop {
            if guest.is_none()
                && grace_until.is_none()
                && restart_at.is_some_and(|t| t <= Instant::now())
            {
                restart_at = None;
                guest = Some(self.start_guest(&fence, &stop_rx));
            }
            let restart_wait = restart_at.unwrap_or_else(far);
            let grace_wait = grace_until.unwrap_or_else(far);
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(valid_until) => {
                    tracing::error!(controller = name, epoch, holder, "renew deadline passed; the lease counts as lost");
                    break TenureEnd::Lost("renew_deadline");
                }
                outcome = renewals.next(), if renewer_open => {
                    let Some((sent, result)) = outcome else {
                        // The renewer stopped (shutdown): the deadline
                        // still bounds the tenure.
                        renewer_open = false;
                        continue;
                    };
                    self.status.metrics.renew_seconds.observe(sent.elapsed());
                    match result {
                        Ok(Renewed::Extended { .. }) => {
                            valid_until = valid_until.max(sent + timing.renew_deadline);
                        }
                        Ok(Renewed::Lost) => {
                            tracing::error!(controller = name, epoch, holder, "renew refused; the lease was lost");
                            break TenureEnd::Lost("renew_refused");
                        }
                        Err(e) => {
                            tracing::warn!(controller = name, epoch, holder, error = %e, "renew failed; retrying until the renew deadline");
                        }
                    }
                }
                changed = self.identity.changed(), if identity_open => {
                    // A closed channel means the service is shutting down;
                    // without this guard a closed watch would be ready on
                    // every poll and starve the other branches.
                    if changed.is_err() {
                        identity_open = false;
                        continue;
                    }
                    let verdict = self.identity.borrow().clone();
                    if let Some((why, reason)) = verdict.ends_tenure() {
                        tracing::error!(controller = name, epoch, holder, reason, "giving up the lease: {}", why.replace('_', " "));
                        break TenureEnd::Lost(why);
                    }
                }
                exit = async { (&mut guest.as_mut().expect("guarded").task).await }, if guest.is_some() => {
                    let running = guest.take().expect("guarded");
                    drop(running);
                    match exit {
                        Ok(WorkerExit::Stopped) => {
                            if grace_until.is_some() {
                                break TenureEnd::Released;
                            }
                        }
                        Ok(WorkerExit::Fenced) => {
                            tracing::error!(controller = name, epoch, holder, "the guest was fenced; the lease is no longer current");
                            break TenureEnd::Lost("fenced");
                        }
                        Ok(WorkerExit::Guest(e)) => {
                            let delay = restarts.next_delay();
                            let label = guest_failure_label(&e);
                            self.status.metrics.aborted(label);
                            tracing::error!(controller = name, epoch, holder, error = %e, restart_in = ?delay, "guest torn down; restarting it in this tenure");
                            self.status.set(ControllerState::Leading {
                                epoch,
                                problem: Some(format!("guest restarting: {e}")),
                            });
                            restart_at = Some(Instant::now() + delay);
                        }
                        Err(join) => {
                            let delay = restarts.next_delay();
                            self.status.metrics.aborted("trap");
                            tracing::error!(controller = name, epoch, holder, error = %join, "guest task failed; restarting it");
                            restart_at = Some(Instant::now() + delay);
                        }
                    }
                }
                _ = tokio::time::sleep_until(restart_wait), if guest.is_none() && restart_at.is_some() => {
                    self.status.set(ControllerState::Leading {
                epoch,
                problem: None,
            });
                }
                changed = self.shutdown.changed(), if grace_until.is_none() && shutdown_open => {
                    // A dropped sender also means: stop.
                    shutdown_open = changed.is_ok();
                    if *self.shutdown.borrow() || !shutdown_open {
                        tracing::info!(controller = name, epoch, holder, "shutting down: finishing the running reconcile");
                        let _ = stop_tx.send(true);
                        if guest.is_none() {
                            break TenureEnd::Released;
                        }
                        grace_until = Some(Instant::now() + self.config.shutdown_grace);
                    }
                }
                _ = tokio::time::sleep_until(grace_wait), if grace_until.is_some() => {
                    tracing::warn!(controller = name, epoch, holder, "reconcile did not finish within the shutdown grace; aborting it");
                    break TenureEnd::Released;
                }
            }
        };

        drop(renewals);
        if let Some(running) = guest.take() {
            let reason = match end {
                TenureEnd::Lost(_) => "lease_lost",
                TenureEnd::Released => "shutdown",
            };
            self.abort(running, reason).await;
        }
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
        // Recording the end (and, if the row is still ours, releasing it so
        // a standby need not wait for the ttl) happens after the guest is
        // gone (L5).
        let release = tokio::time::timeout(
            crate::timeouts::TENURE_END_RECORD,
            self.authority.release(&fence, reason),
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
        end
    }
}

fn guest_failure_label(error: &GuestError) -> &'static str {
    match error {
        GuestError::Aborted { .. } => "lease_lost",
        GuestError::DeadlineExceeded { .. } => "deadline",
        GuestError::OutOfMemory { .. } => "memory",
        GuestError::Trap { .. } | GuestError::Poisoned { .. } => "trap",
    }
}
