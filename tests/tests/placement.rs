//! Fair placement of leases across replicas (issue 19, point 1): real
//! `leasehold` processes on PostgreSQL, three hosts running the same 12
//! leases: three controllers (the `rollout` example component under three
//! names) and one controller `r` of 9 shards (`r-0 … r-8`), each shard a
//! lease placed like any other.
//!
//! - one host alone takes every lease at once;
//! - a second and a third host join: within 2 s of the third becoming
//!   ready each holds 4 ± 1, by orderly handovers (`released` tenures);
//! - SIGKILL of one: its leases spread over the other two (6 ± 1 each);
//! - it returns: balance is restored (4 ± 1) by orderly handovers, and no
//!   lease changes hands over an observation window.
//!
//! After each join of the third host, every lease it holds shows its last
//! placement move (issue 19, point 4) as an `over_share` handover from
//! one of the others to it, alike in every replica's `/v1/leases` and in
//! `leasehold leases --json`.
//!
//! The issue asks for a 60 s window; that is `LEASEHOLD_PLACEMENT_WINDOW_SECS`
//! (default [`DEFAULT_WINDOW_SECS`], short enough for CI). Ordering comes
//! from the database's own record; every wait is bounded.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_host::testing::TestDatabase;
use leasehold_tests::TempDir;
use leasehold_tests::guest_dir;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use serde_json::Value;

const LEASES: usize = 12;
const HOSTS: [&str; 3] = ["host-a", "host-b", "host-c"];
/// The observation window without a move, in seconds, unless
/// `LEASEHOLD_PLACEMENT_WINDOW_SECS` says otherwise (the issue: 60).
const DEFAULT_WINDOW_SECS: u64 = 10;
/// What "within 2 s of the third host becoming ready" allows.
const BALANCED_WITHIN: Duration = Duration::from_secs(2);
/// Room for a debug build starting on two busy cores.
const START: Duration = Duration::from_secs(90);
/// Bound on the moves after a join or a kill (placement's own pace is
/// about a beat, 200 ms here, per move).
const SETTLE: Duration = Duration::from_secs(15);
/// `[placement] min_tenure` in these configs.
const MIN_TENURE_MS: u64 = 1000;

/// The unsharded controllers; the rest of the [`LEASES`] are shards of `r`.
const UNSHARDED: usize = 3;

fn config(cluster: &str, holder: &str, port: u16, url: &str) -> String {
    let guests = guest_dir();
    let cache = guest_dir().join("../../leasehold-test-cache");
    let mut text = format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n\n[database]\nurl = \"{url}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n\n\
         [placement]\nenabled = true\nmin_tenure = \"{MIN_TENURE_MS}ms\"\n",
        cache.display()
    );
    let controllers = (0..UNSHARDED)
        .map(|i| (format!("r{i:02}"), String::new()))
        .chain([(
            "r".to_string(),
            format!("shards = {}\n", LEASES - UNSHARDED),
        )]);
    for (name, extra) in controllers {
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"{name}\"\ncomponent = \"{}/rollout.wasm\"\n\
             lease_ttl = \"2s\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n{extra}",
            guests.display()
        ));
    }
    text
}

fn window() -> Duration {
    let secs = std::env::var("LEASEHOLD_PLACEMENT_WINDOW_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_WINDOW_SECS);
    Duration::from_secs(secs)
}

struct Cluster {
    db: TestDatabase,
    name: String,
    dir: TempDir,
    hosts: Vec<Option<Replica>>,
    ports: Vec<u16>,
}

impl Cluster {
    async fn sql(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(self.db.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(conn);
        client
    }

    fn start(&mut self, i: usize) {
        let port = self.ports[i];
        let text = config(&self.name, HOSTS[i], port, self.db.url());
        match &mut self.hosts[i] {
            Some(replica) => replica.restart(),
            slot => *slot = Some(Replica::start(self.dir.path(), HOSTS[i], port, &text)),
        }
    }

    fn host(&self, i: usize) -> &Replica {
        self.hosts[i].as_ref().expect("started")
    }

    /// Leases held now (not released, not expired), by holder, from the
    /// database's record.
    async fn held(&self) -> BTreeMap<String, usize> {
        let rows = self
            .sql()
            .await
            .query(
                "SELECT holder, count(*) FROM leasehold_leases
                  WHERE cluster = $1 AND NOT released AND expires_at > clock_timestamp()
                  GROUP BY holder",
                &[&self.name],
            )
            .await
            .expect("read the leases");
        rows.iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as usize))
            .collect()
    }

    /// Wait until the holders in `hosts` hold every lease, each `want ±
    /// spread`; returns the counts.
    async fn until_balanced(
        &self,
        hosts: &[usize],
        want: usize,
        spread: usize,
        limit: Duration,
    ) -> BTreeMap<String, usize> {
        let what = format!(
            "{:?} hold all {LEASES} leases, {want} ± {spread} each",
            hosts.iter().map(|i| HOSTS[*i]).collect::<Vec<_>>()
        );
        eventually(&what, limit, || async {
            let held = self.held().await;
            let total: usize = held.values().sum();
            let fair = hosts.iter().all(|i| {
                let n = held.get(HOSTS[*i]).copied().unwrap_or(0);
                n + spread >= want && n <= want + spread
            });
            let only_them = held.keys().all(|h| hosts.iter().any(|i| HOSTS[*i] == h));
            (total == LEASES && fair && only_them).then_some(held)
        })
        .await
    }

    /// Wait until every live tenure was granted at least `min_tenure` ago
    /// (database clock), so each may be handed over.
    async fn until_tenures_older_than_min(&self) {
        eventually("every live tenure passed min_tenure", SETTLE, || async {
            let young: i64 = self
                .sql()
                .await
                .query_one(
                    "SELECT count(*) FROM leasehold_leases
                      WHERE cluster = $1 AND NOT released
                        AND acquired_at > clock_timestamp() - make_interval(secs => $2::float8)",
                    &[&self.name, &(MIN_TENURE_MS as f64 / 1000.0)],
                )
                .await
                .expect("read the leases")
                .get(0);
            (young == 0).then_some(())
        })
        .await
    }

    /// Every tenure that ended after `since` (database clock, as text),
    /// with its end reason.
    async fn ended_since(&self, since: &str) -> Vec<(String, i64, String)> {
        self.sql()
            .await
            .query(
                "SELECT lease, epoch, coalesce(end_reason, '') FROM leasehold_tenures
                  WHERE cluster = $1 AND ended_at > $2::text::timestamptz
                  ORDER BY ended_at",
                &[&self.name, &since],
            )
            .await
            .expect("read the tenures")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    async fn now(&self) -> String {
        self.sql()
            .await
            .query_one("SELECT clock_timestamp()::text", &[])
            .await
            .expect("read the clock")
            .get(0)
    }

    /// Every grant so far: (lease, epoch, holder).
    async fn grants(&self) -> Vec<(String, i64, String)> {
        self.sql()
            .await
            .query(
                "SELECT lease, epoch, holder FROM leasehold_tenures WHERE cluster = $1
                  ORDER BY lease, epoch",
                &[&self.name],
            )
            .await
            .expect("read the tenures")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// Every lease `host` holds, as each live replica's `/v1/leases` and
    /// `leasehold leases --json` show it, must show its last move as an
    /// `over_share` handover from another host to `host`, made by that
    /// lease's current grant, and every view must show the same last move
    /// of every lease; returns how many leases `host` holds.
    async fn handed_over_to(&self, host: usize) -> usize {
        let to = HOSTS[host];
        let mut views: Vec<(String, Value)> = Vec::new();
        for (i, replica) in self.hosts.iter().enumerate() {
            if let Some(replica) = replica {
                let leases = replica.leases().await.expect("/v1/leases answers");
                views.push((format!("{}'s /v1/leases", HOSTS[i]), leases));
            }
        }
        let (code, out, err) = run_to_end(
            &[
                "leases",
                "--database-url",
                self.db.url(),
                "--cluster",
                &self.name,
                "--json",
            ],
            &[],
        );
        assert_eq!(code, 0, "leasehold leases: {err}");
        views.push((
            "leasehold leases --json".into(),
            serde_json::from_str(&out).expect("leasehold leases prints JSON"),
        ));
        let mut held = 0;
        for (what, leases) in &views {
            let mine: Vec<&Value> = leases
                .as_array()
                .expect("a list of leases")
                .iter()
                .filter(|l| l["holder"] == to && l["active"] == true)
                .collect();
            held = held.max(mine.len());
            for lease in mine {
                let moved = &lease["last_move"];
                let from = moved["from"].as_str().unwrap_or_default();
                assert!(
                    moved["reason"] == "over_share"
                        && moved["to"] == to
                        && from != to
                        && HOSTS.contains(&from),
                    "{what}: {} should show an over_share handover to {to}: {lease}",
                    lease["name"]
                );
                // One view prints both times alike.
                assert_eq!(
                    moved["at"], lease["acquired_at"],
                    "{what}: the move is the grant that made {to} the holder: {lease}"
                );
            }
        }
        // Every view shows the same record.
        let record = |leases: &Value| -> BTreeMap<String, Value> {
            leases
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l["name"].as_str().unwrap().to_string(),
                        l["last_move"].clone(),
                    )
                })
                .collect()
        };
        let first = record(&views[0].1);
        for (what, leases) in &views[1..] {
            let theirs = record(leases);
            for (name, moved) in &first {
                // The CLI prints times with as many digits as they need,
                // the API always with microseconds: compare the rest.
                let strip = |v: &Value| {
                    let mut v = v.clone();
                    if let Some(at) = v.get_mut("at") {
                        *at = Value::Null;
                    }
                    v
                };
                assert_eq!(
                    strip(moved),
                    strip(&theirs[name]),
                    "{what} and {} disagree on {name}",
                    views[0].0
                );
            }
        }
        held
    }

    async fn until_ready(&self, i: usize) -> Instant {
        let host = self.host(i);
        eventually(&format!("{} is ready", HOSTS[i]), START, || async {
            let (status, _) = host.readyz().await?;
            (status == 200).then(Instant::now)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_share_twelve_leases_fairly_through_joins_and_a_kill() {
    let db = TestDatabase::create().await;
    let mut cluster = Cluster {
        db,
        name: format!("place-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        dir: TempDir::new(),
        hosts: vec![None, None, None],
        ports: (0..3).map(|_| free_port()).collect(),
    };

    // Alone, a host takes every lease at once (placement never slows the
    // single-host start).
    cluster.start(0);
    cluster.until_ready(0).await;
    cluster.until_balanced(&[0], LEASES, 0, START).await;

    // A second host: the first hands over until both hold 6.
    cluster.start(1);
    cluster.until_ready(1).await;
    let two = cluster.until_balanced(&[0, 1], 6, 0, SETTLE).await;
    eprintln!("two hosts: {two:?}");
    cluster.until_tenures_older_than_min().await;

    // The third: within 2 s of it being ready, 4 ± 1 each, by orderly
    // handovers only.
    let joined = cluster.now().await;
    cluster.start(2);
    let ready = cluster.until_ready(2).await;
    let three = cluster
        .until_balanced(&[0, 1, 2], 4, 1, BALANCED_WITHIN)
        .await;
    eprintln!(
        "three hosts: {three:?}, {:?} after the third was ready",
        ready.elapsed()
    );
    let moved = cluster.ended_since(&joined).await;
    assert!(!moved.is_empty(), "nothing moved to the third host");
    assert!(
        moved.iter().all(|(_, _, reason)| reason == "released"),
        "a join moves leases by orderly release only: {moved:?}"
    );
    // Then exactly 4 each (slack 0), and the moves were counted.
    cluster.until_balanced(&[0, 1, 2], 4, 0, SETTLE).await;
    // And recorded: each lease the third host holds shows its handover.
    assert_eq!(cluster.handed_over_to(2).await, 4);
    // Each move counted once, by the host whose grant recorded it.
    let counted = cluster
        .host(2)
        .metric("leasehold_placement_moves_total{reason=\"over_share\"}")
        .await
        .expect("host-c exports leasehold_placement_moves_total");
    assert_eq!(
        counted, 4.0,
        "host-c's grants recorded 4 handovers to it, and count them"
    );

    // SIGKILL the third: its leases spread over the other two.
    cluster.until_tenures_older_than_min().await;
    cluster.hosts[2].as_mut().unwrap().kill().await;
    let killed = Instant::now();
    let survivors = cluster.until_balanced(&[0, 1], 6, 1, SETTLE).await;
    eprintln!("after the kill: {survivors:?} in {:?}", killed.elapsed());
    assert!(
        survivors.values().all(|n| *n > 4),
        "each survivor took some of the dead host's leases: {survivors:?}"
    );
    cluster.until_balanced(&[0, 1], 6, 0, SETTLE).await;

    // It returns: balance restored by orderly handovers.
    cluster.until_tenures_older_than_min().await;
    let returned = cluster.now().await;
    cluster.start(2);
    cluster.until_ready(2).await;
    let restored = cluster.until_balanced(&[0, 1, 2], 4, 0, SETTLE).await;
    eprintln!("after the return: {restored:?}");
    let moved = cluster.ended_since(&returned).await;
    assert!(
        moved.iter().all(|(_, _, reason)| reason == "released"),
        "the return moved leases by orderly release only: {moved:?}"
    );
    assert_eq!(cluster.handed_over_to(2).await, 4);

    // No lease flaps: over the window, no grant and no change of holder.
    let before = cluster.grants().await;
    let held_before = cluster.held().await;
    let window = window();
    tokio::time::sleep(window).await;
    let after = cluster.grants().await;
    assert_eq!(
        before.len(),
        after.len(),
        "leases changed hands within {window:?} of a balanced cluster: {:?}",
        after
            .iter()
            .filter(|g| !before.contains(g))
            .collect::<Vec<_>>()
    );
    assert_eq!(held_before, cluster.held().await);
}
