//! Abort latency from the moment the loss is detected, through the real
//! supervisor: where the `abort` part's main figure starts at an in-process
//! `Revocation::revoke`, this one starts where the host finds out.
//!
//! A `Supervisor` (memory backends, the host's `Renewer`, a short lease
//! timing so a run takes well under a second) leads the `misbehaving`
//! fixture, whose guest is spinning (`cmd/spin`) or blocked in a held
//! commit (`cmd/block`). Then the lease is lost, by turns in one of two
//! ways:
//!
//! - **renew deadline** (L3): the holder is cut off from the authority
//!   (the memory authority's fault injection), so renewals fail and the
//!   supervisor's self-fencing deadline fires at *last successful renew
//!   sent + renew deadline*. The clock starts at that deadline, computed
//!   from the grant and renew calls a recording wrapper around the
//!   authority saw succeed (stamped when each call began, at most a
//!   function call after the supervisor's own stamp, so the figure can
//!   only understate by that).
//! - **renew refused**: the lease is granted to a phantom holder, so the
//!   next renewal answers `Lost`. The clock starts when that renew call
//!   returned, before the renewer hands the outcome to the supervisor.
//!
//! The clock stops when the controller's status watch reports the loss
//! (`Failing`, with the loss reason, checked): the supervisor sets it only
//! after the guest task ended and its Store was dropped. So the figure
//! covers, besides the abort itself, the timer firing (tokio's timers have
//! millisecond granularity) or the renewer handing the refusal over, and
//! waking the watcher.
//!
//! Ordering comes from the status watch and the store's reports, never
//! from sleeping: after each loss the stale reports are drained while the
//! supervisor cannot acquire again (still cut off, or the phantom holds the
//! lease), and only then is the way cleared for the next tenure.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use async_trait::async_trait;
use leasehold_host::authority::memory::MemoryAuthority;
use leasehold_host::authority::{
    AcquireRequest, Acquired, Authority, AuthorityError, DatabaseIdentity, EndReason, LeaseRecord,
    LeaseTiming, Renewed, TenureRecord,
};
use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::runtime::CompiledController;
use leasehold_host::status::{ControllerState, ControllerStatus};
use leasehold_host::store::Store;
use leasehold_host::supervisor::{IdentityCheck, Renewer, Supervisor, SupervisorConfig};
use tokio::sync::{mpsc, watch};

use crate::Scale;
use crate::report::{Report, Samples, duration};
use crate::support::{HeldStore, MemoryBackends, key};

const PART: &str = "abort";
const CLUSTER: &str = "loss";
const HOLDER: &str = "bench-host";
const PHANTOM: &str = "phantom";
/// Runs per guest and detection (after [`WARMUP`]).
const RUNS: usize = 25;
const QUICK_RUNS: usize = 2;
/// Losses per guest before counting (the first tenures warm the engine).
const WARMUP: usize = 2;
/// A short lease timing in the host's proportions, so a run waits out a
/// deadline in well under a second.
const TIMING: LeaseTiming = LeaseTiming {
    ttl: Duration::from_secs(2),
    renew_interval: Duration::from_millis(50),
    renew_deadline: Duration::from_millis(400),
};
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(100);
const MAX_QUEUE: usize = 1000;
/// The guests never finish a reconcile; the last tenure is aborted soon.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(100);
/// Longest wait for any one step (leading, the guest in place, the loss).
const STEP_LIMIT: Duration = Duration::from_secs(30);
/// How long a spinning guest spins before the loss, as in the main figure.
const SPIN_BEFORE_LOSS: Duration = Duration::from_millis(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guest {
    Spin,
    Block,
}

impl Guest {
    fn command(self) -> &'static str {
        match self {
            Guest::Spin => "spin",
            Guest::Block => "block",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Guest::Spin => "CPU-bound guest (infinite loop)",
            Guest::Block => "guest blocked in a host call (commit)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detection {
    Deadline,
    Refused,
}

impl Detection {
    /// The loss reason the supervisor must report.
    fn reason(self) -> &'static str {
        match self {
            Detection::Deadline => "renew_deadline",
            Detection::Refused => "renew_refused",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Detection::Deadline => "renew deadline (L3) passed",
            Detection::Refused => "renew call returned refused",
        }
    }
}

/// What the recording authority saw.
#[derive(Debug, Default)]
struct Seen {
    /// Per epoch: when the last grant or renew call that extended it began.
    last_extended: std::collections::HashMap<u64, Instant>,
    /// When a renew call last returned `Lost`.
    refused_at: Option<Instant>,
}

/// The memory authority, with the start of every successful grant and
/// renewal and the return of every refusal recorded.
struct Recording {
    inner: Arc<MemoryAuthority>,
    seen: Mutex<Seen>,
}

impl Recording {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().expect("recording lock")
    }
}

#[async_trait]
impl Authority for Recording {
    async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
        self.inner.identity().await
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquired, AuthorityError> {
        let sent = Instant::now();
        let acquired = self.inner.acquire(request).await;
        if let Ok(Acquired::Granted(grant)) = &acquired {
            self.seen().last_extended.insert(grant.fence.epoch.0, sent);
        }
        acquired
    }

    async fn renew(&self, fences: &[Fence], ttl: Duration) -> Result<Vec<Renewed>, AuthorityError> {
        let sent = Instant::now();
        let renewed = self.inner.renew(fences, ttl).await;
        if let Ok(outcomes) = &renewed {
            let mut seen = self.seen();
            for (fence, outcome) in fences.iter().zip(outcomes) {
                match outcome {
                    Renewed::Extended { .. } => {
                        seen.last_extended.insert(fence.epoch.0, sent);
                    }
                    Renewed::Lost => seen.refused_at = Some(Instant::now()),
                }
            }
        }
        renewed
    }

    async fn release(&self, fence: &Fence, reason: EndReason) -> Result<(), AuthorityError> {
        self.inner.release(fence, reason).await
    }

    async fn observe(&self, cluster: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
        self.inner.observe(cluster).await
    }

    async fn history_before(
        &self,
        key: &LeaseKey,
        before: Option<leasehold_host::fence::Epoch>,
        limit: usize,
    ) -> Result<Vec<TenureRecord>, AuthorityError> {
        self.inner.history_before(key, before, limit).await
    }

    async fn record_outbound(
        &self,
        fence: &Fence,
        requests: u64,
        last_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), AuthorityError> {
        self.inner.record_outbound(fence, requests, last_at).await
    }

    fn released(&self, cluster: &str) -> watch::Receiver<u64> {
        self.inner.released(cluster)
    }
}

/// Per guest and detection: detection -> guest stopped.
type Figures = [[Samples; 2]; 2];

pub async fn measure(
    scale: Scale,
    report: &mut Report,
    compiled: &CompiledController,
) -> Result<()> {
    let runs = scale.pick(RUNS, QUICK_RUNS);
    let mut figures: Figures = Default::default();
    for (g, guest) in [Guest::Spin, Guest::Block].into_iter().enumerate() {
        let [deadline, refused] = &mut figures[g];
        one_guest(guest, compiled, runs, deadline, refused)
            .await
            .with_context(|| format!("supervised loss of a {}", guest.label()))?;
    }
    for (g, guest) in [Guest::Spin, Guest::Block].into_iter().enumerate() {
        for (d, detection) in [Detection::Deadline, Detection::Refused]
            .into_iter()
            .enumerate()
        {
            let samples = &mut figures[g][d];
            let max = samples.max();
            report.info(
                PART,
                format!(
                    "{}: {} -> guest stopped (real supervisor, status watch)",
                    guest.label(),
                    detection.label()
                ),
                format!("{}, worst {}", samples.summary(), duration(max)),
            );
        }
    }
    Ok(())
}

/// Everything one guest's runs need.
struct Harness {
    backends: MemoryBackends,
    recording: Arc<Recording>,
    reports: crate::support::HeldStoreReports,
    status: Arc<ControllerStatus>,
    guest: Guest,
    shutdown: watch::Sender<bool>,
    _identity: watch::Sender<IdentityCheck>,
    task: tokio::task::JoinHandle<()>,
}

async fn one_guest(
    guest: Guest,
    compiled: &CompiledController,
    runs: usize,
    deadline: &mut Samples,
    refused: &mut Samples,
) -> Result<()> {
    let mut h = Harness::start(guest, compiled).await?;
    let mut epoch = 0;
    for i in 0..WARMUP + 2 * runs {
        let detection = if i % 2 == 0 {
            Detection::Deadline
        } else {
            Detection::Refused
        };
        epoch = h.leading_after(epoch).await?;
        h.guest_in_place().await?;
        let latency = h.lose(detection, epoch).await?;
        if i >= WARMUP {
            match detection {
                Detection::Deadline => deadline.push(latency),
                Detection::Refused => refused.push(latency),
            }
        }
    }
    h.stop().await
}

impl Harness {
    async fn start(guest: Guest, compiled: &CompiledController) -> Result<Self> {
        let backends = MemoryBackends::new();
        let recording = Arc::new(Recording {
            inner: backends.authority.clone(),
            seen: Mutex::new(Seen::default()),
        });
        let (store, reports) = HeldStore::new(backends.store.clone());
        store.hold(true);
        backends
            .store
            .put(CLUSTER, &key("cmd", guest.command()), "{}", None)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let status = Arc::new(ControllerStatus::new(compiled.name()));
        let identity = backends
            .authority
            .identity()
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let (identity_tx, identity_rx) = watch::channel(IdentityCheck::Verified(identity));
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let supervisor = Supervisor::new(
            SupervisorConfig {
                cluster: CLUSTER.into(),
                holder: HOLDER.into(),
                timing: TIMING,
                backoff_min: BACKOFF_MIN,
                backoff_max: BACKOFF_MAX,
                max_queue: MAX_QUEUE,
                shutdown_grace: SHUTDOWN_GRACE,
            },
            recording.clone(),
            Renewer::start(recording.clone()),
            store,
            compiled.clone(),
            status.clone(),
            identity_rx,
            shutdown_rx,
        );
        let task = tokio::spawn(supervisor.run());
        Ok(Self {
            backends,
            recording,
            reports,
            status,
            guest,
            shutdown: shutdown_tx,
            _identity: identity_tx,
            task,
        })
    }

    fn lease(&self) -> LeaseKey {
        LeaseKey::new(CLUSTER, self.status.name.as_str())
    }

    /// Wait until the supervisor leads at an epoch above `previous`.
    async fn leading_after(&self, previous: u64) -> Result<u64> {
        let mut rx = self.status.subscribe();
        let state = tokio::time::timeout(
            STEP_LIMIT,
            rx.wait_for(|s| {
                matches!(s, ControllerState::Leading { epoch, problem: None } if *epoch > previous)
            }),
        )
        .await
        .map_err(|_| {
            anyhow!(
                "timed out after {STEP_LIMIT:?} waiting for a tenure above epoch {previous}; state {:?}",
                self.status.get()
            )
        })?
        .map_err(|_| anyhow!("the status watch closed"))?
        .clone();
        match state {
            ControllerState::Leading { epoch, .. } => Ok(epoch),
            other => bail!("not leading: {other:?}"),
        }
    }

    /// Wait until the tenure's guest spins (it read once, then a few epoch
    /// ticks passed) or is blocked in its commit.
    async fn guest_in_place(&mut self) -> Result<()> {
        let what = match self.guest {
            Guest::Spin => "the guest's read before its loop",
            Guest::Block => "the guest's held commit",
        };
        let reported = match self.guest {
            Guest::Spin => tokio::time::timeout(STEP_LIMIT, self.reports.gets.recv()).await,
            Guest::Block => tokio::time::timeout(STEP_LIMIT, self.reports.held.recv()).await,
        };
        reported
            .map_err(|_| anyhow!("timed out after {STEP_LIMIT:?} waiting for {what}"))?
            .ok_or_else(|| anyhow!("the store's reports closed"))?;
        if self.guest == Guest::Spin {
            tokio::time::sleep(SPIN_BEFORE_LOSS).await;
        }
        Ok(())
    }

    /// Lose the lease of `epoch` by `detection`; the time from detection to
    /// the guest stopped. Leaves the way clear for the next tenure.
    async fn lose(&mut self, detection: Detection, epoch: u64) -> Result<Duration> {
        let faults = self.backends.authority.faults();
        let mut rx = self.status.subscribe();
        rx.borrow_and_update();
        self.recording.seen().refused_at = None;
        // Cut off: renewals, the release and acquisitions fail until the
        // guard is dropped, so the deadline decides.
        let cut = match detection {
            Detection::Deadline => Some(faults.partition(HOLDER)),
            Detection::Refused => {
                faults.steal(&self.lease(), PHANTOM);
                None
            }
        };
        let lost = tokio::time::timeout(
            STEP_LIMIT,
            rx.wait_for(|s| matches!(s, ControllerState::Failing { .. })),
        )
        .await;
        let stopped = Instant::now();
        let state = lost
            .map_err(|_| {
                anyhow!(
                    "timed out after {STEP_LIMIT:?} waiting for the loss of epoch {epoch}; state {:?}",
                    self.status.get()
                )
            })?
            .map_err(|_| anyhow!("the status watch closed"))?
            .clone();
        let ControllerState::Failing { reason } = &state else {
            bail!("not failing: {state:?}");
        };
        if !reason.contains(detection.reason()) {
            bail!(
                "epoch {epoch} was lost for another reason than {}: {reason}",
                detection.reason()
            );
        }
        let detected = {
            let seen = self.recording.seen();
            match detection {
                Detection::Deadline => seen
                    .last_extended
                    .get(&epoch)
                    .map(|sent| *sent + TIMING.renew_deadline),
                Detection::Refused => seen.refused_at,
            }
        }
        .ok_or_else(|| anyhow!("no {} was recorded for epoch {epoch}", detection.label()))?;
        let Some(latency) = stopped.checked_duration_since(detected) else {
            bail!(
                "the guest of epoch {epoch} stopped before the {} ({:?} early)",
                detection.label(),
                detected - stopped
            );
        };
        // The old guest is gone and no new tenure can start yet: drop its
        // reports, then let the supervisor acquire again.
        drain(&mut self.reports.gets);
        drain(&mut self.reports.held);
        faults.expire(&self.lease());
        drop(cut);
        Ok(latency)
    }

    async fn stop(self) -> Result<()> {
        let _ = self.shutdown.send(true);
        let task = self.task;
        tokio::time::timeout(STEP_LIMIT, task)
            .await
            .map_err(|_| anyhow!("the supervisor did not stop within {STEP_LIMIT:?}"))??;
        Ok(())
    }
}

fn drain(rx: &mut mpsc::UnboundedReceiver<()>) {
    while rx.try_recv().is_ok() {}
}
