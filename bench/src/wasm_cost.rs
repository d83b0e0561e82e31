//! Wasm cost: the example scheduler's reconcile run as a component against
//! the same logic compiled natively, side by side in one run, on the host's
//! `MemoryStore` (reported) and on `PostgresStore` (goal <= 1.1x).
//!
//! The workload: 4 nodes with room to spare and 32 pending tasks; a round
//! reconciles every task once by name, so each reconcile is one `get` (the
//! task), two listings (nodes, tasks), one commit (task and node updated,
//! one event) and a few log lines. Between rounds the objects are put back
//! (untimed).
//!
//! Both sides pay the same store: the component calls the host's store
//! through its bindings; the native side issues, from native code, exactly
//! the calls the scheduler makes to the same store implementation (the
//! task, both listings, then its commit, at the versions the store
//! returned) and runs the native logic on a `FakeHost` mirroring the
//! objects, its clock covering both. The SDK offers no public way to plug
//! a native backend into the scheduler (only `FakeHost`), so the native
//! side also pays work the component does not: the fake's own store and
//! its echo of every log line to stderr (pointed at `/dev/null`, see
//! [`Silenced`]; the component's log lines go to `tracing`, with no
//! subscriber here). That extra is measured and printed: the time of the
//! logic on the fake alone (an upper bound of the extra, since it includes
//! the logic) and the stderr writes alone (replayed). The ratio therefore
//! understates the Wasm cost by at most the first.
//!
//! Noise: a third side, the native side again on its own objects, is the
//! A/A control. The three sides take turns round by round, rotating which
//! goes first; the rounds are grouped into repeats, each giving its own
//! ratio of medians, and the report prints min / median / max of the
//! component/native and control/native ratios. The goal is judged on the
//! median.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use leasehold_guest::{FakeHost, Reply};
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{Authority, ExpectedIdentity};
use leasehold_host::fence::Fence;
use leasehold_host::limits::MAX_PAGE_SIZE;
use leasehold_host::runtime::{CommitCounters, GuestInstance, Reconciled};
use leasehold_host::store::{Metadata, NewEvent, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;
use scheduler::Scheduler;

use crate::Scale;
use crate::report::{Comparison, Report, Samples, duration, median, ratios};
use crate::support::{self, MemoryBackends, Silenced, key};

const PART: &str = "wasm-cost";
const NODES: usize = 4;
const TASKS: usize = 32;
const NODE_CAPACITY: usize = 1000;
/// Repeats (each one ratio) and rounds of every side per repeat.
const MEMORY_REPEATS: usize = 9;
const MEMORY_ROUNDS: usize = 20;
const POSTGRES_REPEATS: usize = 7;
const POSTGRES_ROUNDS: usize = 4;
const QUICK_REPEATS: usize = 3;
const QUICK_ROUNDS: usize = 1;
/// Times the log lines of one native round are replayed to `/dev/null` to
/// price the native side's stderr writes.
const LOG_REPLAYS: usize = 20;
const GOAL_POSTGRES: f64 = 1.1;
/// The goal is judged only when the A/A control's median lies this close
/// to 1.00.
const NOISE: f64 = 0.05;

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

/// The three sides of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Wasm,
    Native,
    /// The native side again: the A/A control.
    Control,
}

const SIDES: [Side; 3] = [Side::Wasm, Side::Native, Side::Control];

impl Side {
    fn cluster(self) -> &'static str {
        match self {
            Side::Wasm => "wasm",
            Side::Native => "native",
            Side::Control => "control",
        }
    }
}

/// Per-reconcile times: pooled over the run, and each repeat's median.
#[derive(Default)]
struct Tallies {
    pooled: [Samples; 3],
    /// Per side, one median per repeat.
    medians: [Vec<f64>; 3],
    /// The native logic on the fake alone, inside the native sides' clock.
    fake_only: Samples,
}

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let backends = MemoryBackends::new();
        compare(
            scale,
            report,
            "memory",
            backends.store.clone(),
            backends.authority.as_ref(),
            (MEMORY_REPEATS, MEMORY_ROUNDS),
            None,
        )
        .await?;
        let database = TestDatabase::create().await;
        let db = database.database(4);
        let authority = PostgresAuthority::connect(db.clone(), ExpectedIdentity::default())
            .await
            .map_err(|e| anyhow!("{e}"))?;
        compare(
            scale,
            report,
            "PostgreSQL",
            Arc::new(PostgresStore::new(db)),
            &authority,
            (POSTGRES_REPEATS, POSTGRES_ROUNDS),
            Some(GOAL_POSTGRES),
        )
        .await
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

/// One store's comparison: the component, the native side and the
/// control taking turns, grouped into repeats.
async fn compare(
    scale: Scale,
    report: &mut Report,
    label: &str,
    store: Arc<dyn Store>,
    authority: &dyn Authority,
    (repeats, rounds): (usize, usize),
    goal: Option<f64>,
) -> Result<()> {
    let repeats = scale.pick(repeats, QUICK_REPEATS);
    let rounds = scale.pick(rounds, QUICK_ROUNDS);
    let wasm_fence = support::grant(authority, Side::Wasm.cluster(), "scheduler").await?;
    let native_fence = support::grant(authority, Side::Native.cluster(), "scheduler").await?;
    let control_fence = support::grant(authority, Side::Control.cluster(), "scheduler").await?;
    let mut guest = instance(store.clone(), wasm_fence).await?;
    let mut tallies = Tallies::default();
    // Repeat 0 is the warm-up, not counted.
    for repeat in 0..=repeats {
        let mut this: [Samples; 3] = Default::default();
        let mut fake_only = Samples::default();
        for r in 0..rounds {
            for i in 0..SIDES.len() {
                let side = SIDES[(repeat * rounds + r + i) % SIDES.len()];
                reset(store.as_ref(), side.cluster()).await?;
                let samples = &mut this[side as usize];
                match side {
                    Side::Wasm => wasm_round(&mut guest, samples).await?,
                    Side::Native | Side::Control => {
                        let fence = if side == Side::Native {
                            &native_fence
                        } else {
                            &control_fence
                        };
                        let host = fake();
                        let _quiet = Silenced::stderr()?;
                        for t in 0..TASKS {
                            let started = Instant::now();
                            let fake = native_on_store(
                                store.as_ref(),
                                side.cluster(),
                                fence,
                                &host,
                                &task_name(t),
                            )
                            .await?;
                            samples.push(started.elapsed());
                            fake_only.push(fake);
                        }
                    }
                }
            }
        }
        if repeat == 0 {
            continue;
        }
        for side in SIDES {
            let samples = &mut this[side as usize];
            tallies.medians[side as usize].push(samples.p50().as_secs_f64());
            for value in samples.values() {
                tallies.pooled[side as usize].push(*value);
            }
        }
        for value in fake_only.values() {
            tallies.fake_only.push(*value);
        }
    }
    let stderr = stderr_cost().await?;
    let [wasm, native, control] = &tallies.medians;
    let compared = Comparison::new(&ratios(wasm, native), &ratios(control, native))
        .ok_or_else(|| anyhow!("no repeat measured"))?;
    let [wasm_all, native_all, _] = &mut tallies.pooled;
    report.info(
        PART,
        format!("{label}: component reconcile"),
        wasm_all.summary(),
    );
    report.info(
        PART,
        format!("{label}: native reconcile (native logic + the same calls to the same store)"),
        native_all.summary(),
    );
    let measure = format!(
        "{label}: component / native, ratio of each repeat's medians ({repeats} interleaved repeats)"
    );
    // The median over repeats of each side's per-repeat median.
    let extra = median(wasm) - median(native);
    let difference = duration(std::time::Duration::from_secs_f64(extra.abs()));
    let result = format!(
        "{}; component {} by {difference} per reconcile (medians)",
        compared.ab.ratios(),
        if extra >= 0.0 { "slower" } else { "faster" },
    );
    match goal {
        Some(limit) => report.compared_goal(
            PART,
            measure,
            result,
            &format!("<= {limit}x (median)"),
            compared.ab.median <= limit,
            (&compared, NOISE),
        ),
        None => report.info(PART, measure, result),
    }
    report.info(
        PART,
        format!("{label}: A/A control, native again / native"),
        compared.control(),
    );
    report.info(
        PART,
        format!("{label}: native side's extra work the component does not do, per reconcile"),
        format!(
            "at most {} (the native logic on the FakeHost mirror, p50, logic included), of which stderr writes {} ({:.1} lines): the Wasm cost per reconcile lies between the difference above and that difference plus this",
            duration(tallies.fake_only.p50()),
            duration(stderr.per_reconcile),
            stderr.lines_per_reconcile
        ),
    );
    Ok(())
}

/// What the fake's echo of log lines to stderr costs the native side.
struct StderrCost {
    per_reconcile: std::time::Duration,
    lines_per_reconcile: f64,
}

/// Replay the log lines of one native round (as the fake formats them)
/// to the silenced stderr and time it.
async fn stderr_cost() -> Result<StderrCost> {
    let host = fake();
    {
        let _quiet = Silenced::stderr()?;
        for t in 0..TASKS {
            let reply = host.reconcile(&Scheduler::new(), "tasks", &task_name(t));
            ensure!(reply == Reply::Done, "native reconcile: {reply:?}");
        }
    }
    let lines: Vec<String> = host
        .logs()
        .iter()
        .map(|l| format!("[{} epoch={}] {}", l.level, l.epoch, l.message))
        .collect();
    let _quiet = Silenced::stderr()?;
    let started = Instant::now();
    for _ in 0..LOG_REPLAYS {
        for line in &lines {
            eprintln!("{line}");
        }
    }
    let elapsed = started.elapsed();
    Ok(StderrCost {
        per_reconcile: elapsed / (LOG_REPLAYS * TASKS) as u32,
        lines_per_reconcile: lines.len() as f64 / TASKS as f64,
    })
}

/// One native reconcile of `tasks/name` with the scheduler's database work
/// done natively against `store`: the same reads, the native logic on a
/// `FakeHost` mirroring the objects, then the commit it made, at the
/// versions the store returned. Returns how long the native logic on the
/// fake took (the native side's extra, see the module comment).
async fn native_on_store(
    store: &dyn Store,
    cluster: &str,
    fence: &Fence,
    host: &FakeHost,
    name: &str,
) -> Result<std::time::Duration> {
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
    let started = Instant::now();
    let reply = host.reconcile(&Scheduler::new(), "tasks", name);
    let fake = started.elapsed();
    ensure!(reply == Reply::Done, "native reconcile: {reply:?}");
    if host.calls().commit == commits_before {
        return Ok(fake);
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
            // An assignment writes the task's value and metadata (its slot
            // finalizer and node label) in one op.
            leasehold_guest::Op::Replace {
                key: k,
                value,
                meta,
                ..
            } => Op::Replace {
                key: key(&k.kind, &k.name),
                expected_version: version(&k.kind, &k.name)?,
                value: value.clone(),
                meta: meta.as_ref().map(|m| Metadata {
                    labels: m.labels.clone(),
                    owner: m.owner.as_ref().map(|o| key(&o.kind, &o.name)),
                    finalizers: m.finalizers.clone(),
                }),
            },
            // Anything else would make the native side's calls differ from
            // the component's.
            other => {
                bail!("the native scheduler made an operation this part does not replay: {other:?}")
            }
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
    Ok(fake)
}
