//! Fencing cost: fenced commit throughput over unfenced commit throughput,
//! same transaction shape, side by side on one database. Goal: >= 0.95,
//! judged when the A/A control's median lies within 0.05 of 1.00.
//!
//! Both shapes are the store's one transaction (lock the object, take its
//! positions, write the object and an event, notify, commit); the fenced
//! one (`Store::commit_fenced`) adds the authority's fence check with the
//! tenure's write count (one statement: the count's `UPDATE` of the open
//! tenure row is the fence's lock, the lease row is only read), the
//! unfenced one is `PostgresStore::commit_api`. Short rounds interleave the shapes
//! and rotate which goes first, so drift in the machine's load hits them
//! alike; a third shape, the unfenced commit again on other objects, is the
//! A/A control whose ratio to the unfenced one shows how far noise alone
//! moves a ratio. The rounds are grouped into [`REPEATS`] repeats; each
//! repeat gives its own fenced/unfenced and control/unfenced ratio, and the
//! report prints min / median / max of each (never the best repeat); the
//! goal is judged on the median. The same method as `cargo bench -p
//! leasehold-host --bench store`, with leases granted by the real authority
//! and tail latencies added.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use leasehold_host::authority::ExpectedIdentity;
use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::fence::Fence;
use leasehold_host::store::{NewEvent, ObjectKey, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::report::{Comparison, Report, Samples, rate, ratios};
use crate::support;

const PART: &str = "fencing";
const CLUSTER: &str = "bench";
/// Repeats per writer count, each giving one ratio (odd: a plain median).
const REPEATS: usize = 9;
const QUICK_REPEATS: usize = 3;
/// Rounds of every shape in one repeat.
const ROUNDS: usize = 8;
const QUICK_ROUNDS: usize = 2;
/// Commits per writer per shape per round.
const COMMITS: usize = 8;
/// One writer (latency-bound) and several (each its own lease) contending
/// for the cluster's commit order.
const WRITERS: &[usize] = &[1, 4];
const GOAL_RATIO: f64 = 0.95;
/// The goal is judged only when the A/A control's median lies this close
/// to 1.00.
const NOISE: f64 = 0.05;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Fenced,
    Unfenced,
    Control,
}

const SHAPES: [Shape; 3] = [Shape::Fenced, Shape::Unfenced, Shape::Control];

struct Writer {
    fence: Fence,
    objects: [ObjectKey; 3],
}

#[derive(Default)]
struct Tally {
    commits: usize,
    elapsed: Duration,
    latencies: Samples,
}

impl Tally {
    fn throughput(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }
}

/// Each shape's throughput, one entry per repeat.
#[derive(Default)]
struct Repeats {
    throughput: [Vec<f64>; 3],
}

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let database = TestDatabase::create().await;
    let max_writers = WRITERS.iter().copied().max().unwrap_or(1);
    let db = database.database(max_writers + 1);
    let authority = PostgresAuthority::connect(db.clone(), ExpectedIdentity::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let store = Arc::new(PostgresStore::new(db.clone()));
    let mut writers = Vec::with_capacity(max_writers);
    for w in 0..max_writers {
        let fence = support::grant(&authority, CLUSTER, &format!("writer-{w}")).await?;
        let objects = [
            support::key("counters", &format!("fenced-{w}")),
            support::key("counters", &format!("unfenced-{w}")),
            support::key("counters", &format!("control-{w}")),
        ];
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
        // Pooled over every repeat: latencies only.
        let mut tallies: [Tally; 3] = Default::default();
        let mut per_repeat = Repeats::default();
        for shape in SHAPES {
            round(&store, &writers, count, shape).await?;
        }
        for repeat in 0..repeats {
            let mut this: [Tally; 3] = Default::default();
            for r in 0..rounds {
                for i in 0..SHAPES.len() {
                    let shape = SHAPES[(repeat * rounds + r + i) % SHAPES.len()];
                    let (elapsed, latencies) = round(&store, &writers, count, shape).await?;
                    let tally = &mut this[shape as usize];
                    tally.commits += latencies.len();
                    tally.elapsed += elapsed;
                    for l in latencies {
                        tallies[shape as usize].latencies.push(l);
                    }
                }
            }
            for shape in SHAPES {
                per_repeat.throughput[shape as usize].push(this[shape as usize].throughput());
            }
        }
        let [fenced, unfenced, control] = &per_repeat.throughput;
        let compared = Comparison::new(&ratios(fenced, unfenced), &ratios(control, unfenced))
            .ok_or_else(|| anyhow!("no repeat measured"))?;
        let met = compared.ab.median >= GOAL_RATIO;
        let met_in = ratios(fenced, unfenced)
            .iter()
            .filter(|r| **r >= GOAL_RATIO)
            .count();
        report.compared_goal(
            PART,
            format!(
                "{count} writer(s): fenced / unfenced commit throughput, each of {repeats} interleaved repeats"
            ),
            format!(
                "{}; met in {met_in} of {repeats} repeats",
                compared.ab.ratios()
            ),
            &format!(">= {GOAL_RATIO} (median)"),
            met,
            (&compared, NOISE),
        );
        report.info(
            PART,
            format!("{count} writer(s): A/A control, unfenced again / unfenced"),
            compared.control(),
        );
        let spread = |values: &[f64]| {
            crate::report::Spread::of(values).map_or_else(|| "none".into(), |s| s.with(rate))
        };
        report.info(
            PART,
            format!("{count} writer(s): commit throughput per repeat, fenced; unfenced"),
            format!("{}; {}", spread(fenced), spread(unfenced)),
        );
        let [fenced, unfenced, _] = &mut tallies;
        report.info(
            PART,
            format!("{count} writer(s): fenced commit latency"),
            fenced.latencies.summary(),
        );
        report.info(
            PART,
            format!("{count} writer(s): unfenced commit latency"),
            unfenced.latencies.summary(),
        );
    }
    Ok(())
}

/// Each of the first `count` writers makes [`COMMITS`] commits of `shape`
/// at once; the wall time and each commit's latency.
async fn round(
    store: &Arc<PostgresStore>,
    writers: &Arc<Vec<Writer>>,
    count: usize,
    shape: Shape,
) -> Result<(Duration, Vec<Duration>)> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..count)
        .map(|w| {
            let store = Arc::clone(store);
            let writers = Arc::clone(writers);
            tokio::spawn(async move {
                let writer = &writers[w];
                let object = &writer.objects[shape as usize];
                let mut version = store
                    .get(CLUSTER, object)
                    .await?
                    .map(|o| o.version)
                    .unwrap_or_default();
                let mut latencies = Vec::with_capacity(COMMITS);
                for i in 0..COMMITS {
                    let ops = [Op::Update {
                        key: object.clone(),
                        expected_version: version,
                        value: format!("{{\"n\":{i}}}"),
                    }];
                    let events = [NewEvent {
                        key: object.clone(),
                        reason: "Counted".into(),
                        message: format!("counted {i}"),
                    }];
                    let began = Instant::now();
                    let committed = match shape {
                        Shape::Fenced => store.commit_fenced(&writer.fence, &ops, &events).await?,
                        Shape::Unfenced | Shape::Control => {
                            store.commit_api(CLUSTER, &ops, &events).await?
                        }
                    };
                    latencies.push(began.elapsed());
                    version = committed.revision;
                }
                Ok::<_, leasehold_host::store::StoreError>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await?.map_err(|e| anyhow!("{e}"))?);
    }
    Ok((started.elapsed(), latencies))
}
