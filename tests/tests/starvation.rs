//! An API flood cannot cost a healthy host its leases (issue 16, item 6).
//!
//! A real `leasehold` process leads one controller on PostgreSQL with the
//! service suite's short lease timing (ttl 2 s, renewals every 200 ms,
//! deadline 1.4 s) and a main pool of one connection, while hundreds of
//! clients that never back off list a large kind, long-poll the event log
//! and read the leases, for several renew deadlines. Renewals run on the
//! lease authority's own connections, so the lease must stay held at the
//! same epoch, with one tenure in its history and no loss counted; and the
//! API, at its request budget, must have answered some requests 503
//! `overloaded` with `Retry-After` while `/healthz` and `/metrics` kept
//! answering.
//!
//! Fails when renewals share the main pool (each renewal queues behind the
//! listings and is given up after one interval: the lease is lost at the
//! deadline) and when the API has no request budget (nothing is refused).
//!
//! Needs the guests (`cargo xtask guests`), the `leasehold` binary and
//! PostgreSQL, like the service suite.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_host::testing::TestDatabase;
use leasehold_tests::process::{Replica, eventually, free_port};
use leasehold_tests::{TempDir, guest_dir, http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a replica may take to start and lead.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long the flood lasts: more than four renew deadlines (1.4 s).
const FLOOD: Duration = Duration::from_secs(6);
/// Clients flooding at once, each sending its next request as soon as the
/// last one ended (never honouring `Retry-After`).
const CLIENTS: usize = 300;
/// Objects in the listed kind, and the size of each value: one listing is
/// a few hundred kilobytes that the main pool's one connection carries.
const OBJECTS: usize = 200;
const VALUE_BYTES: usize = 2048;
/// Writers seeding those objects at once.
const SEEDERS: usize = 8;
/// Longest one flood request may take before the client gives up on it
/// (a long poll is cut here too, and asks again).
const REQUEST_LIMIT: Duration = Duration::from_secs(3);
/// The lease timing of the config below, in milliseconds: whatever the
/// flood does, the lease row must keep more than `ttl - renew_deadline`
/// before its expiry.
const LEAST_LEFT_MS: f64 = 2000.0 - 1400.0;
/// How often the watcher samples the lease row.
const SAMPLE: Duration = Duration::from_millis(50);

fn config(cluster: &str, port: u16, url: &str) -> String {
    let guests = guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    format!(
        "cluster = \"{cluster}\"\nholder = \"replica-a\"\n\n[database]\nurl = \"{url}\"\n\
         max_connections = 1\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\n\
         cache_dir = \"{cache}\"\n\n[[controllers]]\nname = \"steady\"\n\
         component = \"{guests}/misbehaving.wasm\"\nlease_ttl = \"2000ms\"\n\
         renew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\nbackoff_max = \"1s\"\n",
        cache = cache.display(),
        guests = guests.display(),
    )
}

/// A response's status, `Retry-After` and `code` (of a JSON error).
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    code: Option<String>,
}

/// The `seq` of the event log's last event (0 when it has none), read
/// page by page: a cursor there waits for the next event.
async fn events_head(addr: &str) -> u64 {
    let mut after = 0;
    loop {
        let before = after;
        let page = http::get(addr, &format!("/v1/events?after={after}&limit=500"))
            .await
            .expect("GET /v1/events");
        assert_eq!(page.status, 200, "/v1/events: {}", page.body);
        let page: serde_json::Value = serde_json::from_str(&page.body).expect("a JSON page");
        if let Some(seq) = page["items"]
            .as_array()
            .and_then(|items| items.last())
            .and_then(|last| last["seq"].as_u64())
        {
            after = seq;
        }
        match page["next"].as_u64() {
            Some(next) if next > after => after = next,
            Some(_) if after > before => {}
            _ => return after,
        }
    }
}

/// One GET on its own connection, read whole, within [`REQUEST_LIMIT`];
/// `None` when it did not answer in time or the connection failed.
async fn get(addr: &str, path: &str) -> Option<Answer> {
    tokio::time::timeout(REQUEST_LIMIT, async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let mut lines = head.lines();
        let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let retry_after = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("retry-after"))
            .map(|(_, value)| value.trim().to_string());
        let code = (status >= 400)
            .then(|| serde_json::from_str::<serde_json::Value>(body).ok())
            .flatten()
            .and_then(|json| json["code"].as_str().map(str::to_string));
        Some(Answer {
            status,
            retry_after,
            code,
        })
    })
    .await
    .ok()
    .flatten()
}

/// What the flood's clients saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    overloaded: AtomicU64,
    /// 503 `overloaded` without `Retry-After: 1`.
    overloaded_without_retry_after: AtomicU64,
    other: AtomicU64,
    no_answer: AtomicU64,
}

impl Tally {
    fn count(&self, answer: Option<Answer>) {
        let counter = match answer {
            Some(a) if a.status == 200 => &self.ok,
            Some(a) if a.status == 503 && a.code.as_deref() == Some("overloaded") => {
                if a.retry_after.as_deref() != Some("1") {
                    self.overloaded_without_retry_after
                        .fetch_add(1, Ordering::Relaxed);
                }
                &self.overloaded
            }
            Some(_) => &self.other,
            None => &self.no_answer,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn summary(&self) -> String {
        format!(
            "ok {}, overloaded {} ({} without Retry-After: 1), other {}, no answer {}",
            self.ok.load(Ordering::Relaxed),
            self.overloaded.load(Ordering::Relaxed),
            self.overloaded_without_retry_after.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
            self.no_answer.load(Ordering::Relaxed),
        )
    }
}

/// The lease row as the database sees it, sampled from outside the host:
/// how close it came to expiring, and whether anyone else got it.
#[derive(Debug, Default)]
struct LeaseWatch {
    samples: u64,
    /// Least time left before expiry seen (ms; negative: it expired).
    least_left_ms: Option<f64>,
    /// Every (holder, epoch) seen.
    tenures: Vec<(String, i64)>,
}

async fn watch_lease(
    url: String,
    cluster: String,
    stop: Arc<AtomicBool>,
) -> Result<LeaseWatch, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    let mut watch = LeaseWatch::default();
    while !stop.load(Ordering::SeqCst) {
        let row = client
            .query_one(
                "SELECT holder, epoch,
                        extract(epoch FROM expires_at - clock_timestamp())::float8 * 1000
                   FROM leasehold_leases WHERE cluster = $1 AND name = 'steady'",
                &[&cluster],
            )
            .await?;
        let tenure = (row.get::<_, String>(0), row.get::<_, i64>(1));
        if !watch.tenures.contains(&tenure) {
            watch.tenures.push(tenure);
        }
        let left: f64 = row.get(2);
        watch.least_left_ms = Some(watch.least_left_ms.map_or(left, |l: f64| l.min(left)));
        watch.samples += 1;
        tokio::time::sleep(SAMPLE).await;
    }
    drop(client);
    let _ = conn.await;
    Ok(watch)
}

/// How many renewals the replica timed, and the histogram bucket under
/// which 50 % and 99 % of them fell (`leasehold_renew_duration_seconds`).
fn renewals(metrics: &str) -> String {
    let prefix = "leasehold_renew_duration_seconds_bucket{controller=\"steady\",le=\"";
    let buckets: Vec<(String, f64)> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix(prefix)?.split_once("\"} "))
        .filter_map(|(le, count)| Some((le.to_string(), count.parse().ok()?)))
        .collect();
    let Some((_, total)) = buckets.last().cloned() else {
        return "none timed".to_string();
    };
    let under = |share: f64| {
        buckets
            .iter()
            .find(|(_, count)| *count >= share * total)
            .map_or("?".to_string(), |(le, _)| le.clone())
    };
    format!(
        "{total} timed, p50 <= {} s, p99 <= {} s",
        under(0.5),
        under(0.99)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_flood_costs_no_lease() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = format!(
        "starve-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let port = free_port();
    let replica = Replica::start(dir.path(), "a", port, &config(&cluster, port, db.url()));
    replica.wait_healthy(PATIENCE).await;
    eventually("the replica leads steady", PATIENCE, || async {
        replica.leads("steady").await.and_then(|l| l.then_some(()))
    })
    .await;

    // A kind worth listing: each listing holds the main pool's connection
    // while a few hundred kilobytes cross it.
    let value = serde_json::to_string(&"x".repeat(VALUE_BYTES)).expect("a JSON string");
    // A few writers at a time, well within the API's request budget.
    let seeding: Vec<_> = (0..SEEDERS)
        .map(|first| {
            let (addr, value) = (replica.addr.clone(), value.clone());
            tokio::spawn(async move {
                for i in (first..OBJECTS).step_by(SEEDERS) {
                    let path = format!("/v1/objects/bulk/o-{i:04}");
                    let put = http::put(&addr, &path, &value).await.expect("put");
                    assert_eq!(put.status, 201, "{path}: {}", put.body);
                }
            })
        })
        .collect();
    for put in seeding {
        put.await.expect("seeding");
    }
    let leases = replica.leases().await.expect("/v1/leases");
    let lease = leases
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["name"] == "steady")
        .cloned()
        .expect("the lease is listed");
    assert_eq!(lease["held_here"], true, "{lease}");
    let epoch = lease["epoch"].as_u64().expect("an epoch");

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_lease(
        db.url().to_string(),
        cluster.clone(),
        stop.clone(),
    ));
    // The long polls wait at the event log's head: a cursor beyond it is
    // one the store never issued, answered at once with 410.
    let events_poll = format!(
        "/v1/events?after={}&wait=30s",
        events_head(&replica.addr).await
    );
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, tally) = (replica.addr.clone(), tally.clone());
            // Mostly listings; long polls that wait past the flood; lease
            // reads (which share the main pool with the store).
            let path = match i % 6 {
                0 => events_poll.clone(),
                1 => "/v1/leases".to_string(),
                2 => "/v1/leases/steady/history".to_string(),
                _ => "/v1/objects/bulk?limit=500".to_string(),
            };
            tokio::spawn(async move {
                while started.elapsed() < FLOOD {
                    tally.count(get(&addr, &path).await);
                }
            })
        })
        .collect();

    // Health and metrics answer in the middle of it.
    tokio::time::sleep(FLOOD / 2).await;
    let probe = Instant::now();
    let healthz = get(&replica.addr, "/healthz").await;
    assert_eq!(
        healthz.as_ref().map(|a| a.status),
        Some(200),
        "/healthz during the flood: {healthz:?}"
    );
    let healthz_ms = probe.elapsed().as_millis();
    assert!(
        replica.metrics().await.is_some(),
        "/metrics did not answer during the flood"
    );

    for client in clients {
        // A long poll still held at the end is cut at its request limit.
        client.await.expect("flood client");
    }
    stop.store(true, Ordering::SeqCst);
    let watch = watcher
        .await
        .expect("lease watcher")
        .expect("read the lease row");
    let metrics = replica.metrics().await.expect("/metrics");
    let summary = format!(
        "flood of {CLIENTS} clients for {FLOOD:?}: {}; /healthz answered in {healthz_ms} ms; \
         lease row sampled {} times, least time left before expiry {:?} ms, tenures {:?}; \
         renewals: {}",
        tally.summary(),
        watch.samples,
        watch.least_left_ms,
        watch.tenures,
        renewals(&metrics),
    );
    eprintln!("{summary}");

    // The lease never changed hands and never came near expiring.
    assert_eq!(
        watch.tenures,
        vec![(
            "replica-a".to_string(),
            i64::try_from(epoch).expect("epoch")
        )],
        "{summary}"
    );
    // Renewed so steadily that the lease was never closer to expiring than
    // the holder's own deadline leaves (ttl - renew_deadline): no renewal
    // gap came near the deadline, let alone the ttl.
    assert!(
        watch.least_left_ms.is_some_and(|left| left > LEAST_LEFT_MS),
        "renewals fell behind during the flood: {summary}"
    );
    let losses = metrics.lines().fold(0.0, |sum, line| {
        sum + line
            .strip_prefix("leasehold_losses_total{controller=\"steady\"")
            .and_then(|rest| rest.rsplit_once(' '))
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    });
    assert_eq!(losses, 0.0, "the replica counted a lost lease: {summary}");
    assert_eq!(replica.leads("steady").await, Some(true), "{summary}");
    let history = http::get(&replica.addr, "/v1/leases/steady/history")
        .await
        .expect("history")
        .json();
    let tenures = history["items"].as_array().expect("a page of tenures");
    assert_eq!(tenures.len(), 1, "one tenure only: {history}");
    assert_eq!(tenures[0]["epoch"].as_u64(), Some(epoch), "{history}");
    assert!(tenures[0]["ended_at"].is_null(), "{history}");

    // The API refused what it could not serve, saying when to come back.
    assert!(
        tally.overloaded.load(Ordering::Relaxed) > 0,
        "no request was refused overloaded: {summary}"
    );
    assert_eq!(
        tally.overloaded_without_retry_after.load(Ordering::Relaxed),
        0,
        "{summary}"
    );
    assert!(tally.ok.load(Ordering::Relaxed) > 0, "{summary}");
    let refused = replica
        .metric("leasehold_http_overloaded_total{budget=\"requests\"}")
        .await
        .expect("the overload counter");
    assert!(refused > 0.0, "leasehold_http_overloaded_total: {refused}");
}
