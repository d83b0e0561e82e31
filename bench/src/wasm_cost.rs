//! Wasm cost: the example scheduler's reconcile run as a component against
//! the same logic compiled natively, side by side in one run.
//!
//! The workload: 4 nodes with room to spare and 32 pending tasks; a round
//! reconciles every task once by name, so each reconcile is one `get` (the
//! task), two listings (nodes, tasks), one commit (task and node updated,
//! one event) and a few log lines. Between rounds the objects are put back
//! (untimed). Rounds alternate which side goes first.
//!
//! - **Memory**: the component against the host's `MemoryStore`, the native
//!   build against the SDK's `FakeHost`. These are two different in-memory
//!   stores (the host's validates, takes the fence lock, keeps an event log
//!   and wakes watchers; the fake records commits), so the ratio bounds the
//!   Wasm cost from above rather than isolating it. Reported, no goal.
//! - **PostgreSQL** (goal <= 1.1x): the component against `PostgresStore`,
//!   and natively the same logic with the same database work. The SDK has
//!   no way to plug a native backend (only `FakeHost`), so the native side
//!   issues, from native code, exactly the calls the scheduler makes to
//!   `PostgresStore` (the task, both listings, then its commit, at the
//!   versions the database returned) and runs the native logic against a
//!   `FakeHost` holding the same objects. Its clock covers both.
//!
//! The fake echoes each guest log line to stderr, which is pointed at
//! `/dev/null` during native rounds (see [`Silenced`]); the component's
//! log lines go to `tracing`, with no subscriber installed here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use leasehold_guest::{FakeHost, Reply};
use leasehold_host::authority::ExpectedIdentity;
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::fence::Fence;
use leasehold_host::limits::MAX_PAGE_SIZE;
use leasehold_host::runtime::{CommitCounters, GuestInstance, Reconciled};
use leasehold_host::store::{NewEvent, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;
use scheduler::Scheduler;

use crate::Scale;
use crate::report::{Report, Samples, duration, ratio};
use crate::support::{self, MemoryBackends, Silenced, key};

const PART: &str = "wasm-cost";
const NODES: usize = 4;
const TASKS: usize = 32;
const NODE_CAPACITY: usize = 1000;
const MEMORY_ROUNDS: usize = 200;
const QUICK_MEMORY_ROUNDS: usize = 10;
const POSTGRES_ROUNDS: usize = 30;
const QUICK_POSTGRES_ROUNDS: usize = 3;
const GOAL_POSTGRES: f64 = 1.1;

fn node_value() -> String {
    format!("{{\"capacity\":{NODE_CAPACITY},\"zone\":\"eu-1\"}}")
}

fn task_name(i: usize) -> String {
    format!("task-{i:03}")
}

fn task_value(i: usize) -> String {
    format!(
        "{{\"status\":\"pending\",\"command\":\"make test\",\"priority\":{}}}",
        i % 5
    )
}

/// Put every node and task back as it started (API writes).
async fn reset(store: &dyn Store, cluster: &str) -> Result<()> {
    for n in 0..NODES {
        store
            .put(
                cluster,
                &key("nodes", &format!("node-{n}")),
                &node_value(),
                None,
            )
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    for t in 0..TASKS {
        store
            .put(cluster, &key("tasks", &task_name(t)), &task_value(t), None)
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// A fresh fake holding the same objects.
fn fake() -> FakeHost {
    let host = FakeHost::new();
    for n in 0..NODES {
        let value: serde_json::Value = serde_json::from_str(&node_value()).expect("node json");
        host.seed("nodes", &format!("node-{n}"), &value);
    }
    for t in 0..TASKS {
        let value: serde_json::Value = serde_json::from_str(&task_value(t)).expect("task json");
        host.seed("tasks", &task_name(t), &value);
    }
    host
}

/// Both sides' per-reconcile times.
#[derive(Default)]
struct Sides {
    wasm: Samples,
    native: Samples,
}

impl Sides {
    fn report(&mut self, report: &mut Report, store: &str, native: &str, goal: Option<f64>) {
        let (w, n) = (self.wasm.p50(), self.native.p50());
        let r = w.as_secs_f64() / n.as_secs_f64();
        report.info(
            PART,
            format!("{store}: component reconcile"),
            self.wasm.summary(),
        );
        report.info(
            PART,
            format!("{store}: native reconcile ({native})"),
            self.native.summary(),
        );
        let measure = format!("{store}: component / native (medians)");
        let result = format!(
            "{} (+{} per reconcile)",
            ratio(r),
            duration(w.saturating_sub(n))
        );
        match goal {
            Some(limit) => report.goal(PART, measure, result, &format!("<= {limit}x"), r <= limit),
            None => report.info(PART, measure, result),
        }
    }
}

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        memory(scale, report).await?;
        postgres(scale, report).await
    })
}

async fn instance(store: Arc<dyn Store>, fence: Fence) -> Result<GuestInstance> {
    let runtime = support::runtime(true)?;
    let compiled = support::compile(&runtime, "scheduler", "scheduler")?;
    compiled
        .instantiate(
            fence,
            store,
            Arc::new(CommitCounters::default()),
            compiled.revocation(),
        )
        .await
        .map_err(|e| anyhow!("{e}"))
}

async fn wasm_round(guest: &mut GuestInstance, samples: &mut Samples) -> Result<()> {
    for t in 0..TASKS {
        let name = task_name(t);
        let started = Instant::now();
        let reply = guest
            .reconcile("tasks", &name)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        samples.push(started.elapsed());
        ensure!(reply == Reconciled::Done, "component reconcile: {reply:?}");
    }
    Ok(())
}

async fn memory(scale: Scale, report: &mut Report) -> Result<()> {
    const CLUSTER: &str = "wasm";
    let backends = MemoryBackends::new();
    let fence = support::grant(backends.authority.as_ref(), CLUSTER, "scheduler").await?;
    let mut guest = instance(backends.store.clone(), fence).await?;
    let mut sides = Sides::default();
    let rounds = scale.pick(MEMORY_ROUNDS, QUICK_MEMORY_ROUNDS);
    // One warm-up round each, not counted.
    for round in 0..rounds + 1 {
        let mut sink = Sides::default();
        let sides = if round == 0 { &mut sink } else { &mut sides };
        for side in order(round) {
            if side {
                reset(backends.store.as_ref(), CLUSTER).await?;
                wasm_round(&mut guest, &mut sides.wasm).await?;
            } else {
                let host = fake();
                let _quiet = Silenced::stderr()?;
                for t in 0..TASKS {
                    let started = Instant::now();
                    let reply = host.reconcile(&Scheduler, "tasks", &task_name(t));
                    sides.native.push(started.elapsed());
                    ensure!(reply == Reply::Done, "native reconcile: {reply:?}");
                }
                ensure!(host.events_with_reason("Assigned").len() == TASKS);
            }
        }
    }
    sides.report(report, "memory", "SDK FakeHost", None);
    Ok(())
}

/// Which side runs first in a round: alternate, so drift hits both alike.
fn order(round: usize) -> [bool; 2] {
    if round.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

async fn postgres(scale: Scale, report: &mut Report) -> Result<()> {
    const WASM: &str = "wasm";
    const NATIVE: &str = "native";
    let database = TestDatabase::create().await;
    let db = database.database(4);
    let authority = PostgresAuthority::connect(db.clone(), ExpectedIdentity::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let store = Arc::new(PostgresStore::new(db));
    let wasm_fence = support::grant(&authority, WASM, "scheduler").await?;
    let native_fence = support::grant(&authority, NATIVE, "scheduler").await?;
    let mut guest = instance(store.clone(), wasm_fence).await?;
    let mut sides = Sides::default();
    let rounds = scale.pick(POSTGRES_ROUNDS, QUICK_POSTGRES_ROUNDS);
    for round in 0..rounds + 1 {
        let mut sink = Sides::default();
        let sides = if round == 0 { &mut sink } else { &mut sides };
        for side in order(round) {
            if side {
                reset(store.as_ref(), WASM).await?;
                wasm_round(&mut guest, &mut sides.wasm).await?;
            } else {
                reset(store.as_ref(), NATIVE).await?;
                let host = fake();
                let _quiet = Silenced::stderr()?;
                for t in 0..TASKS {
                    let started = Instant::now();
                    native_on_store(store.as_ref(), NATIVE, &native_fence, &host, &task_name(t))
                        .await?;
                    sides.native.push(started.elapsed());
                }
            }
        }
    }
    sides.report(
        report,
        "PostgreSQL",
        "native logic + the same calls to PostgresStore",
        Some(GOAL_POSTGRES),
    );
    Ok(())
}

/// One native reconcile of `tasks/name` with the scheduler's database work
/// done natively against `store`: the same reads, the native logic on a
/// `FakeHost` mirroring the objects, then the commit it made, at the
/// versions the store returned.
async fn native_on_store(
    store: &dyn Store,
    cluster: &str,
    fence: &Fence,
    host: &FakeHost,
    name: &str,
) -> Result<()> {
    let mut versions: HashMap<(String, String), u64> = HashMap::new();
    let task = store
        .get(cluster, &key("tasks", name))
        .await
        .map_err(|e| anyhow!("{e}"))?
        .with_context(|| format!("tasks/{name} is missing"))?;
    versions.insert((task.kind, task.name), task.version);
    for kind in ["nodes", "tasks"] {
        let mut after: Option<String> = None;
        loop {
            let page = store
                .list(cluster, kind, after.as_deref(), MAX_PAGE_SIZE)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            for object in page.objects {
                versions.insert((object.kind, object.name), object.version);
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    let commits_before = host.calls().commit;
    let reply = host.reconcile(&Scheduler, "tasks", name);
    ensure!(reply == Reply::Done, "native reconcile: {reply:?}");
    if host.calls().commit == commits_before {
        return Ok(());
    }
    let Some(record) = host.commits().pop() else {
        bail!("the fake counted a commit but recorded none");
    };
    let version = |kind: &str, name: &str| {
        versions
            .get(&(kind.to_string(), name.to_string()))
            .copied()
            .with_context(|| format!("{kind}/{name} was not read"))
    };
    let mut ops = Vec::with_capacity(record.ops.len());
    for op in &record.ops {
        ops.push(match op {
            leasehold_guest::Op::Create { key: k, value } => Op::Create {
                key: key(&k.kind, &k.name),
                value: value.clone(),
            },
            leasehold_guest::Op::Update { key: k, value, .. } => Op::Update {
                key: key(&k.kind, &k.name),
                expected_version: version(&k.kind, &k.name)?,
                value: value.clone(),
            },
            leasehold_guest::Op::Delete { key: k, .. } => Op::Delete {
                key: key(&k.kind, &k.name),
                expected_version: version(&k.kind, &k.name)?,
            },
        });
    }
    let events: Vec<NewEvent> = record
        .events
        .iter()
        .map(|e| NewEvent {
            key: key(&e.key.kind, &e.key.name),
            reason: e.reason.clone(),
            message: e.message.clone(),
        })
        .collect();
    store
        .commit_fenced(fence, &ops, &events)
        .await
        .map_err(|e| anyhow!("native commit: {e}"))?;
    Ok(())
}
