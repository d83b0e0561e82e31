//! Hard abort (G3) of an interpreter guest (the Python and JavaScript
//! `misbehaving` fixtures), on the memory backends: the fixture compiled
//! once per test process, and the three scenarios their tests share — the
//! control that runs and commits when left alone, a guest spinning in its
//! reconcile aborted on loss, and one blocked in a host call aborted with
//! its write dropped.
//!
//! Each fixture answers the same commands: reconciling `cmd/spin` reads
//! `marks/spin` and then spins in its own language, `cmd/block` commits a
//! create of `marks/blocked`, `cmd/ok` one of `marks/ok`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use leasehold_host::authority::Grant;
use leasehold_host::runtime::{
    CompiledController, EngineConfig, GuestError, GuestInstance, GuestLimits, Reconciled,
    Revocation, Runtime,
};
use leasehold_host::store::{ObjectKey, Origin, Store as _};
use tokio::task::JoinHandle;

use crate::{HookedStore, MemoryBackends, StoreHooks, TEST_WAIT, guest, guest_dir, within};

/// Generous bound for "promptly": an abort takes an epoch tick or less,
/// but a loaded CI machine must not make the test flaky.
pub const PROMPT: Duration = Duration::from_secs(2);

/// The holder of the fixture's tenure in every scenario.
const HOLDER: &str = "host-a";

/// An interpreter guest's hard-abort fixture, compiled on first use.
pub struct Fixture {
    /// The component's name (its `.wasm` in the guest folder), also the
    /// controller's and the lease's name.
    pub component: &'static str,
    /// The cluster the scenarios run in.
    pub cluster: &'static str,
    /// The guest's language, as the failure messages name it.
    pub language: &'static str,
    compiled: OnceLock<CompiledController>,
}

/// A tenure of the fixture on fresh memory backends, behind a
/// [`HookedStore`].
pub struct Started {
    /// The backends the hooked store wraps.
    pub backends: MemoryBackends,
    /// The store the guest writes through.
    pub store: Arc<HookedStore>,
    /// What the store reports.
    pub hooks: StoreHooks,
    /// The tenure's grant.
    pub grant: Grant,
    /// The tenure's revocation.
    pub revocation: Revocation,
    /// The instance.
    pub guest: GuestInstance,
}

/// The key `marks/<name>` the fixture reads or writes.
pub fn mark(name: &str) -> ObjectKey {
    ObjectKey {
        kind: "marks".into(),
        name: name.into(),
    }
}

impl Fixture {
    /// The fixture `component`, run in `cluster`, written in `language`.
    pub const fn new(
        component: &'static str,
        cluster: &'static str,
        language: &'static str,
    ) -> Self {
        Self {
            component,
            cluster,
            language,
            compiled: OnceLock::new(),
        }
    }

    /// The fixture, compiled once per test process on an engine of its
    /// own (with the tests' on-disk compile cache).
    pub fn compiled(&self) -> &CompiledController {
        self.compiled.get_or_init(|| {
            let started = Instant::now();
            let runtime = Runtime::new(&EngineConfig {
                max_guests: 4,
                memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
                pooling: true,
                cache_dir: Some(guest_dir().join("../../leasehold-test-cache")),
            })
            .expect("build the Wasm engine");
            let compiled = runtime
                .load(
                    self.component,
                    &guest(self.component),
                    GuestLimits::default(),
                    Vec::new(),
                )
                .unwrap_or_else(|e| panic!("load {}: {e}", self.component));
            eprintln!("{}: loaded in {:?}", self.component, started.elapsed());
            compiled
        })
    }

    /// A tenure of the fixture on fresh backends; with `hold_commits` the
    /// store holds every commit from the start.
    pub async fn start(&self, hold_commits: bool) -> Started {
        let backends = MemoryBackends::new();
        let (store, hooks) = HookedStore::new(backends.store.clone());
        store.hold_commits.store(hold_commits, Ordering::SeqCst);
        let compiled = self.compiled();
        let grant = backends.grant(self.cluster, self.component, HOLDER).await;
        let revocation = compiled.revocation();
        let guest = compiled
            .instantiate(
                grant.fence.clone(),
                store.clone(),
                Default::default(),
                revocation.clone(),
            )
            .await
            .expect("instantiate");
        Started {
            backends,
            store,
            hooks,
            grant,
            revocation,
            guest,
        }
    }

    /// Revoke the tenure of the guest running `call` and await the call's
    /// result, which must come within [`PROMPT`]; says how long it took.
    /// `what` names the guest's state (`spinning`, `blocked`).
    async fn revoke_and_await(
        &self,
        revocation: &Revocation,
        call: JoinHandle<Result<Reconciled, GuestError>>,
        what: &str,
    ) -> Result<Reconciled, GuestError> {
        let revoked = Instant::now();
        revocation.revoke();
        let result = tokio::time::timeout(PROMPT, call)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the {what} {} guest did not stop within {PROMPT:?}",
                    self.language
                )
            })
            .expect("the reconcile task ran to its end");
        eprintln!(
            "{}: {what} guest aborted in {:?}",
            self.component,
            revoked.elapsed()
        );
        result
    }

    /// The control for the two abort scenarios: the same fixture, the
    /// same store wrapper, no revocation: its write lands.
    pub async fn runs_and_commits_when_left_alone(&self) {
        let Started {
            backends,
            store,
            grant,
            mut guest,
            ..
        } = self.start(false).await;
        assert_eq!(guest.describe().await.unwrap().watches, ["cmd"]);
        assert_eq!(
            guest.reconcile("cmd", "ok").await.unwrap(),
            Reconciled::Done
        );
        assert_eq!(store.commits_ok.load(Ordering::SeqCst), 1);
        assert_eq!(
            backends
                .store
                .written_by(self.cluster, &mark("ok"))
                .unwrap(),
            Some(Origin::Guest {
                lease: self.component.into(),
                epoch: grant.fence.epoch,
                holder: HOLDER.into(),
            })
        );
    }

    /// A guest spinning in its reconcile is interrupted by the epoch
    /// deadline once its tenure is revoked, promptly, naming the
    /// controller and the tenure, and commits nothing.
    pub async fn spinning_guest_is_aborted_on_loss(&self) {
        let Started {
            store,
            mut hooks,
            revocation,
            mut guest,
            ..
        } = self.start(false).await;
        let call = tokio::spawn(async move { guest.reconcile("cmd", "spin").await });
        // The guest reads marks/spin right before its endless loop.
        assert_eq!(
            within(TEST_WAIT, "the guest reads marks/spin", hooks.gets.recv()).await,
            Some(mark("spin"))
        );
        let result = self.revoke_and_await(&revocation, call, "spinning").await;
        match result {
            Err(GuestError::Aborted { controller, fence }) => {
                assert_eq!(controller, self.component);
                assert!(fence.contains(HOLDER), "{fence}");
            }
            other => panic!("expected an abort, got {other:?}"),
        }
        assert_eq!(store.commits_ok.load(Ordering::SeqCst), 0);
    }

    /// A guest blocked in a host call (a held commit) is aborted once its
    /// tenure is revoked, promptly; the call's future is dropped with it
    /// and nothing it had in flight lands, even once commits flow again.
    pub async fn blocked_guest_is_aborted_and_its_write_dropped(&self) {
        let Started {
            backends,
            store,
            mut hooks,
            revocation,
            mut guest,
            ..
        } = self.start(true).await;
        let call = tokio::spawn(async move { guest.reconcile("cmd", "block").await });
        within(
            TEST_WAIT,
            "the guest's commit reaches the store",
            hooks.commit_entered.recv(),
        )
        .await
        .expect("commit started");
        let result = self.revoke_and_await(&revocation, call, "blocked").await;
        assert!(
            matches!(&result, Err(GuestError::Aborted { controller, .. }) if controller == self.component),
            "{result:?}"
        );
        // The host call's future was dropped with the guest, not left
        // running.
        within(
            TEST_WAIT,
            "the held commit is dropped",
            hooks.commit_dropped.recv(),
        )
        .await
        .expect("held commit dropped");
        // Nothing it had in flight lands, even once commits flow again.
        store.hold_commits.store(false, Ordering::SeqCst);
        assert_eq!(
            backends
                .store
                .get(self.cluster, &mark("blocked"))
                .await
                .unwrap(),
            None
        );
        assert_eq!(store.commits_ok.load(Ordering::SeqCst), 0);
    }
}
