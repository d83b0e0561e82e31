//! The Wasm runtime against purpose-built guests: the round trip through
//! the store, hard abort on revocation (CPU-bound and blocked in a host
//! call), refused writes after loss, limits, fresh memory per tenure, and
//! clear errors for bad components.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold_host::fence::{Fence, LeaseKey};
use leasehold_host::runtime::{
    CommitCounters, CompiledController, EngineConfig, GuestError, GuestInstance, GuestLimits,
    Reconciled, Runtime,
};
use leasehold_host::store::{ObjectKey, Origin, Store};
use leasehold_tests::{HookedStore, MemoryBackends, TEST_WAIT, guest, until, within};

const CLUSTER: &str = "rt";

/// One engine and one compilation shared by every test of this binary.
fn shared() -> &'static (Runtime, CompiledController) {
    static SHARED: OnceLock<(Runtime, CompiledController)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let runtime = Runtime::new(&EngineConfig {
            max_guests: 16,
            memory_bytes: 64 << 20,
            pooling: true,
            cache_dir: None,
        })
        .expect("engine");
        let compiled = runtime
            .load(
                "misbehaving",
                &guest("misbehaving"),
                GuestLimits::default(),
                Vec::new(),
            )
            .expect("load misbehaving");
        (runtime, compiled)
    })
}

fn runtime() -> Runtime {
    shared().0.clone()
}

fn misbehaving(_runtime: &Runtime, limits: GuestLimits) -> CompiledController {
    shared().1.with_limits(limits)
}

/// A fresh instance of `compiled` for `fence`, with its own revocation and
/// counters nobody reads.
async fn start(
    compiled: &CompiledController,
    fence: Fence,
    store: Arc<dyn Store>,
) -> GuestInstance {
    compiled
        .instantiate(fence, store, Default::default(), compiled.revocation())
        .await
        .expect("instantiate")
}

fn mark(name: &str) -> ObjectKey {
    ObjectKey {
        kind: "marks".into(),
        name: name.into(),
    }
}

/// Generous bound for "promptly": the goal is milliseconds, but a loaded CI
/// machine must not make the test flaky.
const PROMPT: Duration = Duration::from_secs(2);

#[tokio::test]
async fn guest_round_trip_reads_commits_and_logs_through_the_host() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    let compiled = misbehaving(&runtime, GuestLimits::default());
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let counters = Arc::new(CommitCounters::default());
    let mut guest = compiled
        .instantiate(
            grant.fence.clone(),
            backends.store.clone(),
            counters.clone(),
            compiled.revocation(),
        )
        .await
        .expect("instantiate");

    let description = guest.describe().await.expect("describe");
    assert_eq!(description.watches, vec!["cmd".to_string()]);
    assert_eq!(description.resync_period, None);

    assert_eq!(
        guest.reconcile("cmd", "ok").await.unwrap(),
        Reconciled::Done
    );
    let object = backends
        .store
        .get(CLUSTER, &mark("m-1"))
        .await
        .unwrap()
        .expect("the guest's commit landed");
    assert_eq!(object.value, "{}");
    assert_eq!(
        backends.store.written_by(CLUSTER, &mark("m-1")).unwrap(),
        Some(Origin::Guest {
            lease: "misbehaving".into(),
            epoch: grant.fence.epoch,
            holder: "host-a".into(),
        })
    );
    assert_eq!(counters.ok.load(Ordering::Relaxed), 1);

    // The guest reads its fence through the tenure interface.
    assert_eq!(
        guest.reconcile("cmd", "fence").await.unwrap(),
        Reconciled::RequeueAfter(Duration::from_millis(grant.fence.epoch.0))
    );
    assert_eq!(
        guest.reconcile("cmd", "log").await.unwrap(),
        Reconciled::Done
    );
    assert!(matches!(
        guest.reconcile("cmd", "nonsense").await.unwrap(),
        Reconciled::Failed { message, .. } if message.contains("unknown command")
    ));
}

#[tokio::test]
async fn spinning_guest_is_aborted_by_revocation() {
    let backends = MemoryBackends::new();
    let (store, mut hooks) = HookedStore::new(backends.store.clone());
    let runtime = runtime();
    let compiled = misbehaving(&runtime, GuestLimits::default());
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let revocation = compiled.revocation();
    let mut guest = compiled
        .instantiate(grant.fence, store, Default::default(), revocation.clone())
        .await
        .unwrap();
    let call = tokio::spawn(async move { guest.reconcile("cmd", "spin").await });
    // The guest reads marks/spin right before it starts spinning.
    assert_eq!(
        within(TEST_WAIT, "the guest reads marks/spin", hooks.gets.recv()).await,
        Some(mark("spin"))
    );
    revocation.revoke();
    let result = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the spinning guest stopped promptly")
        .unwrap();
    assert!(
        matches!(result, Err(GuestError::Aborted { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn guest_blocked_in_a_host_call_is_aborted_and_its_write_not_committed() {
    let backends = MemoryBackends::new();
    let (store, mut hooks) = HookedStore::new(backends.store.clone());
    store.hold_commits.store(true, Ordering::SeqCst);
    let runtime = runtime();
    let compiled = misbehaving(&runtime, GuestLimits::default());
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let revocation = compiled.revocation();
    let mut guest = compiled
        .instantiate(
            grant.fence,
            store.clone(),
            Default::default(),
            revocation.clone(),
        )
        .await
        .unwrap();
    let call = tokio::spawn(async move { guest.reconcile("cmd", "block").await });
    within(
        TEST_WAIT,
        "the guest's commit starts",
        hooks.commit_entered.recv(),
    )
    .await
    .expect("commit started");
    revocation.revoke();
    let result = tokio::time::timeout(PROMPT, call)
        .await
        .expect("the blocked guest stopped promptly")
        .unwrap();
    assert!(
        matches!(result, Err(GuestError::Aborted { .. })),
        "{result:?}"
    );
    // The host call's future was dropped, not left running.
    within(
        TEST_WAIT,
        "the held commit is dropped",
        hooks.commit_dropped.recv(),
    )
    .await
    .expect("held commit dropped");
    assert!(
        backends
            .store
            .get(CLUSTER, &mark("blocked"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store.commits_ok.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn writes_after_the_loss_are_all_refused() {
    let backends = MemoryBackends::new();
    let (store, _hooks) = HookedStore::new(backends.store.clone());
    let runtime = runtime();
    let compiled = misbehaving(&runtime, GuestLimits::default());
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let revocation = compiled.revocation();
    let counters = Arc::new(CommitCounters::default());
    let mut guest = compiled
        .instantiate(
            grant.fence.clone(),
            store.clone(),
            counters.clone(),
            revocation.clone(),
        )
        .await
        .unwrap();
    let call = tokio::spawn(async move { guest.reconcile("cmd", "hammer").await });
    // Let some writes land, then take the lease away behind the guest's back.
    until(TEST_WAIT, "5 of the guest's writes land", || {
        store.commits_ok.load(Ordering::SeqCst) >= 5
    })
    .await;
    let key = LeaseKey::new(CLUSTER, "misbehaving");
    let successor = backends.authority.faults().steal(&key, "host-b");
    assert!(successor.epoch > grant.fence.epoch);
    let landed_before_loss = store.commits_ok.load(Ordering::SeqCst);
    // The guest keeps hammering; every attempt is now refused by the fence.
    until(TEST_WAIT, "5 of the guest's writes are refused", || {
        counters.fenced.load(Ordering::SeqCst) >= 5
    })
    .await;
    revocation.revoke();
    let result = tokio::time::timeout(PROMPT, call)
        .await
        .expect("stopped")
        .unwrap();
    assert!(
        matches!(result, Err(GuestError::Aborted { .. })),
        "{result:?}"
    );
    assert_eq!(
        store.commits_ok.load(Ordering::SeqCst),
        landed_before_loss,
        "a write landed after the lease was lost"
    );
}

#[tokio::test]
async fn memory_exhaustion_tears_the_guest_down_and_the_host_goes_on() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    let limits = GuestLimits {
        memory_bytes: 16 << 20,
        ..GuestLimits::default()
    };
    let compiled = misbehaving(&runtime, limits);
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let mut guest = start(&compiled, grant.fence.clone(), backends.store.clone()).await;
    let result = guest.reconcile("cmd", "grow").await;
    assert!(
        matches!(result, Err(GuestError::OutOfMemory { limit, .. }) if limit == 16 << 20),
        "{result:?}"
    );
    // The instance is done for; a fresh one in the same tenure works.
    assert!(matches!(
        guest.reconcile("cmd", "ok").await,
        Err(GuestError::Poisoned { .. })
    ));
    drop(guest);
    let mut fresh = start(&compiled, grant.fence, backends.store.clone()).await;
    assert_eq!(
        fresh.reconcile("cmd", "ok").await.unwrap(),
        Reconciled::Done
    );
}

#[tokio::test]
async fn a_reconcile_past_its_deadline_is_torn_down() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    let limits = GuestLimits {
        reconcile_deadline: Duration::from_millis(200),
        ..GuestLimits::default()
    };
    let compiled = misbehaving(&runtime, limits);
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let mut guest = start(&compiled, grant.fence, backends.store.clone()).await;
    let started = std::time::Instant::now();
    let result = guest.reconcile("cmd", "spin").await;
    assert!(
        matches!(result, Err(GuestError::DeadlineExceeded { .. })),
        "{result:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(started.elapsed() < PROMPT);
}

#[tokio::test]
async fn a_panicking_guest_traps_without_harming_the_host() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    let compiled = misbehaving(&runtime, GuestLimits::default());
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let pill = ObjectKey {
        kind: "cmd".into(),
        name: "panic".into(),
    };
    backends
        .store
        .put(CLUSTER, &pill, "{}", None)
        .await
        .unwrap();
    let mut guest = start(&compiled, grant.fence.clone(), backends.store.clone()).await;
    let result = guest.reconcile("cmd", "panic").await;
    let Err(GuestError::Trap { message, .. }) = &result else {
        panic!("a panic must trap: {result:?}");
    };
    // The trap's report (a backtrace of guest function names) is host log
    // text: one line, its line breaks escaped.
    assert!(message.contains("\\n"), "{message}");
    assert!(!message.contains(['\n', '\r']), "{message:?}");
    let mut fresh = start(&compiled, grant.fence, backends.store.clone()).await;
    assert_eq!(
        fresh.reconcile("cmd", "ok").await.unwrap(),
        Reconciled::Done
    );
}

#[tokio::test]
async fn a_new_tenure_starts_from_fresh_guest_memory() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    let compiled = misbehaving(&runtime, GuestLimits::default());
    let first = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let mut guest = start(&compiled, first.fence.clone(), backends.store.clone()).await;
    let count = |n| Reconciled::RequeueAfter(Duration::from_millis(n));
    assert_eq!(guest.reconcile("cmd", "count").await.unwrap(), count(1));
    assert_eq!(guest.reconcile("cmd", "count").await.unwrap(), count(2));
    drop(guest);
    let key = LeaseKey::new(CLUSTER, "misbehaving");
    let second = backends.authority.faults().steal(&key, "host-a");
    assert!(second.epoch > first.fence.epoch);
    let mut guest = start(&compiled, second, backends.store.clone()).await;
    assert_eq!(guest.reconcile("cmd", "count").await.unwrap(), count(1));
}

fn compile_error(bytes: &[u8]) -> String {
    let runtime = runtime();
    match runtime.compile("bad", "bad.wasm", bytes, GuestLimits::default(), Vec::new()) {
        Ok(_) => panic!("a bad component was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_components_get_clear_errors() {
    let not_wasm = compile_error(b"hello, world, this is text");
    assert!(not_wasm.contains("not a WebAssembly file"), "{not_wasm}");
    assert!(not_wasm.contains("controller bad"), "{not_wasm}");

    let core = wat::parse_str("(module)").unwrap();
    let core = compile_error(&core);
    assert!(core.contains("core WebAssembly module"), "{core}");
    assert!(core.contains("wasm32-wasip2"), "{core}");

    // Which world a component targets is read from what it exports: a
    // component that exports no reconciler targets none, and says so.
    let empty = wat::parse_str("(component)").unwrap();
    let empty = compile_error(&empty);
    assert!(
        empty.contains("exports no leasehold:controller/reconciler"),
        "{empty}"
    );
    assert!(
        empty.contains(
            "leasehold:controller@0.1.0, leasehold:controller@0.2.0, leasehold:controller@0.3.0 and leasehold:controller@0.4.0"
        ),
        "{empty}"
    );

    let other_package = wat::parse_str(
        r#"(component (instance $r) (export "acme:controller/reconciler@1.0.0" (instance $r)))"#,
    )
    .unwrap();
    let other_package = compile_error(&other_package);
    assert!(
        other_package.contains("it targets acme:controller@1.0.0"),
        "{other_package}"
    );

    let mixed = wat::parse_str(
        r#"(component
             (import "leasehold:controller/tenure@9.0.0" (instance (export "current" (func))))
             (instance $r)
             (export "leasehold:controller/reconciler@0.2.0" (instance $r)))"#,
    )
    .unwrap();
    let mixed = compile_error(&mixed);
    assert!(mixed.contains("mixes versions"), "{mixed}");
    assert!(mixed.contains("tenure@9.0.0"), "{mixed}");

    // The right version, but an import the world does not have.
    let unknown_import = wat::parse_str(
        r#"(component
             (import "leasehold:extras/thing@0.2.0" (instance (export "current" (func))))
             (instance $r)
             (export "leasehold:controller/reconciler@0.2.0" (instance $r)))"#,
    )
    .unwrap();
    let unknown_import = compile_error(&unknown_import);
    assert!(
        unknown_import.contains("it targets leasehold:controller@0.2.0 but does not fit its world"),
        "{unknown_import}"
    );
    assert!(
        unknown_import.contains("leasehold:extras/thing@0.2.0"),
        "{unknown_import}"
    );

    // The right version, linked, but its reconciler lacks the functions.
    let hollow = wat::parse_str(
        r#"(component (instance $r) (export "leasehold:controller/reconciler@0.1.0" (instance $r)))"#,
    )
    .unwrap();
    let hollow = compile_error(&hollow);
    assert!(
        hollow.contains(
            "does not export leasehold:controller/reconciler@0.1.0 as that version defines it"
        ),
        "{hollow}"
    );

    let truncated = compile_error(&guest_bytes()[..1000]);
    assert!(truncated.contains("cannot compile it"), "{truncated}");
}

fn guest_bytes() -> Vec<u8> {
    std::fs::read(guest("misbehaving")).unwrap()
}

#[tokio::test]
async fn a_failure_during_instantiation_is_a_clear_error_and_the_host_goes_on() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    // The guest's initial linear memory alone is larger than this limit, so
    // instantiation itself fails.
    let tiny = misbehaving(
        &runtime,
        GuestLimits {
            memory_bytes: 64 * 1024,
            ..GuestLimits::default()
        },
    );
    let grant = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let result = tiny
        .instantiate(
            grant.fence.clone(),
            backends.store.clone(),
            Default::default(),
            tiny.revocation(),
        )
        .await;
    match result {
        Err(GuestError::OutOfMemory {
            controller,
            limit,
            fence,
        }) => {
            assert_eq!(controller, "misbehaving");
            assert_eq!(limit, 64 * 1024);
            assert!(fence.contains("epoch"), "{fence}");
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("instantiation succeeded under a 64 KiB limit"),
    }
    // Too few instances allowed: also refused during instantiation.
    let cramped = misbehaving(
        &runtime,
        GuestLimits {
            instances: 0,
            ..GuestLimits::default()
        },
    );
    let result = cramped
        .instantiate(
            grant.fence.clone(),
            backends.store.clone(),
            Default::default(),
            cramped.revocation(),
        )
        .await;
    assert!(
        matches!(result, Err(GuestError::Trap { .. })),
        "{:?}",
        result.err()
    );
    // The same compiled controller with sane limits still runs.
    let mut fine = misbehaving(&runtime, GuestLimits::default())
        .instantiate(
            grant.fence,
            backends.store.clone(),
            Default::default(),
            tiny.revocation(),
        )
        .await
        .unwrap();
    assert_eq!(fine.reconcile("cmd", "ok").await.unwrap(), Reconciled::Done);
}

#[tokio::test]
async fn a_trap_during_instantiation_is_a_clear_error_and_the_host_goes_on() {
    let backends = MemoryBackends::new();
    let runtime = runtime();
    // The component itself is well-formed: it compiles and fits the world.
    let trapping = runtime
        .load(
            "start-trap",
            &guest("start_trap"),
            GuestLimits::default(),
            Vec::new(),
        )
        .expect("a component that traps only when started still loads");
    let grant = backends.grant(CLUSTER, "start-trap", "host-a").await;
    let result = trapping
        .instantiate(
            grant.fence,
            backends.store.clone(),
            Default::default(),
            trapping.revocation(),
        )
        .await;
    match result {
        Err(GuestError::Trap {
            controller,
            fence,
            message,
        }) => {
            assert_eq!(controller, "start-trap");
            assert!(fence.contains("epoch"), "{fence}");
            assert!(message.contains("unreachable"), "{message}");
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("a guest whose start traps was instantiated"),
    }
    // Other controllers on the same engine are unaffected.
    let other = backends.grant(CLUSTER, "misbehaving", "host-a").await;
    let mut fine = start(
        &misbehaving(&runtime, GuestLimits::default()),
        other.fence,
        backends.store.clone(),
    )
    .await;
    assert_eq!(fine.reconcile("cmd", "ok").await.unwrap(), Reconciled::Done);
}
