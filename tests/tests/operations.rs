//! Operating a real `leasehold` process: the Prometheus alert rules in
//! `deploy/prometheus/alerts.yml` name only metrics a host exposes, and a
//! service manager is told `READY=1` (once every controller settled),
//! `RELOADING=1`/`READY=1` around SIGHUP, `STOPPING=1` on SIGTERM and
//! `WATCHDOG=1` while the host's loops beat, over the `NOTIFY_SOCKET` the
//! test binds and reads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold_host::testing::TestDatabase;
use leasehold_tests::process::{Replica, binary, eventually, free_port};
use leasehold_tests::{TempDir, guest_dir, http};
use serde_json::Value;

/// Longest a start may take: compiling a component in a debug build on two
/// busy cores.
const START: Duration = Duration::from_secs(90);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository root")
        .to_path_buf()
}

fn cluster() -> String {
    format!("ops-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// A config running the example scheduler; `url` None: the embedded
/// backend.
fn config(cluster: &str, holder: &str, port: u16, url: Option<&str>) -> String {
    let cache = guest_dir().join("../../leasehold-test-cache");
    let database = url.map_or(String::new(), |url| {
        format!("\n[database]\nurl = \"{url}\"\n")
    });
    format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n{database}\n[http]\nlisten = \
         \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n\n[[controllers]]\nname = \
         \"scheduler\"\ncomponent = \"{}/scheduler.wasm\"\nlease_ttl = \"2s\"\n\
         renew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n",
        cache.display(),
        guest_dir().display()
    )
}

// --- alert rules ---------------------------------------------------------

/// PromQL words that are not metric names.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
    // Aggregations, which may come before their `by (...)`.
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The metric names an expression refers to: identifiers that are not
/// functions (followed by `(`), keywords, label lists (`by (...)` and
/// kin), label matchers (`{...}`), ranges (`[5m]`), strings or numbers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_label_list = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    if chars[i] == '"' {
                        i += 1;
                        while i < chars.len() && chars[i] != '"' {
                            i += 1;
                        }
                    }
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_label_list => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_label_list = false;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let lower = word.to_ascii_lowercase();
                if matches!(
                    lower.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                ) {
                    skip_label_list = true;
                } else if chars.get(next) == Some(&'(') || KEYWORDS.contains(&lower.as_str()) {
                    // A function or aggregation, or a keyword.
                } else {
                    names.insert(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number or a duration (`5m`): digits then letters.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

#[test]
fn the_promql_reader_finds_metric_names_and_nothing_else() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{x=\"y z\"}[5m]))) > 1 \
             and on (lease) b offset 5m or max_over_time(c[1h:5m]) / d > bool 0.5e3"
        ),
        ["a_bucket", "b", "c", "d"].map(String::from).into()
    );
}

/// Every family and series name in a `/metrics` text, histogram parts
/// included.
fn exposed_names(metrics: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            names.insert(name.to_string());
            if kind == "histogram" {
                for part in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{part}"));
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// Every rule of the alert file: (alert name, expression).
fn alert_rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let file: Value = serde_norway::from_str(&text).expect("alerts.yml parses");
    let mut rules = Vec::new();
    for group in file["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("every rule is an alert");
            let expr = rule["expr"].as_str().expect("expr");
            assert!(
                rule["annotations"]["summary"].is_string(),
                "{alert} has no summary"
            );
            assert!(rule["labels"]["severity"].is_string(), "{alert}");
            rules.push((alert.to_string(), expr.to_string()));
        }
    }
    rules
}

#[tokio::test]
async fn alert_rules_name_only_metrics_a_host_exposes() {
    let rules = alert_rules();
    for wanted in [
        "LeaseholdNoLeader",
        "LeaseholdLeaseFlapping",
        "LeaseholdRenewalsNearDeadline",
        "LeaseholdFencedRefusals",
        "LeaseholdDatabasePoolStarved",
    ] {
        assert!(rules.iter().any(|(a, _)| a == wanted), "no {wanted} rule");
    }
    // A host on PostgreSQL exposes every family (the pools exist only
    // there), each from the start.
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let port = free_port();
    let host = Replica::start(
        dir.path(),
        "a",
        port,
        &config(&cluster(), "ops-a", port, Some(db.url())),
    );
    host.wait_healthy(START).await;
    eventually("the host leads the scheduler", START, || async {
        host.leads("scheduler").await.filter(|l| *l)
    })
    .await;
    // The lease records are read at most once a second: wait for one read
    // after the grant. Scrapes before show in the request counts.
    eventually(
        "/metrics shows the scheduler's lease led",
        START,
        || async {
            host.metric("leasehold_lease_leaderless_seconds{lease=\"scheduler\"}")
                .await
                .filter(|seconds| *seconds == 0.0)
        },
    )
    .await;
    // Requests are counted by route template, never by raw path.
    let absent = http::get(&host.addr, "/v1/objects/nodes/no-such-node")
        .await
        .unwrap();
    assert_eq!(absent.status, 404);
    assert_eq!(
        http::get(&host.addr, "/no/such/route")
            .await
            .unwrap()
            .status,
        404
    );
    let metrics = host.metrics().await.expect("a scrape");
    for line in [
        "leasehold_http_requests_total{route=\"/v1/objects/{kind}/{name}\",method=\"GET\",status=\"404\"} 1",
        "leasehold_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
        "leasehold_http_request_duration_seconds_count{route=\"/v1/objects/{kind}/{name}\",method=\"GET\"} 1",
        // Declared before any request: every served route's histogram.
        "leasehold_http_request_duration_seconds_count{route=\"/v1/events\",method=\"GET\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    assert!(!metrics.contains("no-such-node"), "{metrics}");
    assert!(!metrics.contains("/no/such/route"), "{metrics}");
    let exposed = exposed_names(&metrics);
    let mut missing = Vec::new();
    for (alert, expr) in &rules {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{alert}: no metric in {expr}");
        for name in names {
            if !exposed.contains(&name) {
                missing.push(format!("{alert}: {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "alert rules name metrics /metrics does not expose: {missing:?}\n{metrics}"
    );
    // The host families carry what the rules select on.
    for line in [
        "leasehold_db_pool_timeouts_total{pool=\"main\",kind=\"wait\"} 0",
        "leasehold_db_pool_timeouts_total{pool=\"authority\",kind=\"wait\"} 0",
        "leasehold_lease_leaderless_seconds{lease=\"scheduler\"} 0",
        "leasehold_lease_epoch{lease=\"scheduler\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    assert!(
        metrics.contains(
            "leasehold_http_requests_total{route=\"/metrics\",method=\"GET\",status=\"200\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("leasehold_build_info{version=\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("wit_versions=\"0.1.0,0.2.0,0.3.0,0.4.0\""),
        "{metrics}"
    );
    for process in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_threads",
        "process_start_time_seconds",
    ] {
        assert!(exposed.contains(process), "{process}");
    }
}

// --- service-manager notifications ---------------------------------------

/// A `leasehold run` started with `NOTIFY_SOCKET` (and `WATCHDOG_USEC`),
/// killed when dropped.
struct Notified {
    child: Option<Child>,
    log: PathBuf,
    socket: tokio::net::UnixDatagram,
    watchdogs: usize,
    addr: String,
}

impl Notified {
    fn start(dir: &Path, name: &str, port: u16, config: &str, watchdog_usec: u64) -> Self {
        let socket_path = dir.join(format!("{name}-notify.sock"));
        let socket = tokio::net::UnixDatagram::bind(&socket_path).expect("bind NOTIFY_SOCKET");
        let config_path = dir.join(format!("{name}.toml"));
        std::fs::write(&config_path, config).unwrap();
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary())
            .args(["run", "--config"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .env("NOTIFY_SOCKET", &socket_path)
            .env("WATCHDOG_USEC", watchdog_usec.to_string())
            .spawn()
            .expect("spawn leasehold");
        Self {
            child: Some(child),
            log,
            socket,
            watchdogs: 0,
            addr: format!("127.0.0.1:{port}"),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The next message that is not `WATCHDOG=1` (those are counted).
    async fn next(&mut self, limit: Duration) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        let mut buf = [0u8; 1024];
        loop {
            let received = tokio::time::timeout_at(deadline, self.socket.recv(&mut buf)).await;
            let Ok(Ok(n)) = received else {
                panic!("no notification within {limit:?}; log:\n{}", self.log());
            };
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            if message == "WATCHDOG=1" {
                self.watchdogs += 1;
            } else {
                return message;
            }
        }
    }

    /// Messages already received, without waiting (watchdogs counted).
    fn pending(&mut self) -> Vec<String> {
        let mut buf = [0u8; 1024];
        let mut messages = Vec::new();
        while let Ok(n) = self.socket.try_recv(&mut buf) {
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            if message == "WATCHDOG=1" {
                self.watchdogs += 1;
            } else {
                messages.push(message);
            }
        }
        messages
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    async fn exit_code(&mut self, limit: Duration) -> i32 {
        let mut child = self.child.take().expect("running");
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "did not exit within {limit:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test]
async fn a_service_manager_hears_ready_reloading_stopping_and_watchdog() {
    let dir = TempDir::new();
    let port = free_port();
    let mut host = Notified::start(
        dir.path(),
        "notified",
        port,
        &config(&cluster(), "ops-notified", port, None),
        1_000_000,
    );
    let ready = host.next(START).await;
    assert!(ready.starts_with("READY=1\nSTATUS="), "{ready:?}");
    assert!(ready.contains("1 controllers leading"), "{ready:?}");
    // Ready means settled: the scheduler leads by then.
    let metrics = http::get(&host.addr, "/metrics").await.unwrap().body;
    assert!(
        metrics
            .lines()
            .any(|l| l == "leasehold_leader{controller=\"scheduler\"} 1"),
        "{metrics}"
    );
    // Pings every half WATCHDOG_USEC while the loops beat.
    let watching = tokio::time::Instant::now();
    while host.watchdogs < 3 {
        assert!(host.pending().is_empty(), "only pings while running");
        assert!(
            watching.elapsed() < Duration::from_secs(20),
            "only {} watchdog pings; log:\n{}",
            host.watchdogs,
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    host.signal("HUP");
    let reloading = host.next(Duration::from_secs(30)).await;
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    let ready = host.next(Duration::from_secs(30)).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");

    host.signal("TERM");
    let stopping = host.next(Duration::from_secs(30)).await;
    assert!(stopping.starts_with("STOPPING=1"), "{stopping:?}");
    assert_eq!(host.exit_code(Duration::from_secs(30)).await, 0);
    assert!(
        host.pending().iter().all(|m| m.starts_with("WATCHDOG")),
        "nothing after STOPPING but pings"
    );
}

/// `READY=1` waits for the controllers: a host whose holder name another
/// live host holds leads nothing (its controllers fail), so it is not
/// ready until that host is gone.
#[tokio::test]
async fn ready_waits_until_every_controller_leads_or_stands_by() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let port_a = free_port();
    let mut first = Replica::start(
        dir.path(),
        "first",
        port_a,
        &config(&cluster, "same-name", port_a, Some(db.url())),
    );
    first.wait_healthy(START).await;
    eventually("the first host leads", START, || async {
        first.leads("scheduler").await.filter(|l| *l)
    })
    .await;

    let port_b = free_port();
    let mut second = Notified::start(
        dir.path(),
        "second",
        port_b,
        &config(&cluster, "same-name", port_b, Some(db.url())),
        2_000_000,
    );
    let addr = second.addr.clone();
    eventually("the second host sees its name taken", START, || {
        let addr = addr.clone();
        async move {
            let r = http::get(&addr, "/readyz").await.ok()?;
            let body: Value = serde_json::from_str(&r.body).ok()?;
            (body["checks"]["holder"]["state"] == "taken"
                && body["controllers"]["scheduler"]["state"] == "failing")
                .then_some(())
        }
    })
    .await;
    assert_eq!(
        second.pending(),
        Vec::<String>::new(),
        "READY=1 before any controller settled"
    );

    first.signal("TERM");
    assert_eq!(first.exited(Duration::from_secs(30)).await, Some(0));
    let ready = second.next(START).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("1 controllers leading"), "{ready:?}");
}
