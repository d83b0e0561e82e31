//! Fenced commit against the same commit without the fence check, side by
//! side in one run on one database.
//!
//! Both shapes are the store's one transaction (lock the object, take the
//! counter, write the object and an event, notify, commit); the fenced one
//! adds the authority's fence check (the lease row read, the tenure row's
//! write count updated only while the tenure is open). Many short rounds interleave the shapes and rotate
//! which goes first, so drift in the machine's load hits them alike. A third
//! shape, the unfenced commit again on other objects, is a control: its
//! ratio to the unfenced one shows the run's noise. Reported: the throughput
//! of each, the ratios (goal: fenced >= 0.9x unfenced), and the median
//! commit latency of each.
//!
//! Needs PostgreSQL (`LEASEHOLD_DATABASE_URL`, default local). Run with
//! `cargo bench -p leasehold-host --bench store`. Not part of the tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_host::fence::{Epoch, Fence, LeaseKey};
use leasehold_host::store::{NewEvent, ObjectKey, Op, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;

const CLUSTER: &str = "bench";
/// Measured rounds (after one warm-up round).
const ROUNDS: usize = 60;
/// Commits per writer per shape per round.
const COMMITS: usize = 8;
/// Concurrency levels measured: one writer (latency-bound), and several
/// writers (each its own controller and lease) contending for the cluster's
/// commit order.
const WRITERS: &[usize] = &[1, 4];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Fenced,
    Unfenced,
    /// The unfenced commit again: the noise control.
    Control,
}

const SHAPES: [Shape; 3] = [Shape::Fenced, Shape::Unfenced, Shape::Control];

/// One writer: its lease and the object it keeps updating per shape.
struct Writer {
    fence: Fence,
    objects: [ObjectKey; 3],
}

#[derive(Default)]
struct Tally {
    commits: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Tally {
    fn throughput(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }

    fn median(&mut self) -> Duration {
        self.latencies.sort();
        self.latencies[self.latencies.len() / 2]
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let database = TestDatabase::create().await;
    let max_writers = WRITERS.iter().copied().max().unwrap_or(1);
    let db = database.database(max_writers + 1);
    let store = Arc::new(PostgresStore::new(db.clone()));
    let writers = Arc::new(setup(&db, &store, max_writers).await);
    println!(
        "store benchmark: {ROUNDS} rounds x {COMMITS} commits per writer per shape, database {}",
        db.endpoint()
    );
    for &count in WRITERS {
        let mut tallies: [Tally; 3] = Default::default();
        // Warm-up: prepares statements on every pooled connection.
        for shape in SHAPES {
            round(&store, &writers[..count], shape).await;
        }
        for r in 0..ROUNDS {
            for i in 0..SHAPES.len() {
                let shape = SHAPES[(r + i) % SHAPES.len()];
                let (elapsed, latencies) = round(&store, &writers[..count], shape).await;
                let tally = &mut tallies[shape as usize];
                tally.commits += latencies.len();
                tally.elapsed += elapsed;
                tally.latencies.extend(latencies);
            }
        }
        let [fenced, unfenced, control] = &mut tallies;
        let medians = [fenced.median(), unfenced.median(), control.median()];
        println!(
            "{count} writer(s): fenced {:.0} commits/s, unfenced {:.0} commits/s, ratio {:.3} \
             (control {:.3}); median latency fenced {:.3} ms, unfenced {:.3} ms, ratio {:.3} \
             (control {:.3})",
            fenced.throughput(),
            unfenced.throughput(),
            fenced.throughput() / unfenced.throughput(),
            control.throughput() / unfenced.throughput(),
            ms(medians[0]),
            ms(medians[1]),
            medians[1].as_secs_f64() / medians[0].as_secs_f64(),
            medians[1].as_secs_f64() / medians[2].as_secs_f64(),
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Leases (as the authority grants them) and objects for `count` writers.
async fn setup(
    db: &leasehold_host::db::Database,
    store: &PostgresStore,
    count: usize,
) -> Vec<Writer> {
    let client = db.client().await.expect("database");
    let mut writers = Vec::with_capacity(count);
    for w in 0..count {
        let name = format!("controller-{w}");
        let holder = "bench-host";
        client
            .execute(
                "INSERT INTO leasehold_leases
                        (cluster, name, holder, epoch, acquired_at, renewed_at, expires_at)
                 VALUES ($1, $2, $3, 1, clock_timestamp(), clock_timestamp(),
                         clock_timestamp() + interval '1 day')",
                &[&CLUSTER, &name, &holder],
            )
            .await
            .expect("lease");
        client
            .execute(
                "INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, acquired_at)
                 VALUES ($1, $2, 1, $3, 'bench', clock_timestamp())",
                &[&CLUSTER, &name, &holder],
            )
            .await
            .expect("tenure");
        let writer = Writer {
            fence: Fence {
                key: LeaseKey::new(CLUSTER, name),
                epoch: Epoch(1),
                holder: holder.to_string(),
            },
            objects: [
                key(&format!("fenced-{w}")),
                key(&format!("unfenced-{w}")),
                key(&format!("control-{w}")),
            ],
        };
        for object in &writer.objects {
            store
                .put(CLUSTER, object, "{\"n\":0}", Some(0))
                .await
                .expect("object");
        }
        writers.push(writer);
    }
    writers
}

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        kind: "counters".into(),
        name: name.into(),
    }
}

/// Every writer makes [`COMMITS`] commits of `shape` at once; returns the
/// wall time and each commit's latency.
async fn round(
    store: &Arc<PostgresStore>,
    writers: &[Writer],
    shape: Shape,
) -> (Duration, Vec<Duration>) {
    let start = Instant::now();
    let tasks: Vec<_> = writers
        .iter()
        .map(|writer| {
            let store = Arc::clone(store);
            let fence = writer.fence.clone();
            let object = writer.objects[shape as usize].clone();
            tokio::spawn(async move {
                let mut version = store
                    .get(CLUSTER, &object)
                    .await
                    .expect("read")
                    .expect("object exists")
                    .version;
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
                        Shape::Fenced => store.commit_fenced(&fence, &ops, &events).await,
                        Shape::Unfenced | Shape::Control => {
                            store.commit_api(CLUSTER, &ops, &events).await
                        }
                    }
                    .expect("commit");
                    latencies.push(began.elapsed());
                    version = committed.revision;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("writer"));
    }
    (start.elapsed(), latencies)
}
