//! One renewer per host: every held lease with the same timing is renewed
//! in a single round trip per interval, however many leases the host holds
//! (`Authority::renew` takes all their fences at once).
//!
//! Supervisors register a fence when a tenure starts and receive every
//! renewal outcome with the instant the renewal was *sent* (L3 counts from
//! there). Dropping the registration unregisters it. The renewer never
//! decides that a lease is lost: each supervisor does, from the outcomes it
//! receives and its own deadline.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::authority::{Authority, AuthorityError, Renewed};
use crate::fence::{Fence, LeaseKey};
use crate::notify::{BEAT_EVERY, Heartbeat, Pulse};

use super::settled::Settled;

/// One renewal outcome: when it was sent, and what came back.
pub type Outcome = (Instant, Result<Renewed, AuthorityError>);

/// Timing shared by a batch: leases renew together only when both their
/// ttl and their interval agree.
type Cadence = (Duration, Duration);

enum Command {
    Register {
        fence: Fence,
        cadence: Cadence,
        outcomes: mpsc::UnboundedSender<Outcome>,
        settled: Arc<Settled>,
    },
    Unregister {
        key: LeaseKey,
        epoch: u64,
    },
    BatchDone {
        cadence: Cadence,
    },
}

/// A handle to the host's renewer task.
#[derive(Clone)]
pub struct Renewer {
    commands: mpsc::UnboundedSender<Command>,
    /// The host's lease placement, when it places leases
    /// ([`Renewer::with_placement`]); every supervisor renewing through
    /// this renewer takes its seat there.
    placement: Option<super::placement::Placement>,
}

/// A registered fence; renewal outcomes arrive on [`Registration::next`].
/// Dropping it stops the renewals.
pub struct Registration {
    key: LeaseKey,
    epoch: u64,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Registration {
    /// The next renewal outcome. `None` only if the renewer is gone (the
    /// host is shutting down); the deadline then decides.
    pub async fn next(&mut self) -> Option<Outcome> {
        self.outcomes.recv().await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unregister {
            key: self.key.clone(),
            epoch: self.epoch,
        });
    }
}

struct Member {
    fence: Fence,
    outcomes: mpsc::UnboundedSender<Outcome>,
    /// The tenure's settled position, read when each renewal is sent and
    /// recorded with it.
    settled: Arc<Settled>,
}

struct Batch {
    members: HashMap<LeaseKey, Member>,
    next_due: Instant,
    in_flight: bool,
}

impl Renewer {
    /// Start the renewer task for `authority`.
    pub fn start(authority: Arc<dyn Authority>) -> Self {
        Self::spawn(authority, None)
    }

    /// [`Renewer::start`], its loop registered with `heartbeat` as
    /// `renewer`: it beats at least every [`crate::notify::BEAT_EVERY`],
    /// holding leases or not, so the service manager's watchdog sees a
    /// stalled renewer ([`crate::notify`]).
    pub fn start_beating(authority: Arc<dyn Authority>, heartbeat: &Heartbeat) -> Self {
        Self::spawn(authority, Some(heartbeat.register("renewer")))
    }

    fn spawn(authority: Arc<dyn Authority>, pulse: Option<Pulse>) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(authority, rx, commands.downgrade(), pulse));
        Self {
            commands,
            placement: None,
        }
    }

    /// This renewer, with the host's lease placement: the supervisors
    /// renewing through it ask `placement` before each acquire and hand
    /// their lease over when it asks (see [`super::placement`]).
    pub fn with_placement(mut self, placement: super::placement::Placement) -> Self {
        self.placement = Some(placement);
        self
    }

    /// The host's lease placement, if it places leases.
    pub fn placement(&self) -> Option<&super::placement::Placement> {
        self.placement.as_ref()
    }

    /// Renew `fence` every `interval` with `ttl` until the registration is
    /// dropped. The first renewal is sent one interval from now.
    pub fn register(&self, fence: Fence, ttl: Duration, interval: Duration) -> Registration {
        self.register_settled(fence, ttl, interval, Arc::default())
    }

    /// [`Renewer::register`], each renewal recording the tenure's settled
    /// position as `settled` holds it when the renewal is sent (see
    /// [`super::settled`]).
    pub fn register_settled(
        &self,
        fence: Fence,
        ttl: Duration,
        interval: Duration,
        settled: Arc<Settled>,
    ) -> Registration {
        let (tx, outcomes) = mpsc::unbounded_channel();
        let key = fence.key.clone();
        let epoch = fence.epoch.0;
        let _ = self.commands.send(Command::Register {
            fence,
            cadence: (ttl, interval),
            outcomes: tx,
            settled,
        });
        Registration {
            key,
            epoch,
            outcomes,
            commands: self.commands.clone(),
        }
    }
}

async fn run(
    authority: Arc<dyn Authority>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    own: mpsc::WeakUnboundedSender<Command>,
    pulse: Option<Pulse>,
) {
    let mut batches: BTreeMap<Cadence, Batch> = BTreeMap::new();
    loop {
        if let Some(pulse) = &pulse {
            pulse.beat();
        }
        let next_due = batches
            .values()
            .filter(|b| !b.in_flight && !b.members.is_empty())
            .map(|b| b.next_due)
            .min();
        // With a heartbeat, the loop turns at least every BEAT_EVERY.
        let beat_at = Instant::now() + BEAT_EVERY;
        let command = tokio::select! {
            command = commands.recv() => command,
            _ = tokio::time::sleep_until(next_due.unwrap_or(beat_at)), if next_due.is_some() => {
                send_due(&authority, &mut batches, &own);
                continue;
            }
            _ = tokio::time::sleep_until(beat_at), if pulse.is_some() => continue,
        };
        let Some(command) = command else {
            // Every handle and registration is gone.
            return;
        };
        match command {
            Command::Register {
                fence,
                cadence,
                outcomes,
                settled,
            } => {
                let batch = batches.entry(cadence).or_insert_with(|| Batch {
                    members: HashMap::new(),
                    next_due: Instant::now() + cadence.1,
                    in_flight: false,
                });
                if batch.members.is_empty() && !batch.in_flight {
                    batch.next_due = Instant::now() + cadence.1;
                }
                batch.members.insert(
                    fence.key.clone(),
                    Member {
                        fence,
                        outcomes,
                        settled,
                    },
                );
            }
            Command::Unregister { key, epoch } => {
                for batch in batches.values_mut() {
                    if batch
                        .members
                        .get(&key)
                        .is_some_and(|m| m.fence.epoch.0 == epoch)
                    {
                        batch.members.remove(&key);
                    }
                }
            }
            Command::BatchDone { cadence } => {
                if let Some(batch) = batches.get_mut(&cadence) {
                    batch.in_flight = false;
                }
            }
        }
    }
}

/// Send one renew call per due batch, each in its own task so a slow batch
/// does not delay the others.
fn send_due(
    authority: &Arc<dyn Authority>,
    batches: &mut BTreeMap<Cadence, Batch>,
    own: &mpsc::WeakUnboundedSender<Command>,
) {
    let now = Instant::now();
    for (cadence, batch) in batches.iter_mut() {
        if batch.in_flight || batch.members.is_empty() || batch.next_due > now {
            continue;
        }
        // The next round is due one interval after this one was sent, not
        // after it returned: renewals keep their cadence under latency.
        batch.next_due = now + cadence.1;
        batch.in_flight = true;
        let members: Vec<(Fence, mpsc::UnboundedSender<Outcome>)> = batch
            .members
            .values()
            .map(|m| (m.fence.clone(), m.outcomes.clone()))
            .collect();
        let settled: Vec<Option<u64>> = batch.members.values().map(|m| m.settled.get()).collect();
        let authority = authority.clone();
        let own = own.clone();
        let cadence = *cadence;
        tokio::spawn(async move {
            let fences: Vec<Fence> = members.iter().map(|(f, _)| f.clone()).collect();
            let sent = Instant::now();
            // One interval at most: a renewal that has not answered by the
            // time the next is due is given up (its outcome unknown), so the
            // next one goes out on time. Waiting longer (the database bound
            // is 5 s, the default slack too) made a lease's survival a race
            // of one round trip.
            let result = match tokio::time::timeout(
                cadence.1,
                authority.renew_settled(&fences, &settled, cadence.0),
            )
            .await
            {
                Ok(result) => result,
                Err(_) => Err(AuthorityError::Unavailable {
                    endpoint: "the database".into(),
                    reason: format!(
                        "renewal: no answer within one renew interval ({}); the outcome is \
                         unknown and the next renewal is sent now",
                        humantime::format_duration(cadence.1)
                    ),
                }),
            };
            match result {
                Ok(outcomes) if outcomes.len() == members.len() => {
                    for ((_, tx), outcome) in members.iter().zip(outcomes) {
                        let _ = tx.send((sent, Ok(outcome)));
                    }
                }
                Ok(outcomes) => {
                    let reason = format!(
                        "renew returned {} outcomes for {} fences",
                        outcomes.len(),
                        members.len()
                    );
                    for (fence, tx) in &members {
                        let _ = tx.send((
                            sent,
                            Err(AuthorityError::Invalid {
                                key: fence.key.clone(),
                                reason: reason.clone(),
                            }),
                        ));
                    }
                }
                Err(e) => {
                    for (fence, tx) in &members {
                        let _ = tx.send((sent, Err(for_member(&e, &fence.key))));
                    }
                }
            }
            if let Some(own) = own.upgrade() {
                let _ = own.send(Command::BatchDone { cadence });
            }
        });
    }
}

/// A failed batch's error as one member's outcome: the same kind of
/// error, naming the member's lease and keeping the (redacted) endpoint the
/// authority named, so the supervisor's warning says where it failed.
fn for_member(error: &AuthorityError, key: &LeaseKey) -> AuthorityError {
    let renewing = |reason: &str| format!("renewing {key}: {reason}");
    match error {
        AuthorityError::Unavailable { endpoint, reason } => AuthorityError::Unavailable {
            endpoint: endpoint.clone(),
            reason: renewing(reason),
        },
        AuthorityError::Schema { endpoint, reason } => AuthorityError::Schema {
            endpoint: endpoint.clone(),
            reason: renewing(reason),
        },
        AuthorityError::WrongDatabase { endpoint, problems } => AuthorityError::WrongDatabase {
            endpoint: endpoint.clone(),
            problems: renewing(problems),
        },
        // No endpoint to keep: a request the authority refused before it
        // reached any database.
        other => AuthorityError::Invalid {
            key: key.clone(),
            reason: renewing(&other.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::authority::memory::MemoryAuthority;
    use crate::authority::{
        AcquireRequest, Acquired, DatabaseIdentity, EndReason, LeaseRecord, TenureRecord,
    };

    /// Counts renew round trips on top of the memory authority.
    struct Counting {
        inner: MemoryAuthority,
        calls: AtomicUsize,
        fences: AtomicUsize,
        /// Renew calls still to leave unanswered forever (a database that
        /// took the statement and never replied).
        hang: AtomicUsize,
    }

    #[async_trait]
    impl Authority for Counting {
        async fn identity(&self) -> Result<DatabaseIdentity, AuthorityError> {
            self.inner.identity().await
        }
        async fn acquire(&self, r: &AcquireRequest) -> Result<Acquired, AuthorityError> {
            self.inner.acquire(r).await
        }
        async fn renew(
            &self,
            fences: &[Fence],
            ttl: Duration,
        ) -> Result<Vec<Renewed>, AuthorityError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.fences.fetch_add(fences.len(), Ordering::SeqCst);
            let hang = self
                .hang
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if hang {
                std::future::pending::<()>().await;
            }
            self.inner.renew(fences, ttl).await
        }
        async fn release(&self, f: &Fence, r: EndReason) -> Result<(), AuthorityError> {
            self.inner.release(f, r).await
        }
        async fn observe(&self, c: &str) -> Result<Vec<LeaseRecord>, AuthorityError> {
            self.inner.observe(c).await
        }
        async fn history_before(
            &self,
            k: &LeaseKey,
            b: Option<crate::fence::Epoch>,
            l: usize,
        ) -> Result<Vec<TenureRecord>, AuthorityError> {
            self.inner.history_before(k, b, l).await
        }
        async fn record_outbound(
            &self,
            f: &Fence,
            n: u64,
            at: Option<chrono::DateTime<chrono::Utc>>,
        ) -> Result<(), AuthorityError> {
            self.inner.record_outbound(f, n, at).await
        }
        fn released(&self, c: &str) -> tokio::sync::watch::Receiver<u64> {
            self.inner.released(c)
        }
    }

    async fn grant(authority: &dyn Authority, name: &str) -> Fence {
        let request = AcquireRequest {
            key: LeaseKey::new("renew", name),
            holder: "host-a".into(),
            ttl: Duration::from_secs(10),
        };
        match authority.acquire(&request).await.unwrap() {
            Acquired::Granted(g) => g.fence,
            Acquired::Held { .. } => panic!("held"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn many_leases_renew_in_one_round_trip_per_interval() {
        let counting = Arc::new(Counting {
            inner: MemoryAuthority::new(),
            calls: AtomicUsize::new(0),
            fences: AtomicUsize::new(0),
            hang: AtomicUsize::new(0),
        });
        let renewer = Renewer::start(counting.clone());
        let interval = Duration::from_secs(2);
        let mut registrations = Vec::new();
        for i in 0..200 {
            let fence = grant(counting.as_ref(), &format!("lease-{i}")).await;
            registrations.push(renewer.register(fence, Duration::from_secs(10), interval));
        }
        for round in 1..=3 {
            for registration in &mut registrations {
                let (_, outcome) = registration.next().await.expect("renewer alive");
                assert!(matches!(outcome, Ok(Renewed::Extended { .. })));
            }
            assert_eq!(counting.calls.load(Ordering::SeqCst), round);
            assert_eq!(counting.fences.load(Ordering::SeqCst), 200 * round);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_registration_is_no_longer_renewed_and_stale_fences_report_lost() {
        let counting = Arc::new(Counting {
            inner: MemoryAuthority::new(),
            calls: AtomicUsize::new(0),
            fences: AtomicUsize::new(0),
            hang: AtomicUsize::new(0),
        });
        let renewer = Renewer::start(counting.clone());
        let ttl = Duration::from_secs(10);
        let interval = Duration::from_secs(2);
        let a = grant(counting.as_ref(), "a").await;
        let b = grant(counting.as_ref(), "b").await;
        let mut ra = renewer.register(a.clone(), ttl, interval);
        let rb = renewer.register(b, ttl, interval);
        ra.next().await.unwrap().1.unwrap();
        drop(rb);
        counting.inner.faults().steal(&a.key, "host-b");
        let (_, outcome) = ra.next().await.unwrap();
        assert_eq!(outcome.unwrap(), Renewed::Lost);
        // Round 1 renewed two fences, round 2 only the one still registered.
        assert_eq!(counting.fences.load(Ordering::SeqCst), 3);
    }

    /// A renewal that never answers is given up after one interval, and the
    /// next goes out then: a hung round trip costs one renewal, never the
    /// slack until the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_answers_is_given_up_after_one_interval() {
        let counting = Arc::new(Counting {
            inner: MemoryAuthority::new(),
            calls: AtomicUsize::new(0),
            fences: AtomicUsize::new(0),
            hang: AtomicUsize::new(1),
        });
        let renewer = Renewer::start(counting.clone());
        let interval = Duration::from_secs(2);
        let fence = grant(counting.as_ref(), "a").await;
        let mut registration = renewer.register(fence, Duration::from_secs(10), interval);
        let (first_sent, first) = registration.next().await.expect("renewer alive");
        assert!(
            matches!(first, Err(AuthorityError::Unavailable { .. })),
            "{first:?}"
        );
        let (second_sent, second) = registration.next().await.expect("renewer alive");
        assert!(matches!(second, Ok(Renewed::Extended { .. })), "{second:?}");
        assert_eq!(second_sent - first_sent, interval);
        assert_eq!(counting.calls.load(Ordering::SeqCst), 2);
    }

    /// A failed round trip reaches each supervisor as the authority's own
    /// error, naming the endpoint (the warning used to say "unavailable at
    /// : ...") and the member's lease.
    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_names_the_endpoint_and_the_lease() {
        let authority = MemoryAuthority::new();
        let renewer = Renewer::start(Arc::new(authority.clone()));
        let fence = grant(&authority, "a").await;
        let _failing = authority.faults().fail_renewals();
        let mut registration = renewer.register(
            fence.clone(),
            Duration::from_secs(10),
            Duration::from_secs(2),
        );
        let (_, outcome) = registration.next().await.expect("renewer alive");
        match outcome {
            Err(AuthorityError::Unavailable { endpoint, reason }) => {
                assert_eq!(endpoint, crate::authority::memory::MEMORY_ENDPOINT);
                assert!(
                    reason.starts_with(&format!("renewing {}: ", fence.key)),
                    "{reason}"
                );
            }
            other => panic!("expected the authority's unavailable error, got {other:?}"),
        }
    }
}
