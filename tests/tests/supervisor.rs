//! The supervisor on the memory backends with a real guest component:
//! lease loss observed and the guest hard-aborted, self-fencing at the
//! renew deadline, guest restarts inside a tenure, identity changes, and
//! the orderly release on shutdown. Ordered by notifications (store hooks,
//! status watches), with short lease timings.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold_host::authority::{Authority, EndReason, LeaseTiming};
use leasehold_host::fence::LeaseKey;
use leasehold_host::runtime::{CompiledController, EngineConfig, GuestLimits, Runtime};
use leasehold_host::status::{ControllerState, ControllerStatus, Status};
use leasehold_host::store::{ObjectKey, Store};
use leasehold_host::supervisor::{IdentityCheck, Renewer, Supervisor, SupervisorConfig};
use leasehold_tests::{HookedStore, MemoryBackends, StoreHooks, guest};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const CLUSTER: &str = "sup";
const NAME: &str = "misbehaving";
/// Bound on any single wait: a hang detector, not a timing claim.
const WAIT: Duration = leasehold_tests::TEST_WAIT;

fn compiled() -> CompiledController {
    static SHARED: OnceLock<CompiledController> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let runtime = Runtime::new(&EngineConfig {
                max_guests: 16,
                memory_bytes: 64 << 20,
                pooling: true,
                cache_dir: None,
            })
            .expect("engine");
            runtime
                .load(NAME, &guest(NAME), GuestLimits::default(), Vec::new())
                .expect("load")
        })
        .clone()
}

fn timing() -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::from_secs(2),
        renew_interval: Duration::from_millis(50),
        renew_deadline: Duration::from_millis(400),
    }
}

struct Harness {
    backends: MemoryBackends,
    store: Arc<HookedStore>,
    hooks: StoreHooks,
    status: Arc<ControllerStatus>,
    identity: watch::Sender<IdentityCheck>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Harness {
    async fn start() -> Self {
        Self::start_with_commands(&[]).await
    }

    /// Start with `cmd/<name>` of each of `commands` already stored, so the
    /// first tenure's resync is the first to see them.
    async fn start_with_commands(commands: &[&str]) -> Self {
        let backends = MemoryBackends::new();
        for name in commands {
            let key = ObjectKey {
                kind: "cmd".into(),
                name: (*name).into(),
            };
            backends.store.put(CLUSTER, &key, "{}", None).await.unwrap();
        }
        Self::start_on(backends).await
    }

    /// Start a supervisor on `backends` (those of a supervisor that
    /// stopped: its lease, its tenures and its store).
    async fn start_on(backends: MemoryBackends) -> Self {
        Self::start_timed(backends, timing()).await
    }

    /// [`Harness::start_on`] with lease timings `timing`.
    async fn start_timed(backends: MemoryBackends, timing: LeaseTiming) -> Self {
        let (store, hooks) = HookedStore::new(backends.store.clone());
        let status = Status::new(CLUSTER.into(), "host-a".into(), &[NAME.to_string()]);
        let status = status.controller(NAME).unwrap();
        let identity = backends.authority.identity().await.unwrap();
        let (identity_tx, identity_rx) = watch::channel(IdentityCheck::Verified(identity));
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let supervisor = Supervisor::new(
            SupervisorConfig {
                cluster: CLUSTER.into(),
                holder: "host-a".into(),
                timing,
                backoff_min: Duration::from_millis(10),
                backoff_max: Duration::from_millis(100),
                max_queue: 1000,
                shutdown_grace: Duration::from_secs(2),
            },
            backends.authority.clone(),
            Renewer::start(backends.authority.clone()),
            store.clone(),
            compiled(),
            status.clone(),
            identity_rx,
            shutdown_rx,
        );
        let task = tokio::spawn(supervisor.run());
        Self {
            backends,
            store,
            hooks,
            status,
            identity: identity_tx,
            shutdown: shutdown_tx,
            task,
        }
    }

    async fn wait_for(&self, what: &str, f: impl Fn(&ControllerState) -> bool) -> ControllerState {
        let mut rx = self.status.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|s| f(s)))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out waiting until {what}; state {:?}",
                    self.status.get()
                )
            })
            .expect("status alive")
            .clone()
    }

    async fn leading(&self) -> u64 {
        match self
            .wait_for("leading", |s| {
                matches!(s, ControllerState::Leading { problem: None, .. })
            })
            .await
        {
            ControllerState::Leading { epoch, .. } => epoch,
            _ => unreachable!(),
        }
    }

    async fn command(&self, name: &str) {
        let key = ObjectKey {
            kind: "cmd".into(),
            name: name.into(),
        };
        self.backends
            .store
            .put(CLUSTER, &key, "{}", None)
            .await
            .unwrap();
    }

    fn key() -> LeaseKey {
        LeaseKey::new(CLUSTER, NAME)
    }

    fn count(
        map: &std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
        key: &str,
    ) -> u64 {
        map.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

/// The reasons the `why-*` command `command` recorded, in call order
/// (the fixture's `marks/<command>-<epoch>-<n>`, n counting the calls of
/// the tenure's guest).
async fn reasons(store: &dyn Store, command: &str) -> Vec<String> {
    let page = store
        .list(CLUSTER, "marks", None, 500)
        .await
        .expect("list marks");
    let mut calls: Vec<(u64, u64, String)> = page
        .objects
        .into_iter()
        .filter(|mark| {
            mark.name
                .strip_prefix(command)
                .and_then(|rest| rest.strip_prefix('-'))
                .and_then(|rest| rest.split_once('-'))
                .is_some_and(|(epoch, n)| {
                    [epoch, n]
                        .iter()
                        .all(|part| part.bytes().all(|b| b.is_ascii_digit()))
                })
        })
        .map(|mark| {
            let value: serde_json::Value = serde_json::from_str(&mark.value).expect("JSON");
            (
                value["epoch"].as_u64().expect("epoch"),
                value["call"].as_u64().expect("call"),
                value["reason"].as_str().expect("reason").to_string(),
            )
        })
        .collect();
    calls.sort();
    calls.into_iter().map(|(_, _, reason)| reason).collect()
}

/// Wait, by the store's change feed, until `command` recorded exactly
/// `expected`; fails at once on anything that is not on the way there.
async fn reasons_reach(store: &dyn Store, command: &str, expected: &[&str]) {
    let mut feed = store.watch(CLUSTER);
    leasehold_tests::within(
        WAIT,
        &format!("{command} recorded the reasons {expected:?}"),
        async {
            loop {
                feed.borrow_and_update();
                let seen = reasons(store, command).await;
                assert!(
                    seen.len() <= expected.len() && seen[..] == expected[..seen.len()],
                    "{command} recorded {seen:?}, expected {expected:?}"
                );
                if seen.len() == expected.len() {
                    return;
                }
                feed.changed().await.expect("the store's feed is alive");
            }
        },
    )
    .await;
}

/// Each reconcile is told why it runs: the tenure's resync first, then a
/// change of the object, the guest's own timer (requeue-after), and the
/// retry of a failed reconcile.
#[tokio::test]
async fn the_worker_tells_each_reconcile_why_it_runs() {
    let h = Harness::start_with_commands(&["why-plain", "why-wake", "why-fail"]).await;
    h.leading().await;
    let store = h.backends.store.as_ref();
    // why-wake asks for a requeue unless it is one; why-fail fails unless
    // it is a retry.
    reasons_reach(store, "why-plain", &["resync"]).await;
    reasons_reach(store, "why-wake", &["resync", "requeue"]).await;
    reasons_reach(store, "why-fail", &["resync", "retry"]).await;
    h.command("why-plain").await;
    reasons_reach(store, "why-plain", &["resync", "change"]).await;
    h.command("why-wake").await;
    reasons_reach(
        store,
        "why-wake",
        &["resync", "requeue", "change", "requeue"],
    )
    .await;
    h.command("why-fail").await;
    reasons_reach(store, "why-fail", &["resync", "retry", "change", "retry"]).await;
    h.shutdown.send(true).unwrap();
    leasehold_tests::within(WAIT, "the supervisor stopped", h.task)
        .await
        .unwrap();
}

/// A deletion committed while no tenure runs wakes the next tenure: the
/// last tenure's release recorded where it settled in the change stream,
/// and the next tenure's worker reads the stream from there. (Its resync
/// alone cannot show it: the object is gone.)
#[tokio::test]
async fn a_deletion_committed_between_tenures_wakes_the_next_one() {
    let h = Harness::start_with_commands(&["why-plain"]).await;
    h.leading().await;
    let store = h.backends.store.clone();
    reasons_reach(store.as_ref(), "why-plain", &["resync"]).await;
    h.shutdown.send(true).unwrap();
    leasehold_tests::within(WAIT, "the first supervisor stopped", h.task)
        .await
        .unwrap();
    // No tenure runs: the object is deleted, and nothing else changes.
    let command = ObjectKey {
        kind: "cmd".into(),
        name: "why-plain".into(),
    };
    store.delete(CLUSTER, &command, None).await.unwrap();
    let h = Harness::start_on(h.backends).await;
    assert!(h.leading().await > 1, "a new tenure");
    reasons_reach(store.as_ref(), "why-plain", &["resync", "change"]).await;
    h.shutdown.send(true).unwrap();
    leasehold_tests::within(WAIT, "the second supervisor stopped", h.task)
        .await
        .unwrap();
}

/// A lease's first tenure records where its controller starts reading
/// the change stream before its guest starts, not only with its first
/// renewal: a first tenure that dies before that renewal still leaves its
/// successor a position to read on from (else the successor would start
/// at its own head, and a deletion in between would reach no one).
#[tokio::test]
async fn a_first_tenure_records_its_starting_position_before_its_first_renewal() {
    let backends = MemoryBackends::new();
    let h = Harness::start_timed(
        backends,
        LeaseTiming {
            ttl: Duration::from_secs(120),
            // No renewal within the test.
            renew_interval: Duration::from_secs(60),
            renew_deadline: Duration::from_secs(90),
        },
    )
    .await;
    h.leading().await;
    // The host dies: no renewal, no release.
    h.task.abort();
    let _ = h.task.await;
    h.backends
        .authority
        .faults()
        .expire(&Harness::key())
        .expect("the lease exists");
    let successor = h.backends.grant(CLUSTER, NAME, "host-b").await;
    assert!(
        successor.settled.is_some(),
        "the first tenure left no position: {successor:?}"
    );
}

fn mark_key(name: &str) -> ObjectKey {
    ObjectKey {
        kind: "marks".into(),
        name: name.into(),
    }
}

#[tokio::test]
async fn lease_loss_is_observed_and_the_working_guest_is_aborted() {
    let mut h = Harness::start().await;
    let epoch = h.leading().await;
    // Work started: the guest reads marks/spin, then spins.
    h.command("spin").await;
    assert_eq!(
        tokio::time::timeout(WAIT, h.hooks.gets.recv())
            .await
            .unwrap_or_else(|_| panic!("the guest read nothing within {WAIT:?}")),
        Some(mark_key("spin"))
    );
    // Loss injected behind the holder's back.
    let successor = h
        .backends
        .authority
        .faults()
        .steal(&Harness::key(), "host-b");
    assert!(successor.epoch.0 > epoch);
    // The loss is observed at the next renewal and the guest aborted.
    let state = h
        .wait_for("not leading", |s| {
            !matches!(s, ControllerState::Leading { .. })
        })
        .await;
    assert!(
        matches!(state, ControllerState::Failing { .. }),
        "{state:?}"
    );
    assert!(!h.status.leading(), "the leader metric must read 0");
    assert_eq!(Harness::count(&h.status.metrics.losses, "renew_refused"), 1);
    assert_eq!(Harness::count(&h.status.metrics.aborts, "lease_lost"), 1);
    // The successor holds the lease; this replica stands by.
    h.wait_for(
        "standby",
        |s| matches!(s, ControllerState::Standby { holder: Some(x) } if x == "host-b"),
    )
    .await;
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap_or_else(|_| panic!("the supervisor did not stop within {WAIT:?} of shutdown"))
        .expect("the supervisor task panicked");
}

#[tokio::test]
async fn holder_fences_itself_at_the_renew_deadline() {
    let mut h = Harness::start().await;
    let epoch = h.leading().await;
    let hold = h.backends.authority.faults().hold_renewals();
    tokio::time::timeout(WAIT, hold.parked(1))
        .await
        .unwrap_or_else(|_| panic!("no renewal was held within {WAIT:?}"));
    let state = h
        .wait_for("not leading", |s| {
            !matches!(s, ControllerState::Leading { .. })
        })
        .await;
    assert!(
        matches!(state, ControllerState::Failing { ref reason } if reason.contains(&format!("epoch {epoch}"))),
        "{state:?}"
    );
    assert_eq!(
        Harness::count(&h.status.metrics.losses, "renew_deadline"),
        1
    );
    drop(hold);
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap_or_else(|_| panic!("the supervisor did not stop within {WAIT:?} of shutdown"))
        .expect("the supervisor task panicked");
}

#[tokio::test]
async fn a_trapping_guest_is_restarted_inside_the_same_tenure() {
    let mut h = Harness::start().await;
    let epoch = h.leading().await;
    h.command("panic").await;
    h.wait_for("guest restarting", |s| {
        matches!(
            s,
            ControllerState::Leading {
                problem: Some(_),
                ..
            }
        )
    })
    .await;
    // Remove the poison pill; the restarted guest then does real work under
    // the same epoch.
    let pill = ObjectKey {
        kind: "cmd".into(),
        name: "panic".into(),
    };
    h.backends.store.delete(CLUSTER, &pill, None).await.unwrap();
    h.command("ok").await;
    tokio::time::timeout(WAIT, h.hooks.commit_landed.recv())
        .await
        .expect("a commit landed after the restart")
        .unwrap();
    assert_eq!(h.leading().await, epoch, "still the same tenure");
    assert!(Harness::count(&h.status.metrics.aborts, "trap") >= 1);
    assert_eq!(
        h.status
            .metrics
            .acquisitions
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        h.store.commits_ok.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap_or_else(|_| panic!("the supervisor did not stop within {WAIT:?} of shutdown"))
        .expect("the supervisor task panicked");
}

#[tokio::test]
async fn a_database_identity_change_ends_the_tenure_and_blocks_acquiring() {
    let mut h = Harness::start().await;
    h.leading().await;
    h.identity
        .send(IdentityCheck::Mismatch("database id changed".into()))
        .unwrap();
    let state = h
        .wait_for("failing", |s| matches!(s, ControllerState::Failing { reason } if reason.contains("database id changed")))
        .await;
    assert!(!matches!(state, ControllerState::Leading { .. }));
    assert_eq!(
        Harness::count(&h.status.metrics.losses, "identity_changed"),
        1
    );
    // It does not re-acquire while the identity is wrong: the lease is free
    // for another holder.
    let other = h.backends.grant(CLUSTER, NAME, "host-b").await;
    assert_eq!(other.fence.holder, "host-b");
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap_or_else(|_| panic!("the supervisor did not stop within {WAIT:?} of shutdown"))
        .expect("the supervisor task panicked");
}

#[tokio::test]
async fn shutdown_releases_the_lease_for_an_immediate_takeover() {
    let mut h = Harness::start().await;
    let epoch = h.leading().await;
    h.command("ok").await;
    tokio::time::timeout(WAIT, h.hooks.commit_landed.recv())
        .await
        .unwrap_or_else(|_| panic!("no commit of the guest landed within {WAIT:?}"))
        .expect("the store's hooks are alive");
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap_or_else(|_| panic!("the supervisor did not stop within {WAIT:?} of shutdown"))
        .expect("the supervisor task panicked");
    assert_eq!(h.status.get(), ControllerState::Stopped);
    let history = h
        .backends
        .authority
        .history(&Harness::key(), 10)
        .await
        .unwrap();
    let tenure = history
        .iter()
        .find(|t| t.epoch.0 == epoch)
        .expect("tenure recorded");
    assert_eq!(tenure.end_reason, Some(EndReason::Released));
    assert_eq!(tenure.writes, 1);
    // Released means free now, not after the ttl.
    let successor = h.backends.grant(CLUSTER, NAME, "host-b").await;
    assert_eq!(successor.fence.epoch.0, epoch + 1);
}

#[tokio::test]
async fn closed_channels_do_not_stall_the_shutdown() {
    // The service drops the identity check before the supervisors finish; a
    // closed watch is always ready, and must not starve the tenure loop.
    let mut h = Harness::start().await;
    let epoch = h.leading().await;
    let (closed, _) = watch::channel(IdentityCheck::Pending);
    drop(std::mem::replace(&mut h.identity, closed));
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .expect("the supervisor stopped")
        .unwrap();
    let history = h
        .backends
        .authority
        .history(&Harness::key(), 10)
        .await
        .unwrap();
    let tenure = history.iter().find(|t| t.epoch.0 == epoch).unwrap();
    assert_eq!(tenure.end_reason, Some(EndReason::Released));
}
