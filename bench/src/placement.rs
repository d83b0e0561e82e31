//! Placement convergence (issue 19): how long fair placement takes to
//! spread 12 leases over the live hosts after a join, after a SIGKILL and
//! after the killed host returns, and how many moves it takes. Real
//! `leasehold` processes (release build) on PostgreSQL, three hosts
//! `host-a`, `host-b`, `host-c` each running the same 12 controllers (the
//! `rollout` example component under 12 names), every setting at its
//! default: placement on, `slack = 0`, `min_tenure = "10s"`; lease ttl
//! 10 s, renew every 2 s (so placement beats every second);
//! `crash_detection = "session"`. `--quick` runs one repeat with
//! `min_tenure = "1s"`, and labels its rows so.
//!
//! Each repeat, on a cluster of its own in one database, starts every
//! phase on a settled cluster: every tenure older than `min_tenure` (a
//! lease is never handed over sooner), as `tests/tests/placement.rs` has
//! it. The wait for that is also each phase's watch for late moves.
//!
//! 1. `host-a` starts alone and takes all 12 leases; then `host-b` joins:
//!    its `/readyz` 200 to 6 ± 1 each, for information (one host hands
//!    over one lease at a time).
//! 2. `host-c` joins the settled pair. From its `/readyz` answering 200
//!    (the bench polls it) until every host holds 4 ± 1 — the issue's
//!    goal is 2 s, judged on the median over repeats — until 4 / 4 / 4,
//!    and until the join's last move: the last change of holder seen
//!    before none for [`QUIET`].
//! 3. SIGKILL of one host (`host-a`, `-b`, `-c` by turns over repeats):
//!    from the signal until the two survivors hold all 12 again, until
//!    each holds 6 ± 1, and until the last move.
//! 4. The killed host starts again: from its `/readyz` 200 until 4 ± 1
//!    each and until the last move.
//!
//! Holders are read from the lease rows (`leasehold_leases`: held = not
//! released and unexpired by the database clock) every [`POLL`] or so,
//! `/readyz` in the same loop: a moment is the poll that first saw it, on
//! the bench's clock, so each figure is late by up to one poll (a few
//! milliseconds to tens on a busy machine). Moves are counted from the
//! tenure history (`leasehold_tenures`): every grant after the event to a
//! holder other than the lease's previous one, an orderly handover when
//! the previous tenure ended `released`. A phase's moves are counted up to
//! the next phase's event, at least `min_tenure` after its last grant
//! (after the return, `min_tenure` + [`FLAP_OVER_TENURE`]): a lease that
//! moved may move again only after `min_tenure`, so a flap shows there,
//! as a *late* move (one made after the watch saw no move for [`QUIET`]).
//! Each phase's moves are set against the fewest that reach its final
//! counts (each lease a host must lose is one move); any beyond that are
//! *extra* (a lease moved more than balance needed). Each repeat's
//! progress line lists every lease that moved with its holders in turn.
//! Beside them, each running host's `leasehold_placement_moves_total` by
//! reason, scraped before and after the phase: the moves its grants
//! recorded, so their sum over the hosts is the phase's moves.
//!
//! To save time, a repeat's return is counted while the next repeat's
//! `host-a` waits out its `min_tenure` (both only wait then).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use leasehold_host::testing::TestDatabase;

use crate::Scale;
use crate::document;
use crate::http;
use crate::process::{Replica, eventually, free_port};
use crate::report::{Report, Spread, duration, duration_spread};
use crate::support::{self, TempDir};

const PART: &str = "placement";
const LEASES: usize = 12;
const HOSTS: [&str; 3] = ["host-a", "host-b", "host-c"];
const REPEATS: usize = 5;
const QUICK_REPEATS: usize = 1;
/// The default `[placement] min_tenure`, which the full run keeps.
const MIN_TENURE: Duration = Duration::from_secs(10);
/// `--quick` shortens it, to be short.
const QUICK_MIN_TENURE: Duration = Duration::from_secs(1);
/// How long no lease may change holder before a phase's last move counts
/// as its last: three beats of placement at the default timing (a host
/// decides each handover on a fresh view, at least one a beat).
const QUIET: Duration = Duration::from_secs(3);
/// After the return, late moves are counted until `min_tenure` plus this
/// after its last grant.
const FLAP_OVER_TENURE: Duration = Duration::from_secs(2);
/// How often the lease rows (and `/readyz`) are read.
const POLL: Duration = Duration::from_millis(10);
/// Start-up of a replica (compiling the component the first time).
const START_LIMIT: Duration = Duration::from_secs(120);
/// Longest a phase may take to settle before the run is called broken.
const SETTLE_LIMIT: Duration = Duration::from_secs(90);
/// The issue's goal: within 2 s of the third host becoming ready, each
/// holds 4 ± 1.
const JOIN_GOAL: Duration = Duration::from_secs(2);

pub fn run(scale: Scale, report: &mut Report) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(scale, report))
}

/// One lease row as a poll reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    holder: String,
    epoch: i64,
    /// Not released and not expired by the database clock.
    live: bool,
}

/// Every lease row of a cluster, by lease name.
type Table = BTreeMap<String, Row>;

/// One tenure of the history: lease, epoch, holder, end reason (empty
/// while it runs).
type Tenure = (String, i64, String, String);

/// Live leases per holder.
fn held(table: &Table) -> BTreeMap<&str, usize> {
    let mut held = BTreeMap::new();
    for row in table.values().filter(|r| r.live) {
        *held.entry(row.holder.as_str()).or_insert(0) += 1;
    }
    held
}

/// Whether `hosts` hold all `leases` leases live, each `want ± spread`,
/// and no other holder holds one.
fn balanced(table: &Table, hosts: &[&str], leases: usize, want: usize, spread: usize) -> bool {
    let held = held(table);
    let total: usize = held.values().sum();
    let fair = hosts.iter().all(|h| {
        let n = held.get(h).copied().unwrap_or(0);
        n + spread >= want && n <= want + spread
    });
    let only_them = held.keys().all(|h| hosts.contains(h));
    total == leases && fair && only_them
}

/// Whether some lease has another holder in `now` than in `before`.
fn holder_changed(before: &Table, now: &Table) -> bool {
    now.iter()
        .any(|(name, row)| before.get(name).is_some_and(|b| b.holder != row.holder))
}

/// What [`moves`] counts.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counted {
    moves: usize,
    /// Moves whose previous tenure ended `released` (orderly handovers).
    handovers: usize,
    /// Each lease that moved: its holders in turn, from the one at the
    /// snapshot.
    paths: BTreeMap<String, Vec<String>>,
}

/// Moves made after the snapshot `start`: grants, in `tenures` (sorted by
/// lease, then epoch), of a lease past its epoch in `start` to a holder
/// other than its previous one.
fn moves(start: &Table, tenures: &[Tenure]) -> Counted {
    let mut counted = Counted::default();
    // The lease's latest tenure so far: (lease, holder, end reason).
    let mut previous: Option<(&str, &str, &str)> = None;
    for (lease, epoch, holder, end) in tenures {
        let Some(at_start) = start.get(lease) else {
            continue;
        };
        if *epoch < at_start.epoch {
            continue;
        }
        if *epoch > at_start.epoch
            && let Some((prev_lease, prev_holder, prev_end)) = previous
            && prev_lease == lease
            && prev_holder != holder
        {
            counted.moves += 1;
            if prev_end == "released" {
                counted.handovers += 1;
            }
            counted
                .paths
                .entry(lease.clone())
                .or_insert_with(|| vec![prev_holder.to_string()])
                .push(holder.clone());
        }
        previous = Some((lease, holder, end));
    }
    counted
}

/// The fewest moves that take the holders' counts in `start` to those in
/// `end`: each lease a holder must lose is one move.
fn needed(start: &Table, end: &Table) -> usize {
    let count = |table: &Table| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for row in table.values() {
            *counts.entry(row.holder.clone()).or_insert(0) += 1;
        }
        counts
    };
    let after = count(end);
    count(start)
        .iter()
        .map(|(h, n)| n.saturating_sub(after.get(h).copied().unwrap_or(0)))
        .sum()
}

/// `leasehold_placement_moves_total` by reason in a `/metrics` text.
fn decisions(metrics: &str) -> BTreeMap<String, u64> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("leasehold_placement_moves_total{"))
        .filter_map(|rest| {
            let (labels, value) = rest.split_once('}')?;
            let reason = labels
                .split(',')
                .find_map(|l| l.trim().strip_prefix("reason="))?
                .trim_matches('"');
            let value: f64 = value.trim().parse().ok()?;
            Some((reason.to_string(), value as u64))
        })
        .collect()
}

/// Each running host's `leasehold_placement_moves_total` by reason.
type Scrape = BTreeMap<String, BTreeMap<String, u64>>;

/// The moves the hosts counted between two scrapes, summed by reason: only the
/// hosts scraped at the end count (a host killed since made no more), each
/// from zero if it was not scraped at the start (it started, or started
/// again, in between).
fn decided_between(start: &Scrape, end: &Scrape) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    for (host, counts) in end {
        for (reason, n) in counts {
            let before = start
                .get(host)
                .and_then(|c| c.get(reason))
                .copied()
                .unwrap_or(0);
            *sum.entry(reason.clone()).or_insert(0) += n.saturating_sub(before);
        }
    }
    sum
}

fn config(
    cluster: &str,
    holder: &str,
    port: u16,
    url: &str,
    min_tenure: Duration,
) -> Result<String> {
    let rollout = support::guest("rollout")?;
    let cache = support::component_cache();
    // Only `--quick` sets min_tenure; the full run keeps every default.
    let placement = if min_tenure == MIN_TENURE {
        String::new()
    } else {
        format!(
            "\n[placement]\nmin_tenure = \"{}ms\"\n",
            min_tenure.as_millis()
        )
    };
    let mut text = format!(
        r#"
cluster = "{cluster}"
holder = "{holder}"

[database]
url = "{url}"

[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"
{placement}"#,
        cache = cache.display(),
    );
    for i in 0..LEASES {
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"{}\"\ncomponent = \"{}\"\n",
            lease(i),
            rollout.display()
        ));
    }
    Ok(text)
}

fn lease(i: usize) -> String {
    format!("r{i:02}")
}

/// What one watch of the lease rows saw, as moments on the bench's clock.
#[derive(Debug)]
struct Watched {
    /// When the watched host's `/readyz` first answered 200 (for a kill:
    /// the signal).
    origin: Instant,
    /// When `hosts` first held every lease (any counts).
    covered: Instant,
    /// When they first held `want ± 1` each.
    balanced: Instant,
    /// When they first held exactly `want` each, if they did.
    even: Option<Instant>,
    /// The last poll that saw a lease change holder, if one did.
    last_move: Option<Instant>,
}

impl Watched {
    fn since(&self, moment: Instant) -> Duration {
        moment.saturating_duration_since(self.origin)
    }

    /// From the origin to the last move (zero if none, or it came first).
    fn to_last_move(&self) -> Duration {
        self.last_move.map_or(Duration::ZERO, |m| self.since(m))
    }
}

/// What to watch for, and until when.
struct Watch<'a> {
    /// The hosts that should hold the leases.
    hosts: &'a [&'a str],
    /// Leases each should hold.
    want: usize,
    /// The host whose `/readyz` is the origin; `None`: the origin is given.
    ready: Option<&'a Replica>,
    /// The origin when no host's readiness is.
    origin: Option<Instant>,
    /// How long no lease may change holder at the end.
    quiet: Duration,
}

/// Three hosts of one cluster and a session on its database.
struct Cluster {
    name: String,
    url: String,
    min_tenure: Duration,
    dir: TempDir,
    ports: [u16; 3],
    hosts: [Option<Replica>; 3],
    client: tokio_postgres::Client,
}

impl Cluster {
    async fn new(database: &TestDatabase, name: String, min_tenure: Duration) -> Result<Self> {
        let (client, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
            .await
            .context("connecting to the benchmark database")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self {
            dir: TempDir::new(&name)?,
            name,
            url: database.url().to_string(),
            min_tenure,
            ports: [free_port()?, free_port()?, free_port()?],
            hosts: [None, None, None],
            client,
        })
    }

    /// Start host `i` (again, if it ran before); the moment it was spawned.
    fn start(&mut self, i: usize) -> Result<Instant> {
        let spawned = Instant::now();
        match &mut self.hosts[i] {
            Some(replica) => replica.restart()?,
            slot => {
                let text = config(
                    &self.name,
                    HOSTS[i],
                    self.ports[i],
                    &self.url,
                    self.min_tenure,
                )?;
                *slot = Some(Replica::start(
                    self.dir.path(),
                    HOSTS[i],
                    self.ports[i],
                    &text,
                )?);
            }
        }
        Ok(spawned)
    }

    fn host(&self, i: usize) -> Result<&Replica> {
        self.hosts[i]
            .as_ref()
            .ok_or_else(|| anyhow!("{} was never started", HOSTS[i]))
    }

    /// Every host's log tail, for an error.
    fn logs(&self) -> String {
        self.hosts
            .iter()
            .flatten()
            .map(|r| format!("log of {}:\n{}", r.name, r.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every running host's counted placement moves so far.
    async fn scrape(&self) -> Result<Scrape> {
        let mut scrape = Scrape::new();
        for replica in self.hosts.iter().flatten().filter(|r| r.pid().is_ok()) {
            let response = http::get(&replica.addr, "/metrics").await?;
            if response.status != 200 {
                bail!("/metrics of {} answered {}", replica.name, response.status);
            }
            scrape.insert(replica.name.clone(), decisions(&response.body));
        }
        Ok(scrape)
    }

    async fn table(&self) -> Result<Table> {
        let rows = self
            .client
            .query(
                "SELECT name, holder, epoch, NOT released AND expires_at > clock_timestamp()
                   FROM leasehold_leases WHERE cluster = $1",
                &[&self.name],
            )
            .await
            .context("reading the lease rows")?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    Row {
                        holder: r.get(1),
                        epoch: r.get(2),
                        live: r.get(3),
                    },
                )
            })
            .collect())
    }

    async fn tenures(&self) -> Result<Vec<Tenure>> {
        let rows = self
            .client
            .query(
                "SELECT lease, epoch, holder, coalesce(end_reason, '') FROM leasehold_tenures
                  WHERE cluster = $1 ORDER BY lease, epoch",
                &[&self.name],
            )
            .await
            .context("reading the tenures")?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    /// Wait until every live tenure is older than `min_tenure` (database
    /// clock), so each may be handed over.
    async fn until_tenures_movable(&self) -> Result<()> {
        let secs = self.min_tenure.as_secs_f64();
        eventually(
            "every live tenure passed min_tenure",
            SETTLE_LIMIT,
            || async {
                let young: i64 = self
                    .client
                    .query_one(
                        "SELECT count(*) FROM leasehold_leases
                          WHERE cluster = $1 AND NOT released
                            AND acquired_at > clock_timestamp() - make_interval(secs => $2)",
                        &[&self.name, &secs],
                    )
                    .await
                    .ok()?
                    .get(0);
                (young == 0).then_some(())
            },
        )
        .await
    }

    /// Poll the lease rows (and the readiness `watch` names) until `hosts`
    /// hold `want ± 1` each and no lease changed holder for `quiet`.
    async fn watch(&self, watch: Watch<'_>) -> Result<Watched> {
        let started = Instant::now();
        let mut origin = watch.origin;
        let mut previous: Option<Table> = None;
        let (mut covered, mut balanced_at, mut even) = (None, None, None);
        let mut last_move: Option<Instant> = None;
        loop {
            if origin.is_none()
                && let Some(host) = watch.ready
                && http::get(&host.addr, "/readyz")
                    .await
                    .is_ok_and(|r| r.status == 200)
            {
                origin = Some(Instant::now());
            }
            let table = self.table().await?;
            let now = Instant::now();
            if previous.as_ref().is_some_and(|p| holder_changed(p, &table)) {
                last_move = Some(now);
            }
            let spread = |s| balanced(&table, watch.hosts, LEASES, watch.want, s);
            if covered.is_none() && spread(LEASES) {
                covered = Some(now);
            }
            let fair = spread(1);
            if balanced_at.is_none() && fair {
                balanced_at = Some(now);
            }
            if even.is_none() && spread(0) {
                even = Some(now);
            }
            let quiet_since = last_move.into_iter().chain(balanced_at).max();
            if let (Some(origin), Some(covered), Some(balanced), Some(since)) =
                (origin, covered, balanced_at, quiet_since)
                && fair
                && now.duration_since(since) >= watch.quiet
            {
                return Ok(Watched {
                    origin,
                    covered,
                    balanced,
                    even,
                    last_move,
                });
            }
            if started.elapsed() > SETTLE_LIMIT {
                bail!(
                    "{:?} did not settle at {} ± 1 leases each within {SETTLE_LIMIT:?} \
                     (ready: {}): held {:?}\n{}",
                    watch.hosts,
                    watch.want,
                    origin.is_some(),
                    held(&table),
                    self.logs()
                );
            }
            previous = Some(table);
            tokio::time::sleep(POLL).await;
        }
    }

    /// The rows and every host's counted moves before an event.
    async fn snapshot(&self) -> Result<(Table, Scrape)> {
        Ok((self.table().await?, self.scrape().await?))
    }

    /// How many moves were made since `start` (a [`Cluster::snapshot`]).
    async fn moves_now(&self, start: &(Table, Scrape)) -> Result<usize> {
        Ok(moves(&start.0, &self.tenures().await?).moves)
    }

    /// After a phase's watch: wait until every tenure may be handed over
    /// again, then `beyond`, so a lease the phase moved had `min_tenure` to
    /// move again; then count the phase's moves since `start`, `at_quiet`
    /// of them made by the time its watch ended.
    async fn settle(
        &self,
        start: &(Table, Scrape),
        at_quiet: usize,
        beyond: Duration,
    ) -> Result<Moves> {
        self.until_tenures_movable().await?;
        tokio::time::sleep(beyond).await;
        let table = self.table().await?;
        let counted = moves(&start.0, &self.tenures().await?);
        Ok(Moves {
            moves: counted.moves,
            handovers: counted.handovers,
            needed: needed(&start.0, &table),
            late: counted.moves.saturating_sub(at_quiet),
            decided: decided_between(&start.1, &self.scrape().await?),
            paths: counted.paths,
        })
    }
}

/// A phase's moves.
#[derive(Debug, Clone, Default)]
struct Moves {
    moves: usize,
    /// Moves by orderly release (the previous tenure ended `released`).
    handovers: usize,
    /// The fewest moves that reach the phase's final counts.
    needed: usize,
    /// Moves made after the phase's watch ended (no move for [`QUIET`]):
    /// a lease moving again, or a move that waited.
    late: usize,
    /// The placement moves the hosts counted, by reason
    /// (`leasehold_placement_moves_total`: each move once, by the host
    /// whose grant recorded it).
    decided: BTreeMap<String, u64>,
    /// Each lease that moved: its holders in turn.
    paths: BTreeMap<String, Vec<String>>,
}

impl Moves {
    fn extra(&self) -> usize {
        self.moves.saturating_sub(self.needed)
    }
}

/// One phase's figures over the repeats.
#[derive(Debug, Default)]
struct Phase {
    /// Process start to `/readyz` 200 (joins only).
    start_to_ready: Vec<Duration>,
    covered: Vec<Duration>,
    balanced: Vec<Duration>,
    even: Vec<Option<Duration>>,
    last_move: Vec<Duration>,
    moves: Vec<Moves>,
}

impl Phase {
    fn add(&mut self, spawned: Option<Instant>, watched: &Watched, moves: Moves) {
        if let Some(spawned) = spawned {
            self.start_to_ready
                .push(watched.origin.saturating_duration_since(spawned));
        }
        self.covered.push(watched.since(watched.covered));
        self.balanced.push(watched.since(watched.balanced));
        self.even.push(watched.even.map(|e| watched.since(e)));
        self.last_move.push(watched.to_last_move());
        self.moves.push(moves);
    }

    /// The moves of each repeat, against the fewest needed.
    fn moves_text(&self) -> String {
        let list = |f: fn(&Moves) -> usize| {
            self.moves
                .iter()
                .map(|m| f(m).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let handovers: usize = self.moves.iter().map(|m| m.handovers).sum();
        let total: usize = self.moves.iter().map(|m| m.moves).sum();
        let extra: usize = self.moves.iter().map(Moves::extra).sum();
        let late: usize = self.moves.iter().map(|m| m.late).sum();
        let mut decided: BTreeMap<&str, u64> = BTreeMap::new();
        for (reason, n) in self.moves.iter().flat_map(|m| &m.decided) {
            *decided.entry(reason).or_insert(0) += n;
        }
        let decided: Vec<String> = decided.iter().map(|(r, n)| format!("{r} {n}")).collect();
        format!(
            "each: {} (fewest for the final counts: {}); {handovers} of {total} by orderly \
             release; {extra} extra; {late} after the phase was quiet; counted by the hosts: {}",
            list(|m| m.moves),
            list(|m| m.needed),
            decided.join(", ")
        )
    }
}

/// One repeat's phase as a progress line.
fn progress(repeat: usize, phase: &str, figures: &[(&str, Duration)], moved: &Moves) {
    let figures: Vec<String> = figures
        .iter()
        .map(|(what, d)| format!("{what} {}", duration(*d)))
        .collect();
    let decided: Vec<String> = moved
        .decided
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let paths: Vec<String> = moved
        .paths
        .iter()
        .map(|(lease, holders)| {
            let short: Vec<&str> = holders
                .iter()
                .map(|h| h.strip_prefix("host-").unwrap_or(h))
                .collect();
            format!("{lease} {}", short.join(">"))
        })
        .collect();
    println!(
        "  repeat {repeat}, {phase}: {}; {} moves ({} by release, {} needed, {} late: {}; \
         counted by the hosts: {}); load {}",
        figures.join(", "),
        moved.moves,
        moved.handovers,
        moved.needed,
        moved.late,
        paths.join(", "),
        decided.join(", "),
        document::load_average()
    );
}

/// `min / median / max` of `values`, then each repeat's figure.
fn spread_and_each(values: &[Duration]) -> String {
    let each: Vec<String> = values.iter().map(|d| duration(*d)).collect();
    format!("{}; each: {}", duration_spread(values), each.join(", "))
}

/// The exact-balance figures, or how many repeats never reached it.
fn even_text(values: &[Option<Duration>]) -> String {
    let reached: Vec<Duration> = values.iter().flatten().copied().collect();
    let missing = values.len() - reached.len();
    let mut text = spread_and_each(&reached);
    if missing > 0 {
        text.push_str(&format!("; not reached in {missing} repeat(s)"));
    }
    text
}

/// A repeat's last phase, the return, whose moves are counted once the
/// next repeat's first host holds its leases (the wait for `min_tenure`
/// of both overlaps).
struct Returning {
    cluster: Cluster,
    repeat: usize,
    victim: usize,
    start: (Table, Scrape),
    spawned: Instant,
    watched: Watched,
    at_quiet: usize,
}

impl Returning {
    /// Count its moves until `min_tenure` + [`FLAP_OVER_TENURE`] after its
    /// last grant, then stop its hosts.
    async fn finish(mut self, back: &mut Phase) -> Result<()> {
        let moved = self
            .cluster
            .settle(&self.start, self.at_quiet, FLAP_OVER_TENURE)
            .await?;
        progress(
            self.repeat,
            &format!("{} returns", HOSTS[self.victim]),
            &[
                ("ready -> 4 ± 1", self.watched.since(self.watched.balanced)),
                ("last move", self.watched.to_last_move()),
            ],
            &moved,
        );
        back.add(Some(self.spawned), &self.watched, moved);
        for replica in self.cluster.hosts.iter_mut().flatten() {
            replica.kill().await?;
        }
        Ok(())
    }
}

async fn measure(scale: Scale, report: &mut Report) -> Result<()> {
    let repeats = scale.pick(REPEATS, QUICK_REPEATS);
    let min_tenure = if scale.quick {
        QUICK_MIN_TENURE
    } else {
        MIN_TENURE
    };
    let label = if scale.quick {
        "min_tenure 1 s (--quick)".to_string()
    } else {
        format!("default min_tenure {} s", MIN_TENURE.as_secs())
    };
    let load_start = document::load_average();
    let database = TestDatabase::create().await;
    let tag = format!("{:x}", chrono::Utc::now().timestamp_micros() & 0xff_ffff);
    let (mut second, mut third, mut kill, mut back) = (
        Phase::default(),
        Phase::default(),
        Phase::default(),
        Phase::default(),
    );
    let mut victims = Vec::new();
    let mut returning: Option<Returning> = None;
    for r in 1..=repeats {
        let mut cluster =
            Cluster::new(&database, format!("placement-{tag}-{r}"), min_tenure).await?;

        // host-a alone takes every lease.
        cluster.start(0)?;
        cluster.host(0)?.wait_healthy(START_LIMIT).await?;
        eventually("host-a holds all 12 leases", START_LIMIT, || async {
            let table = cluster.table().await.ok()?;
            balanced(&table, &HOSTS[..1], LEASES, LEASES, 0).then_some(())
        })
        .await
        .with_context(|| cluster.logs())?;
        if let Some(previous) = returning.take() {
            previous.finish(&mut back).await?;
        }
        cluster.until_tenures_movable().await?;

        // The second host joins a settled host.
        let start = cluster.snapshot().await?;
        let spawned = cluster.start(1)?;
        let watched = cluster
            .watch(Watch {
                hosts: &HOSTS[..2],
                want: LEASES / 2,
                ready: Some(cluster.host(1)?),
                origin: None,
                quiet: QUIET,
            })
            .await?;
        let at_quiet = cluster.moves_now(&start).await?;
        let moved = cluster.settle(&start, at_quiet, Duration::ZERO).await?;
        progress(
            r,
            "second host joins",
            &[
                ("ready -> 6 ± 1", watched.since(watched.balanced)),
                ("last move", watched.to_last_move()),
            ],
            &moved,
        );
        second.add(Some(spawned), &watched, moved);

        // The third host joins a settled pair: the goal.
        let start = cluster.snapshot().await?;
        let spawned = cluster.start(2)?;
        let watched = cluster
            .watch(Watch {
                hosts: &HOSTS,
                want: LEASES / 3,
                ready: Some(cluster.host(2)?),
                origin: None,
                quiet: QUIET,
            })
            .await?;
        let at_quiet = cluster.moves_now(&start).await?;
        let moved = cluster.settle(&start, at_quiet, Duration::ZERO).await?;
        progress(
            r,
            "third host joins",
            &[
                ("ready -> 4 ± 1", watched.since(watched.balanced)),
                ("last move", watched.to_last_move()),
            ],
            &moved,
        );
        third.add(Some(spawned), &watched, moved);

        // SIGKILL one of the three settled hosts, by turns.
        let victim = (r - 1) % HOSTS.len();
        victims.push(HOSTS[victim]);
        let survivors: Vec<&str> = (0..HOSTS.len())
            .filter(|i| *i != victim)
            .map(|i| HOSTS[i])
            .collect();
        let start = cluster.snapshot().await?;
        let struck = Instant::now();
        cluster.hosts[victim]
            .as_mut()
            .ok_or_else(|| anyhow!("{} is not running", HOSTS[victim]))?
            .kill()
            .await?;
        let watched = cluster
            .watch(Watch {
                hosts: &survivors,
                want: LEASES / 2,
                ready: None,
                origin: Some(struck),
                quiet: QUIET,
            })
            .await?;
        let at_quiet = cluster.moves_now(&start).await?;
        let moved = cluster.settle(&start, at_quiet, Duration::ZERO).await?;
        progress(
            r,
            &format!("SIGKILL {}", HOSTS[victim]),
            &[
                ("-> 12 held", watched.since(watched.covered)),
                ("6 ± 1", watched.since(watched.balanced)),
                ("last move", watched.to_last_move()),
            ],
            &moved,
        );
        kill.add(None, &watched, moved);

        // It returns to the settled survivors.
        let start = cluster.snapshot().await?;
        let spawned = cluster.start(victim)?;
        let watched = cluster
            .watch(Watch {
                hosts: &HOSTS,
                want: LEASES / 3,
                ready: Some(cluster.host(victim)?),
                origin: None,
                quiet: QUIET,
            })
            .await?;
        let at_quiet = cluster.moves_now(&start).await?;
        returning = Some(Returning {
            cluster,
            repeat: r,
            victim,
            start,
            spawned,
            watched,
            at_quiet,
        });
    }
    if let Some(last) = returning.take() {
        last.finish(&mut back).await?;
    }

    let settings =
        format!("12 controllers, placement defaults (slack 0), {label}, ttl 10 s, renew 2 s");
    report.info(
        PART,
        format!("second host joins one settled host ({settings}): /readyz 200 -> 6 ± 1 each"),
        spread_and_each(&second.balanced),
    );
    report.info(
        PART,
        "second host's join: /readyz 200 -> last move (none for 3 s after)",
        spread_and_each(&second.last_move),
    );
    report.info(
        PART,
        "second host's join: moves (one host hands over one at a time)",
        second.moves_text(),
    );
    let secs: Vec<f64> = third.balanced.iter().map(Duration::as_secs_f64).collect();
    let median = Spread::of(&secs).map_or(f64::INFINITY, |s| s.median);
    report.goal(
        PART,
        format!(
            "third host joins a settled pair ({settings}): its /readyz 200 -> every host holds 4 ± 1"
        ),
        spread_and_each(&third.balanced),
        "<= 2 s (issue 19), judged on the median",
        median <= JOIN_GOAL.as_secs_f64(),
    );
    report.info(
        PART,
        "third host's join: /readyz 200 -> 4 / 4 / 4",
        even_text(&third.even),
    );
    report.info(
        PART,
        "third host's join: /readyz 200 -> last move (none for 3 s after)",
        spread_and_each(&third.last_move),
    );
    report.info(PART, "third host's join: moves", third.moves_text());
    report.info(
        PART,
        "third host: process start -> /readyz 200",
        spread_and_each(&third.start_to_ready),
    );
    let kill_label = format!(
        "SIGKILL of one of three balanced hosts ({}; crash_detection = session, ttl 10 s)",
        victims.join(", ")
    );
    report.info(
        PART,
        format!("{kill_label}: -> the two survivors hold all 12"),
        spread_and_each(&kill.covered),
    );
    report.info(
        PART,
        "after the SIGKILL: -> each survivor holds 6 ± 1",
        spread_and_each(&kill.balanced),
    );
    report.info(PART, "after the SIGKILL: -> 6 / 6", even_text(&kill.even));
    report.info(
        PART,
        "after the SIGKILL: -> last move (none for 3 s after)",
        spread_and_each(&kill.last_move),
    );
    report.info(
        PART,
        "after the SIGKILL: moves (takeovers, then handovers)",
        kill.moves_text(),
    );
    report.info(
        PART,
        "killed host returns: its /readyz 200 -> every host holds 4 ± 1",
        spread_and_each(&back.balanced),
    );
    report.info(
        PART,
        "killed host returns: /readyz 200 -> 4 / 4 / 4",
        even_text(&back.even),
    );
    report.info(
        PART,
        "killed host returns: /readyz 200 -> last move (none for 3 s after)",
        spread_and_each(&back.last_move),
    );
    report.info(
        PART,
        "killed host returns: moves (late ones counted until min_tenure + 2 s after the last grant)",
        back.moves_text(),
    );
    report.info(
        PART,
        "load average (1 / 5 / 15 min) at the part's start, end",
        format!("{load_start}; {}", document::load_average()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[(&str, &str, i64, bool)]) -> Table {
        rows.iter()
            .map(|(name, holder, epoch, live)| {
                (
                    name.to_string(),
                    Row {
                        holder: holder.to_string(),
                        epoch: *epoch,
                        live: *live,
                    },
                )
            })
            .collect()
    }

    /// Twelve leases, the first `a` held by `host-a`, the next `b` by
    /// `host-b`, the rest by `host-c`, all live.
    fn split(a: usize, b: usize) -> Table {
        (0..LEASES)
            .map(|i| {
                let holder = if i < a {
                    "host-a"
                } else if i < a + b {
                    "host-b"
                } else {
                    "host-c"
                };
                (
                    lease(i),
                    Row {
                        holder: holder.into(),
                        epoch: 1,
                        live: true,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn balance_needs_every_lease_held_live_by_the_hosts_within_the_spread() {
        assert!(balanced(&split(4, 4), &HOSTS, LEASES, 4, 0));
        assert!(balanced(&split(5, 4), &HOSTS, LEASES, 4, 1));
        assert!(!balanced(&split(5, 4), &HOSTS, LEASES, 4, 0));
        // 6 / 4 / 2 is not 4 ± 1.
        assert!(!balanced(&split(6, 4), &HOSTS, LEASES, 4, 1));
        // A lease released and not yet granted again is held by nobody.
        let mut gap = split(4, 4);
        gap.get_mut("r00").unwrap().live = false;
        assert!(!balanced(&gap, &HOSTS, LEASES, 4, 1));
        // After a kill the dead host's unexpired rows are not the
        // survivors'.
        let survivors = ["host-a", "host-b"];
        assert!(!balanced(&split(4, 4), &survivors, LEASES, 6, 2));
        assert!(balanced(&split(6, 6), &survivors, LEASES, 6, 0));
        assert!(balanced(&split(8, 4), &survivors, LEASES, 6, LEASES));
        assert!(!balanced(&split(8, 4), &survivors, LEASES, 6, 1));
    }

    #[test]
    fn a_change_of_holder_is_seen_and_a_renewal_is_not() {
        let before = table(&[("r00", "host-a", 1, true), ("r01", "host-b", 1, true)]);
        let renewed = table(&[("r00", "host-a", 1, true), ("r01", "host-b", 1, true)]);
        assert!(!holder_changed(&before, &renewed));
        let released = table(&[("r00", "host-a", 1, false), ("r01", "host-b", 1, true)]);
        assert!(!holder_changed(&before, &released));
        let moved = table(&[("r00", "host-c", 2, true), ("r01", "host-b", 1, true)]);
        assert!(holder_changed(&before, &moved));
    }

    #[test]
    fn moves_count_grants_to_another_holder_after_the_snapshot_only() {
        let start = table(&[
            ("r00", "host-a", 2, true),
            ("r01", "host-b", 1, true),
            ("r02", "host-a", 1, true),
        ]);
        let tenures: Vec<Tenure> = [
            // Before the snapshot: not counted.
            ("r00", 1, "host-b", "released"),
            // r00: handed over to host-c, then back to host-a (a flap:
            // two moves), then granted to host-a again (no move).
            ("r00", 2, "host-a", "released"),
            ("r00", 3, "host-c", "released"),
            ("r00", 4, "host-a", "lost"),
            ("r00", 5, "host-a", ""),
            // r01: its holder died, host-a took it over.
            ("r01", 1, "host-b", "superseded"),
            ("r01", 2, "host-a", ""),
            // r02: untouched.
            ("r02", 1, "host-a", ""),
        ]
        .iter()
        .map(|(l, e, h, r)| (l.to_string(), *e, h.to_string(), r.to_string()))
        .collect();
        let path = |holders: &[&str]| holders.iter().map(|h| h.to_string()).collect();
        assert_eq!(
            moves(&start, &tenures),
            Counted {
                moves: 3,
                handovers: 2,
                paths: BTreeMap::from([
                    ("r00".into(), path(&["host-a", "host-c", "host-a"])),
                    ("r01".into(), path(&["host-b", "host-a"])),
                ]),
            }
        );
        // The same history seen from a later snapshot of r00.
        let later = table(&[("r00", "host-c", 3, true), ("r01", "host-a", 2, true)]);
        assert_eq!(
            moves(&later, &tenures),
            Counted {
                moves: 1,
                handovers: 1,
                paths: BTreeMap::from([("r00".into(), path(&["host-c", "host-a"]))]),
            }
        );
    }

    #[test]
    fn decisions_are_read_by_reason_and_counted_from_each_hosts_start() {
        let text = "# HELP leasehold_placement_moves_total Leases moved\n\
                    # TYPE leasehold_placement_moves_total counter\n\
                    leasehold_placement_moves_total{reason=\"over_share\"} 3\n\
                    leasehold_placement_moves_total{reason=\"no_other_host\"} 1\n\
                    leasehold_placement_moves_total{reason=\"lapsed\"} 0\n\
                    leasehold_leader{controller=\"r00\"} 1\n";
        let read = decisions(text);
        assert_eq!(read.len(), 3);
        assert_eq!((read["over_share"], read["no_other_host"]), (3, 1));
        let counts = |over: u64, none: u64| {
            BTreeMap::from([
                ("over_share".to_string(), over),
                ("no_other_host".to_string(), none),
            ])
        };
        let start = Scrape::from([
            ("host-a".to_string(), counts(6, 0)),
            ("host-b".to_string(), counts(2, 1)),
        ]);
        // host-a made two more; host-b was killed (not scraped at the
        // end); host-c started in between, from zero.
        let end = Scrape::from([
            ("host-a".to_string(), counts(8, 0)),
            ("host-c".to_string(), counts(0, 2)),
        ]);
        assert_eq!(decided_between(&start, &end), counts(2, 2));
    }

    #[test]
    fn the_fewest_moves_are_the_leases_each_host_must_lose() {
        // 6 / 6 / 0 to 4 / 4 / 4: two from each.
        assert_eq!(needed(&split(6, 6), &split(4, 4)), 4);
        // 4 / 4 / 4 to 6 / 6 (host-c killed): its four.
        assert_eq!(needed(&split(4, 4), &split(6, 6)), 4);
        // 8 / 4 after a kill, to 6 / 6: two more.
        assert_eq!(needed(&split(8, 4), &split(6, 6)), 2);
        assert_eq!(needed(&split(4, 4), &split(4, 4)), 0);
    }
}
