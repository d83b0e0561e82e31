//! Store writes as writers are added: Leasehold's fenced commits at 1, 4
//! and 8 concurrent writers against a raw PostgreSQL baseline of the same
//! statements with no ordering machinery, side by side on one database.
//! Goal: fenced >= 0.9x the baseline at 8 writers, and fenced / unfenced
//! still >= 0.9, each judged when its A/A control's median lies within
//! 0.05 of 1.00.
//!
//! Each writer has its own lease and its own objects; a commit updates one
//! object and appends one event. Shapes:
//! - `fenced`: `Store::commit_fenced`;
//! - `unfenced`: `PostgresStore::commit_api`, the same transaction without
//!   the fence check and write count;
//! - `baseline`: the store's own lock and write statements run raw in a
//!   plain transaction (`PostgresStore::commit_unordered_for_benchmark`):
//!   no fence, no position floor, no idle bound, no notification — what a
//!   commit costs PostgreSQL when nothing orders commits;
//! - `lean`: a hand-written transaction that writes the same rows with the
//!   simplest statements (lock the row, update it, insert its change and
//!   its event): a reference for what the store's general-purpose write
//!   statement (metadata, creates, deletes, owners) costs, reported beside
//!   the goals, not judged;
//! - `control`: the baseline again on other objects, the A/A control of
//!   every ratio.
//!
//! Short rounds interleave the shapes and rotate which goes first; rounds
//! are grouped into repeats, each giving one ratio, reported min / median /
//! max; goals are judged on the median. Change-feed lag: a second store
//! (its own feed, as another process would have) watches the cluster while
//! 8 writers make fenced commits, and each change is timed from its commit
//! statement's clock to the moment the watcher read it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use leasehold_host::authority::ExpectedIdentity;
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::db::Database;
use leasehold_host::fence::Fence;
use leasehold_host::store::{NewEvent, ObjectKey, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::report::{Comparison, Report, Samples, rate, ratios};
use crate::support;

const PART: &str = "store-writes";
const CLUSTER: &str = "bench";
const REPEATS: usize = 7;
const QUICK_REPEATS: usize = 3;
const ROUNDS: usize = 4;
const QUICK_ROUNDS: usize = 2;
/// Commits per writer per shape per round.
const COMMITS: usize = 20;
const WRITERS: &[usize] = &[1, 4, 8];
const BASELINE_GOAL: f64 = 0.9;
const FENCE_GOAL: f64 = 0.9;
/// The goal is judged only when the A/A control's median lies this close
/// to 1.00.
const NOISE: f64 = 0.05;
/// Fenced commits per writer while the lag is measured.
const LAG_COMMITS: usize = 100;
const QUICK_LAG_COMMITS: usize = 30;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Fenced,
    Unfenced,
    Baseline,
    Lean,
    Control,
}

const SHAPES: [Shape; 5] = [
    Shape::Fenced,
    Shape::Unfenced,
    Shape::Baseline,
    Shape::Lean,
    Shape::Control,
];

struct Writer {
    fence: Fence,
    objects: [ObjectKey; 5],
}

/// The lean reference's statements: the rows the store writes, by the
/// simplest statements that write them.
const LEAN_LOCK: &str = "SELECT version FROM leasehold_objects
  WHERE cluster = $1 AND kind = $2 AND name = $3 FOR UPDATE";
const LEAN_WRITE: &str = "
WITH r AS MATERIALIZED (SELECT nextval('leasehold_positions') AS revision, clock_timestamp() AS at),
u AS (UPDATE leasehold_objects o SET version = r.revision, value = $4, updated_at = r.at
        FROM r WHERE o.cluster = $1 AND o.kind = $2 AND o.name = $3 RETURNING 1),
c AS (INSERT INTO leasehold_changes (cluster, position, revision, at, kind, name, change, version)
      SELECT $1, nextval('leasehold_positions'), r.revision, r.at, $2, $3, 'updated', r.revision FROM r
      RETURNING 1),
e AS (INSERT INTO leasehold_events (cluster, seq, revision, at, kind, name, reason, message)
      SELECT $1, nextval('leasehold_positions'), r.revision, r.at, $2, $3, 'Counted', $5 FROM r
      RETURNING 1)
SELECT (SELECT count(*) FROM u) + (SELECT count(*) FROM c) + (SELECT count(*) FROM e) FROM r";

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let max_writers = WRITERS.iter().copied().max().unwrap_or(1);
    let db = database.database(max_writers + 2);
    let raw = database.database(max_writers + 2);
    let authority = PostgresAuthority::connect(db.clone(), ExpectedIdentity::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let store = Arc::new(PostgresStore::new(db.clone()));
    let mut writers = Vec::with_capacity(max_writers);
    for w in 0..max_writers {
        let fence = support::grant(&authority, CLUSTER, &format!("writer-{w}")).await?;
        let objects =
            SHAPES.map(|shape| support::key("counters", &format!("{shape:?}-{w}").to_lowercase()));
        for object in &objects {
            store
                .put(CLUSTER, object, "{\"n\":0}", Some(0))
                .await
                .map_err(|e| anyhow!("{e}"))?;
        }
        writers.push(Writer { fence, objects });
    }
    let writers = Arc::new(writers);
    let repeats = scale.pick(REPEATS, QUICK_REPEATS);
    let rounds = scale.pick(ROUNDS, QUICK_ROUNDS);
    for &count in WRITERS {
        let mut per_repeat: [Vec<f64>; 5] = Default::default();
        for shape in SHAPES {
            round(&store, &raw, &writers, count, shape).await?;
        }
        for repeat in 0..repeats {
            let mut commits = [0usize; 5];
            let mut elapsed = [Duration::ZERO; 5];
            for r in 0..rounds {
                for i in 0..SHAPES.len() {
                    let shape = SHAPES[(repeat * rounds + r + i) % SHAPES.len()];
                    let (took, n) = round(&store, &raw, &writers, count, shape).await?;
                    commits[shape as usize] += n;
                    elapsed[shape as usize] += took;
                }
            }
            for shape in SHAPES {
                let s = shape as usize;
                per_repeat[s].push(commits[s] as f64 / elapsed[s].as_secs_f64());
            }
        }
        let [fenced, unfenced, baseline, lean, control] = &per_repeat;
        let against_baseline =
            Comparison::new(&ratios(fenced, baseline), &ratios(control, baseline))
                .ok_or_else(|| anyhow!("no repeat measured"))?;
        let against_unfenced =
            Comparison::new(&ratios(fenced, unfenced), &ratios(control, baseline))
                .ok_or_else(|| anyhow!("no repeat measured"))?;
        let spread = |values: &[f64]| {
            crate::report::Spread::of(values).map_or_else(|| "none".into(), |s| s.with(rate))
        };
        let against_lean = Comparison::new(&ratios(fenced, lean), &ratios(control, baseline))
            .ok_or_else(|| anyhow!("no repeat measured"))?;
        report.info(
            PART,
            format!(
                "{count} writer(s): commits per second per repeat, fenced; unfenced; baseline; lean"
            ),
            format!(
                "{}; {}; {}; {}",
                spread(fenced),
                spread(unfenced),
                spread(baseline),
                spread(lean)
            ),
        );
        if count == max_writers {
            report.compared_goal(
                PART,
                format!("{count} writers: fenced / raw PostgreSQL baseline, each of {repeats} interleaved repeats"),
                against_baseline.ab.ratios(),
                &format!(">= {BASELINE_GOAL} (median)"),
                against_baseline.ab.median >= BASELINE_GOAL,
                (&against_baseline, NOISE),
            );
            report.compared_goal(
                PART,
                format!("{count} writers: fenced / unfenced"),
                against_unfenced.ab.ratios(),
                &format!(">= {FENCE_GOAL} (median)"),
                against_unfenced.ab.median >= FENCE_GOAL,
                (&against_unfenced, NOISE),
            );
        } else {
            report.info(
                PART,
                format!("{count} writer(s): fenced / baseline; fenced / unfenced"),
                format!(
                    "{}; {}",
                    against_baseline.ab.ratios(),
                    against_unfenced.ab.ratios()
                ),
            );
        }
        report.info(
            PART,
            format!("{count} writer(s): fenced / lean hand-written transaction (reference)"),
            against_lean.ab.ratios(),
        );
        report.info(
            PART,
            format!("{count} writer(s): A/A control, baseline again / baseline"),
            against_baseline.control(),
        );
    }
    let lag = feed_lag(
        &store,
        &db,
        &writers,
        scale.pick(LAG_COMMITS, QUICK_LAG_COMMITS),
    )
    .await?;
    report.info(PART, format!("change-feed lag, {max_writers} fenced writers, commit -> seen by a watcher in another store"), lag);
    Ok(())
}

/// One commit of the shapes that go through the store's statements:
/// update `object` (at `version`) to `value` and append its `i`th event.
fn counted(object: &ObjectKey, version: u64, value: String, i: usize) -> ([Op; 1], [NewEvent; 1]) {
    let ops = [Op::Update {
        key: object.clone(),
        expected_version: version,
        value,
    }];
    let events = [NewEvent {
        key: object.clone(),
        reason: "Counted".into(),
        message: format!("counted {i}"),
    }];
    (ops, events)
}

/// Each of the first `count` writers makes [`COMMITS`] commits of `shape`
/// at once; the wall time and how many committed.
async fn round(
    store: &Arc<PostgresStore>,
    raw: &Database,
    writers: &Arc<Vec<Writer>>,
    count: usize,
    shape: Shape,
) -> Result<(Duration, usize)> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..count)
        .map(|w| {
            let (store, raw, writers) = (Arc::clone(store), raw.clone(), Arc::clone(writers));
            tokio::spawn(async move {
                let writer = &writers[w];
                let object = &writer.objects[shape as usize];
                let mut version = store
                    .get(CLUSTER, object)
                    .await
                    .map_err(|e| anyhow!("{e}"))?
                    .map(|o| o.version)
                    .unwrap_or_default();
                for i in 0..COMMITS {
                    let value = format!("{{\"n\":{i}}}");
                    match shape {
                        Shape::Fenced | Shape::Unfenced => {
                            let (ops, events) = counted(object, version, value, i);
                            let committed = if shape == Shape::Fenced {
                                store.commit_fenced(&writer.fence, &ops, &events).await
                            } else {
                                store.commit_api(CLUSTER, &ops, &events).await
                            };
                            version = committed.map_err(|e| anyhow!("{e}"))?.revision;
                        }
                        Shape::Baseline | Shape::Control => {
                            let client = raw.client().await.map_err(|e| anyhow!("{e}"))?;
                            let (ops, events) = counted(object, version, value, i);
                            version = PostgresStore::commit_unordered_for_benchmark(
                                &client,
                                &writer.fence,
                                &ops,
                                &events,
                            )
                            .await
                            .map_err(|e| anyhow!("{e}"))?;
                        }
                        Shape::Lean => {
                            let mut client = raw.client().await.map_err(|e| anyhow!("{e}"))?;
                            let lock = client.prepare_cached(LEAN_LOCK).await?;
                            let write = client.prepare_cached(LEAN_WRITE).await?;
                            let tx = client.transaction().await?;
                            tx.query_one(&lock, &[&CLUSTER, &object.kind, &object.name])
                                .await?;
                            let message = format!("counted {i}");
                            tx.query_one(
                                &write,
                                &[&CLUSTER, &object.kind, &object.name, &value, &message],
                            )
                            .await?;
                            tx.commit().await?;
                        }
                    }
                }
                Ok::<_, anyhow::Error>(COMMITS)
            })
        })
        .collect();
    let mut commits = 0;
    for task in tasks {
        commits += task.await??;
    }
    Ok((started.elapsed(), commits))
}

/// Run fenced commits of every writer while a watcher follows the change
/// stream; each change's lag from its commit statement's clock to the
/// watcher's read.
async fn feed_lag(
    store: &Arc<PostgresStore>,
    db: &Database,
    writers: &Arc<Vec<Writer>>,
    commits: usize,
) -> Result<String> {
    let watcher = PostgresStore::new(db.clone());
    let (_, start) = watcher.high_water().await.map_err(|e| anyhow!("{e}"))?;
    let mut feed = watcher.watch(CLUSTER);
    let total = writers.len() * commits;
    let reading = tokio::spawn(async move {
        let mut lags = Samples::with_capacity(total);
        let mut cursor = start;
        while lags.len() < total {
            feed.borrow_and_update();
            let page = watcher
                .changes(CLUSTER, &[], cursor, leasehold_host::limits::MAX_PAGE_SIZE)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            let now = chrono::Utc::now();
            for change in &page.changes {
                lags.push((now - change.at).to_std().unwrap_or_default());
            }
            cursor = page.through;
            if page.changes.is_empty() {
                tokio::time::timeout(Duration::from_secs(30), feed.changed())
                    .await
                    .map_err(|_| anyhow!("the watcher saw nothing for 30 s"))??;
            }
        }
        Ok::<_, anyhow::Error>(lags)
    });
    let tasks: Vec<_> = (0..writers.len())
        .map(|w| {
            let (store, writers) = (Arc::clone(store), Arc::clone(writers));
            tokio::spawn(async move {
                let writer = &writers[w];
                let object = &writer.objects[Shape::Fenced as usize];
                let mut version = store
                    .get(CLUSTER, object)
                    .await
                    .map_err(|e| anyhow!("{e}"))?
                    .map(|o| o.version)
                    .unwrap_or_default();
                for i in 0..commits {
                    let ops = [Op::Update {
                        key: object.clone(),
                        expected_version: version,
                        value: format!("{{\"lag\":{i}}}"),
                    }];
                    version = store
                        .commit_fenced(&writer.fence, &ops, &[])
                        .await
                        .map_err(|e| anyhow!("{e}"))?
                        .revision;
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let mut lags = tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .map_err(|_| anyhow!("the watcher did not see every change"))???;
    Ok(format!("{} changes: {}", lags.len(), lags.summary()))
}
