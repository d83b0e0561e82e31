//! The Python example scheduler (`controllers/scheduler-py`, built with
//! componentize-py by `cargo xtask guests` into `scheduler-py.wasm`) as a
//! component in the host runtime on the memory backends: it loads under
//! the host's default guest limits, assigns tasks within capacity in
//! fenced commits, a write after the lease is lost is fenced and written
//! by nobody, a successor leads at the next epoch, and a revoked tenure is
//! aborted before it writes.
//!
//! Hard abort (G3) of an interpreter guest, with the `misbehaving-py`
//! fixture (`tests/fixtures/python/misbehaving-py`, the Python SDK): a
//! guest spinning in pure Python inside its reconcile is interrupted by
//! the epoch deadline, and one blocked in a host call has that call's
//! future dropped, promptly, and nothing it had in flight is written.
//!
//! On PostgreSQL with real processes: two `leasehold` hosts run the Python
//! scheduler, the leader is SIGKILLed, the other leads at the next epoch
//! and goes on assigning, and a write of the killed tenure's epoch is
//! refused by the database's fence check, as a Rust guest's would be.
//!
//! The on-disk compile cache spares a restarted host the compilation of
//! an unchanged 18 MiB component: a new engine on the same cache folder
//! reads it instead of compiling it.
//!
//! Each component is compiled once per test process (and cached on disk),
//! so the tests share that cost.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leasehold_host::db::Database;
use leasehold_host::fence::{Epoch, Fence, LeaseKey};
use leasehold_host::runtime::{
    CacheStats, EngineConfig, GuestError, GuestLimits, Reconciled, Runtime,
};
use leasehold_host::store::postgres::PostgresStore;
use leasehold_host::store::{ObjectKey, Op, Store, StoreError};
use leasehold_tests::TempDir;
use leasehold_tests::faults::rig::{Rig, RigSpec};
use leasehold_tests::harness::{CommitFault, ComponentHarness};
use leasehold_tests::interpreter_abort::Fixture;
use leasehold_tests::process::{free_port, run_to_end};
use leasehold_tests::scheduler_component::{self, epochs, pending_names};
use leasehold_tests::{MemoryBackends, guest, guest_dir};
use serde_json::json;

const COMPONENT: &str = "scheduler-py";
/// The hard-abort fixture's component.
const MISBEHAVING: &str = "misbehaving-py";
const NODES: &str = "nodes";
const TASKS: &str = "tasks";
const ASSIGNED: &str = "Assigned";

async fn load() -> ComponentHarness {
    scheduler_component::load(COMPONENT).await
}

#[tokio::test]
async fn the_python_scheduler_assigns_tasks_within_capacity_in_fenced_commits() {
    scheduler_component::assigns_tasks_within_capacity_in_fenced_commits(COMPONENT).await;
}

#[tokio::test]
async fn a_python_guests_write_after_loss_is_fenced_and_the_successor_leads() {
    let mut h = load().await;
    h.seed(NODES, "n1", &json!({ "capacity": 1 })).await;
    h.seed(TASKS, "t1", &json!({ "status": "pending" })).await;
    // Another replica takes the lease just before the guest's commit.
    h.fail_commit(1, CommitFault::Fenced);

    assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Fenced);

    assert_eq!(h.commit_attempts(), 1, "no retry after fenced");
    assert_eq!(h.counters().fenced.load(Ordering::SeqCst), 1);
    assert_eq!(pending_names(&h).await, ["t1"]);
    assert!(h.events_with_reason(ASSIGNED).await.is_empty());
    // Still deposed: the store fences it again, whatever the guest holds.
    assert_eq!(h.reconcile(NODES, "n1").await, Reconciled::Fenced);
    assert_eq!(h.history().await[0].writes, 0);

    let successor = h.new_tenure().await;
    assert_eq!(successor.epoch, Epoch(3), "after the rival's epoch 2");
    assert_eq!(h.reconcile(TASKS, "t1").await, Reconciled::Done);
    assert_eq!(
        epochs(&h.events_with_reason(ASSIGNED).await),
        [3],
        "assigned once, by the successor"
    );
}

#[tokio::test]
async fn a_revoked_python_tenure_is_aborted_before_any_write() {
    let mut h = load().await;
    h.seed(NODES, "n1", &json!({ "capacity": 1 })).await;
    h.seed(TASKS, "t1", &json!({ "status": "pending" })).await;
    h.revoke();

    let result = h.try_reconcile(TASKS, "t1").await;

    assert!(
        matches!(result, Err(GuestError::Aborted { .. })),
        "{result:?}"
    );
    assert_eq!(h.commit_attempts(), 0);
    assert_eq!(pending_names(&h).await, ["t1"]);
}

/// The hard-abort fixture (`tests/fixtures/python/misbehaving-py`): it
/// spins in pure Python.
static FIXTURE: Fixture = Fixture::new(MISBEHAVING, "py-abort", "Python");

#[tokio::test]
async fn the_python_fixture_runs_and_commits_when_left_alone() {
    FIXTURE.runs_and_commits_when_left_alone().await;
}

#[tokio::test]
async fn a_python_guest_spinning_in_its_reconcile_is_aborted_on_loss() {
    FIXTURE.spinning_guest_is_aborted_on_loss().await;
}

#[tokio::test]
async fn a_python_guest_blocked_in_a_host_call_is_aborted_and_its_write_dropped() {
    FIXTURE
        .blocked_guest_is_aborted_and_its_write_dropped()
        .await;
}

/// A write of `fence`'s tenure straight to the database, as its guest
/// would make it: a create of `probes/<name>`.
async fn write_as(store: &PostgresStore, fence: &Fence, name: &str) -> Result<u64, StoreError> {
    store
        .commit_fenced(
            fence,
            &[Op::Create {
                key: ObjectKey {
                    kind: "probes".into(),
                    name: name.into(),
                },
                value: "{}".into(),
            }],
            &[],
        )
        .await
        .map(|committed| committed.revision)
}

/// (epoch, holder) of every `Assigned` event of `tasks/<name>`.
async fn assigned_by(rig: &Rig, name: &str) -> Vec<(i64, String)> {
    rig.sql()
        .await
        .query(
            "SELECT epoch, holder FROM leasehold_events
              WHERE cluster = $1 AND kind = 'tasks' AND name = $2 AND reason = 'Assigned'
                AND lease = $3
              ORDER BY seq",
            &[&rig.cluster, &name, &COMPONENT],
        )
        .await
        .expect("read the Assigned events")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Compile the Python scheduler into the hosts' compile cache with
/// `leasehold check` (which builds the engine a host builds), so each host
/// of the rig reads it from the cache and answers `/healthz` within the
/// rig's bound instead of compiling 18 MiB first.
fn warm_compile_cache() {
    let dir = TempDir::new();
    let path = dir.path().join("warm.toml");
    std::fs::write(
        &path,
        format!(
            "cluster = \"warm\"\n[http]\nlisten = \"127.0.0.1:{}\"\n[runtime]\ncache_dir = \"{}\"\n\n\
             [[controllers]]\nname = \"{COMPONENT}\"\ncomponent = \"{}\"\n",
            free_port(),
            guest_dir().join("../../leasehold-test-cache").display(),
            guest(COMPONENT).display()
        ),
    )
    .expect("write the config");
    let started = Instant::now();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!(
        "{COMPONENT}: checked (compile cache warm) in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_python_leader_hands_over_at_the_next_epoch_and_fences_the_old_one() {
    warm_compile_cache();
    let mut spec = RigSpec::scheduler(2);
    spec.controllers = vec![COMPONENT];
    let mut rig = Rig::start(spec).await;
    rig.nodes(&[("n1", 100), ("n2", 100)]).await;
    // The first host to start may still be compiling the 18 MiB component
    // (the on-disk cache makes that quick after the first run).
    let (leader, epoch) = rig.leader(COMPONENT, Duration::from_secs(180)).await;
    for name in ["before-1", "before-2"] {
        rig.task(leader, name).await;
    }
    rig.settled(Duration::from_secs(60)).await;
    let leader_holder = rig.hosts[leader].holder.clone();
    for name in ["before-1", "before-2"] {
        assert_eq!(
            assigned_by(&rig, name).await,
            [(epoch, leader_holder.clone())],
            "{name}"
        );
    }

    // The killed tenure's fence, as its guest's writes carry it: accepted
    // while it leads (the control), refused once the next epoch is granted.
    let store = PostgresStore::new(Database::new(rig.db.url(), 2).expect("database pool"));
    let killed = Fence {
        key: LeaseKey::new(&rig.cluster, COMPONENT),
        epoch: Epoch(u64::try_from(epoch).expect("epochs are positive")),
        holder: leader_holder.clone(),
    };
    write_as(&store, &killed, "while-leading")
        .await
        .expect("a write of the leading tenure lands");

    rig.hosts[leader].replica.kill().await;
    let (next, next_epoch) = rig
        .leader_after(COMPONENT, epoch, Duration::from_secs(60))
        .await;
    assert_eq!(
        (next, next_epoch),
        (1 - leader, epoch + 1),
        "the standby leads at the next epoch"
    );

    match write_as(&store, &killed, "after-the-kill").await {
        Err(StoreError::Fenced { .. }) => {}
        other => panic!("a write of the killed tenure ({killed}) must be fenced: {other:?}"),
    }
    let probes: i64 = rig
        .sql()
        .await
        .query_one(
            "SELECT count(*) FROM leasehold_objects WHERE cluster = $1 AND kind = 'probes'",
            &[&rig.cluster],
        )
        .await
        .expect("count the probes")
        .get(0);
    assert_eq!(probes, 1, "only the write made while leading landed");

    // The successor's Python guest goes on assigning, at its own epoch.
    rig.task(next, "after-1").await;
    rig.settled(Duration::from_secs(60)).await;
    assert_eq!(
        assigned_by(&rig, "after-1").await,
        [(next_epoch, rig.hosts[next].holder.clone())]
    );
    let history = rig.history(COMPONENT).await;
    assert_eq!(
        history[usize::try_from(epoch).unwrap() - 1]
            .end_reason
            .as_deref(),
        Some("superseded"),
        "{history:?}"
    );
    let report = rig.check().await;
    eprintln!("{COMPONENT} SIGKILL handover: {report}");
    report.assert_clean("Python scheduler SIGKILL handover");
}

#[test]
fn a_restarted_host_reads_the_unchanged_python_component_from_the_compile_cache() {
    // Each engine stands for one host process, both on the cache folder
    // the other tests use, configured alike: the first load compiles the
    // component and stores it (or, after an earlier run, reads it).
    let host = || {
        Runtime::new(&EngineConfig {
            max_guests: 2,
            memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
            pooling: true,
            cache_dir: Some(guest_dir().join("../../leasehold-test-cache")),
        })
        .expect("build the Wasm engine")
    };
    let load = |runtime: &Runtime| {
        let started = Instant::now();
        runtime
            .load(
                MISBEHAVING,
                &guest(MISBEHAVING),
                GuestLimits::default(),
                Vec::new(),
            )
            .unwrap_or_else(|e| panic!("load {MISBEHAVING}: {e}"));
        started.elapsed()
    };

    let first = host();
    let cold = load(&first);
    let stats = first.cache_stats().expect("the engine has a cache");
    assert_eq!(stats.hits + stats.misses, 1, "{stats:?}");
    drop(first);

    let restarted = host();
    let warm = load(&restarted);
    assert_eq!(
        restarted.cache_stats(),
        Some(CacheStats { hits: 1, misses: 0 }),
        "the restarted host read the component from the cache, compiling nothing"
    );
    // Loaded again by the same host (a reload whose component file was
    // rewritten with the same bytes): still nothing compiled.
    load(&restarted);
    assert_eq!(
        restarted.cache_stats(),
        Some(CacheStats { hits: 2, misses: 0 })
    );
    eprintln!(
        "{MISBEHAVING}: first load ({}) {cold:?}, after the restart (cache) {warm:?}",
        if stats.misses == 1 {
            "compiled"
        } else {
            "cached"
        }
    );
}

#[tokio::test]
async fn a_python_guest_over_its_store_counts_is_refused_naming_the_controller_and_the_key() {
    let backends = MemoryBackends::new();
    let grant = backends.grant(FIXTURE.cluster, MISBEHAVING, "host-a").await;
    let start = |limits: GuestLimits| {
        let compiled = FIXTURE.compiled().with_limits(limits);
        let fence = grant.fence.clone();
        let store = backends.store.clone();
        async move {
            compiled
                .instantiate(fence, store, Default::default(), compiled.revocation())
                .await
        }
    };
    // The component makes 14 core instances and defines 2 tables.
    for (limits, key) in [
        (
            GuestLimits {
                instances: 13,
                ..GuestLimits::default()
            },
            "max_instances (13)",
        ),
        (
            GuestLimits {
                tables: 1,
                ..GuestLimits::default()
            },
            "max_tables (1)",
        ),
    ] {
        let Err(error) = start(limits).await else {
            panic!("a guest over its {key} started");
        };
        match &error {
            GuestError::Trap {
                controller,
                fence,
                message,
            } => {
                assert_eq!(controller, MISBEHAVING);
                assert!(fence.contains("holder host-a"), "{fence}");
                assert!(
                    message.contains(&format!(
                        "the component needs more than the controller's {key}"
                    )),
                    "{message}"
                );
            }
            other => panic!("expected a trap naming {key}, got {other}"),
        }
        assert!(
            error
                .to_string()
                .contains(&format!("controller {MISBEHAVING}"))
        );
    }
    // Exactly enough: it starts and runs.
    let Ok(mut guest) = start(GuestLimits {
        instances: 14,
        tables: 2,
        memories: 1,
        ..GuestLimits::default()
    })
    .await
    else {
        panic!("a guest within its counts failed to start");
    };
    assert_eq!(guest.describe().await.unwrap().watches, ["cmd"]);
}
