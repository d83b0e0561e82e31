//! The web console (issue 41) in a real browser: headless Chromium
//! (`leasehold_tests::browser`, Debian's package, installed on first use)
//! against real `leasehold` processes.
//!
//! - `a_handover_on_postgres_as_the_console_shows_it`: two hosts on
//!   PostgreSQL; `host-a` leads `scheduler` and `rollout` and writes,
//!   `host-b` stands by, SIGTERM hands both over. On `host-b`, `/ui/`
//!   lists both leases with holder `host-b` at epoch 2 (as its API says),
//!   `/ui/leases/scheduler` draws both tenures in their holders' lanes
//!   (epoch 1 `host-a` released, epoch 2 `host-b` held) with the handover
//!   gap and lists them, the keyboard walks the bars, zoom changes the
//!   window; `/ui/objects/tasks` lists the tasks with the selector and
//!   owner links; `/ui/changes` shows a change made after it loaded within
//!   2 s. No page logs an error or a warning. Screenshots of the four
//!   pages go to the test's output folder ([`screenshot_dir`]).
//! - `a_handover_on_the_embedded_backend_as_the_console_shows_it`: the
//!   same with the hosts on the embedded backend (no `[database] url`, one
//!   `data_dir`), without screenshots.
//! - `a_placement_move_and_an_expiry_as_the_timeline_draws_them`: on
//!   PostgreSQL with placement on, the lease placement hands to a second
//!   host is drawn as a placement move (and the overview names it); once
//!   that host is stopped (SIGSTOP) and its tenure expires, the timeline
//!   draws the expiry taken over and the gap, and the first tenure stays
//!   a move only while that move is the lease's last (as the API says).
//! - `the_pages_on_an_in_memory_host`: the pages on one host on the
//!   in-memory backend (`url = "memory:"`), and a lease never granted.
//! - `over_https_the_console_asks_for_a_token_and_keeps_it_in_the_tab`:
//!   a host serving HTTPS with tokens. Without a token every page shows
//!   the prompt and no data; a refused token is forgotten; a read token
//!   shows every page, stays in that tab's sessionStorage only and is
//!   never shown; a new tab asks again; "Forget token" forgets it. The
//!   browser trusts exactly the host's key (an SPKI pin); without the pin
//!   it refuses the host.
//!
//! The backend is a config section ([`Kind`], [`Backend`]): the embedded
//! tests run whatever a host without `[database] url` runs (the HTTPS
//! test too), so they follow the default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold_host::testing::TestDatabase;
use leasehold_tests::browser::{Browser, LogEntry, Page, spki_pin};
use leasehold_tests::http::{self, ClientTls, request_tls};
use leasehold_tests::pki::{Pki, owner_only};
use leasehold_tests::process::{Replica, eventually, free_port};
use leasehold_tests::{TempDir, guest_dir};
use serde_json::{Value, json};

/// Room for a debug build starting on two busy cores (compiling the
/// components when the cache is cold).
const START: Duration = Duration::from_secs(90);
/// Longest a page may take to show its data (a hang detector).
const RENDER: Duration = Duration::from_secs(20);
/// The issue's bound: a change made after the changes page loaded shows
/// within this.
const LIVE_WITHIN: Duration = Duration::from_secs(2);

/// One browser at a time: the machine has two cores, and the live-change
/// bound is measured.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where a test's hosts keep their state, as their config says it.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A fresh PostgreSQL database.
    Postgres,
    /// No `[database] url`: the host's default, the embedded backend, in
    /// a `data_dir` every host of the test names.
    Embedded,
    /// `[database] url = "memory:"`: one process, nothing durable.
    Memory,
}

/// A [`Kind`] made for one test (its database dropped with it).
enum Backend {
    Postgres(TestDatabase),
    Embedded(PathBuf),
    Memory,
}

impl Backend {
    async fn new(kind: Kind, dir: &Path) -> Self {
        match kind {
            Kind::Postgres => Backend::Postgres(TestDatabase::create().await),
            Kind::Embedded => Backend::Embedded(dir.join("data")),
            Kind::Memory => Backend::Memory,
        }
    }

    /// The config's lines for it (top-level keys or a `[database]` table;
    /// they come before `[http]`).
    fn section(&self) -> String {
        match self {
            Backend::Postgres(db) => format!("[database]\nurl = \"{}\"\n", db.url()),
            Backend::Embedded(dir) => format!("data_dir = \"{}\"\n", dir.display()),
            Backend::Memory => "[database]\nurl = \"memory:\"\n".to_string(),
        }
    }
}

/// A config running the example `scheduler` and `rollout` with short
/// lease timings; `http` adds to the `[http]` table (TLS, tokens).
/// Placement is off, so only the test's SIGTERM moves a lease.
fn config(cluster: &str, holder: &str, port: u16, backend: &Backend, http: &str) -> String {
    let guests = guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    let mut text = format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n\n{}\n[http]\nlisten = \"127.0.0.1:{port}\"\n\
         {http}\n[runtime]\ncache_dir = \"{}\"\n\n[placement]\nenabled = false\n",
        backend.section(),
        cache.display()
    );
    for name in ["scheduler", "rollout"] {
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"{name}\"\ncomponent = \"{}/{name}.wasm\"\n\
             lease_ttl = \"2s\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n",
            guests.display()
        ));
    }
    text
}

fn cluster() -> String {
    format!("ui-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// The test's output folder for screenshots: `LEASEHOLD_CONSOLE_SCREENSHOTS`,
/// else `console-screenshots` in the target folder the test was built in.
fn screenshot_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LEASEHOLD_CONSOLE_SCREENSHOTS") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test executable");
    // target/<profile>/deps/<test> -> target/console-screenshots
    exe.ancestors()
        .nth(3)
        .expect("the target folder")
        .join("console-screenshots")
}

/// What an API answer's JSON is, or a panic naming the request.
async fn api(host: &Replica, path: &str) -> Value {
    let reply = http::get(&host.addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(reply.status, 200, "GET {path}: {}", reply.body);
    reply.json()
}

async fn put(host: &Replica, path: &str, body: &str, content_type: Option<&str>) {
    let headers: Vec<(&str, &str)> = content_type
        .map(|t| vec![("Content-Type", t)])
        .unwrap_or_default();
    let reply = http::request(&host.addr, "PUT", path, &headers, Some(body))
        .await
        .unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    assert!(
        reply.status == 200 || reply.status == 201,
        "PUT {path}: {} {}",
        reply.status,
        reply.body
    );
}

/// An object with metadata (labels, owner), as the API takes it.
const OBJECT_JSON: &str = "application/vnd.leasehold.object+json";

/// Nodes and tasks for the scheduler, and two tasks with labels, one owned
/// by a node, for the selector and the owner links.
async fn seed(host: &Replica) {
    put(host, "/v1/objects/nodes/n1", r#"{"capacity": 2}"#, None).await;
    for task in ["t1", "t2", "t3"] {
        put(
            host,
            &format!("/v1/objects/tasks/{task}"),
            r#"{"status": "pending"}"#,
            None,
        )
        .await;
    }
    put(
        host,
        "/v1/objects/tasks/owned",
        r#"{"value": {"status": "done", "team": "a"}, "labels": {"team": "a"},
            "owner": {"kind": "nodes", "name": "n1"}}"#,
        Some(OBJECT_JSON),
    )
    .await;
    put(
        host,
        "/v1/objects/tasks/owned/status",
        r#"{"phase": "Done"}"#,
        None,
    )
    .await;
    put(
        host,
        "/v1/objects/tasks/other",
        r#"{"value": {"status": "done", "team": "b"}, "labels": {"team": "b"}}"#,
        Some(OBJECT_JSON),
    )
    .await;
}

/// Wait until the scheduler assigned `count` tasks, by the API.
async fn assigned(host: &Replica, count: usize) {
    eventually(
        &format!("the scheduler assigned {count} tasks"),
        START,
        || async {
            let tasks = http::get(&host.addr, "/v1/objects/tasks")
                .await
                .ok()?
                .json();
            let n = tasks["items"]
                .as_array()?
                .iter()
                .filter(|t| t["value"]["status"] == "assigned")
                .count();
            (n >= count).then_some(())
        },
    )
    .await;
}

/// Wait until `host` leads every lease in `leases`.
async fn leads(host: &Replica, leases: &[&str]) {
    eventually(
        &format!("{} leads {leases:?}", host.name),
        START,
        || async {
            let mut all = true;
            for lease in leases {
                all &= host.holds(lease).await;
            }
            all.then_some(())
        },
    )
    .await;
}

/// A browser tab on one host's console.
struct Console<'a> {
    page: Page<'a>,
    base: String,
}

impl Console<'_> {
    /// Open `path`, wait until the console shows it, and require `state`.
    async fn open(&self, path: &str, state: &str) {
        self.page.goto(&format!("{}{path}", self.base)).await;
        let shown = self.page.settled(RENDER).await;
        assert_eq!(
            shown,
            state,
            "{path}: {}",
            self.page.eval("document.body.innerText").await
        );
    }

    async fn screenshot(&self, name: &str) {
        let path = screenshot_dir().join(format!("{name}.png"));
        self.page.screenshot(&path).await;
        eprintln!("screenshot: {}", path.display());
    }

    /// Every bar of the timeline: epoch, holder, ending, and the text of
    /// the lane label level with it (its holder's lane).
    async fn bars(&self) -> Vec<Value> {
        let bars = self
            .page
            .eval(
                "[...document.querySelectorAll('#timeline g.tenure')].map((g) => {
                   const bar = g.querySelector('rect.bar');
                   const y = Number(bar.getAttribute('y'));
                   const lane = [...document.querySelectorAll('#timeline text.lane-label')]
                     .find((t) => Number(t.getAttribute('y')) === y + 12);
                   return { epoch: Number(g.dataset.epoch), holder: g.dataset.holder,
                            end: g.dataset.end, lane: lane ? lane.firstChild.textContent : null,
                            x: Number(bar.getAttribute('x')), label: g.querySelector('text').textContent,
                            title: g.querySelector('title').textContent,
                            fill: bar.getAttribute('fill'),
                            writes_marked: g.querySelectorAll('.mark-write').length,
                            tabindex: g.getAttribute('tabindex') };
                 })",
            )
            .await;
        bars.as_array().expect("bars").clone()
    }

    /// The epoch of the tenure whose record the detail panel shows.
    async fn detail_epoch(&self) -> Option<u64> {
        self.page
            .eval(
                "(() => { const r = document.getElementById('tenure-record'); \
                 return r ? Number(r.dataset.epoch) : null; })()",
            )
            .await
            .as_u64()
    }

    /// The epoch of the focused bar.
    async fn focused_epoch(&self) -> Option<u64> {
        self.page
            .eval(
                "(() => { const g = document.activeElement; \
                 return g && g.matches('#timeline g.tenure') ? Number(g.dataset.epoch) : null; })()",
            )
            .await
            .as_u64()
    }

    /// `(kind, name)` of every row of the changes table, newest first.
    async fn changes(&self) -> Vec<(String, String)> {
        let rows = self
            .page
            .eval(
                "[...document.querySelectorAll('#changes tbody tr')]\
                 .map((r) => [r.dataset.kind, r.dataset.name])",
            )
            .await;
        serde_json::from_value(rows).expect("rows")
    }
}

/// Every pair of endings differs in its pattern's shape, or in its
/// colour's lightness by at least 0.15 (of 1): told apart without colour.
async fn assert_greyscale_safe(console: &Console<'_>) {
    let clashes = console
        .page
        .eval(
            "(() => {
               const lightness = (hex) => {
                 const n = parseInt(hex.slice(1), 16);
                 const [r, g, b] = [n >> 16, (n >> 8) & 255, n & 255].map((v) => v / 255);
                 return 0.2126 * r + 0.7152 * g + 0.0722 * b;
               };
               const ends = ['released', 'move', 'lost', 'expired', 'superseded', 'held', 'lapsed', 'gap'];
               const looks = ends.map((end) => {
                 const pattern = document.getElementById('fill-' + end);
                 const [base, ...marks] = [...pattern.children];
                 return { end, light: lightness(base.getAttribute('fill')),
                          shape: (pattern.getAttribute('patternTransform') || '') + marks.map((m) =>
                            m.tagName + (m.getAttribute('d') || '') + (m.getAttribute('width') || '') +
                            (m.getAttribute('r') || '')).join() };
               });
               const clashes = [];
               for (const [i, a] of looks.entries()) for (const b of looks.slice(i + 1)) {
                 if (a.shape === b.shape && Math.abs(a.light - b.light) < 0.15) clashes.push([a.end, b.end]);
               }
               return clashes;
             })()",
        )
        .await;
    assert_eq!(clashes, json!([]), "endings told apart only by colour");
}

/// The names in the first column of a table's rows.
fn names(rows: &[BTreeMap<String, String>], column: &str) -> Vec<String> {
    rows.iter().map(|r| r[column].clone()).collect()
}

/// The overview lists every lease the API lists, with its holder and epoch.
async fn check_overview(console: &Console<'_>, host: &Replica) -> Vec<BTreeMap<String, String>> {
    console.open("/ui/", "ready").await;
    let rows = console.page.table("#leases").await;
    let leases = api(host, "/v1/leases").await["items"].clone();
    let leases = leases.as_array().expect("leases");
    assert_eq!(rows.len(), leases.len(), "{rows:#?}");
    for lease in leases {
        let name = lease["name"].as_str().unwrap();
        let row = rows
            .iter()
            .find(|r| r["Lease"] == name)
            .unwrap_or_else(|| panic!("no row for {name}: {rows:#?}"));
        let holder = lease["holder"].as_str().unwrap();
        assert!(row["Holder"].starts_with(holder), "{name}: {row:?}");
        assert_eq!(row["Epoch"], lease["epoch"].to_string(), "{name}: {row:?}");
        assert_eq!(row["State"], "held", "{name}: {row:?}");
        assert_eq!(
            row["Crash detection"].split_whitespace().next(),
            lease["crash_detection"].as_str(),
            "{row:?}"
        );
    }
    // Each lease links to its timeline.
    let href = console
        .page
        .eval("document.querySelector('#leases tbody tr[data-lease=\"scheduler\"] a').getAttribute('href')")
        .await;
    assert_eq!(href, "/ui/leases/scheduler");
    // This replica's four readiness checks.
    let checks = console.page.table("#checks").await;
    let mut named = names(&checks, "Check");
    named.sort();
    assert_eq!(named, ["controllers", "database", "holder", "writes"]);
    assert!(checks.iter().all(|c| c["Result"] == "pass"), "{checks:#?}");
    console.page.assert_clean("/ui/", |_| false);
    rows
}

/// The objects page: the API's list, the selector (by URL and by the form)
/// and owner links.
async fn check_objects(console: &Console<'_>, host: &Replica) {
    console.open("/ui/objects/tasks", "ready").await;
    let rows = console.page.table("#objects").await;
    let listed = api(host, "/v1/objects/tasks").await["items"].clone();
    let expected: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names(&rows, "Name"), expected);
    for name in ["t1", "t2", "t3", "owned", "other"] {
        assert!(expected.iter().any(|n| n == name), "{expected:?}");
    }
    let owned = rows.iter().find(|r| r["Name"] == "owned").unwrap();
    assert_eq!(owned["Owner"], "nodes/n1");
    assert_eq!(owned["Labels"], "team=a");
    assert_eq!(owned["Value"], r#"{"status":"done","team":"a"}"#);
    assert_eq!(owned["Status"], r#"{"phase":"Done"}"#);
    let assigned = rows.iter().find(|r| r["Name"] == "t1").unwrap();
    assert_eq!(assigned["Finalizers"], "scheduler/slot", "{assigned:?}");

    // The selector as the API takes it, in the page's URL.
    console
        .open("/ui/objects/tasks?label=team%3Da", "ready")
        .await;
    assert_eq!(
        names(&console.page.table("#objects").await, "Name"),
        ["owned"]
    );
    console
        .open(
            "/ui/objects/tasks?contains=%7B%22team%22%3A%22b%22%7D",
            "ready",
        )
        .await;
    assert_eq!(
        names(&console.page.table("#objects").await, "Name"),
        ["other"]
    );
    // And through the form, as a person would: type, press Enter.
    console
        .page
        .eval("document.getElementById('selector-contains').value = ''")
        .await;
    console
        .page
        .eval("document.getElementById('selector-labels').focus()")
        .await;
    console.page.type_text("team=b").await;
    console.page.press("Enter").await;
    console
        .page
        .wait_for(
            "the form's selector is in the URL",
            "location.search === '?label=team%3Db' && document.documentElement.dataset.state === 'ready'",
            RENDER,
        )
        .await;
    assert_eq!(
        names(&console.page.table("#objects").await, "Name"),
        ["other"]
    );

    // An owner link leads to the owner, marked and open.
    console.open("/ui/objects/tasks", "ready").await;
    console
        .page
        .eval("document.querySelector('#objects tr[data-name=\"owned\"] a.owner').click()")
        .await;
    console
        .page
        .wait_for(
            "the owner's page shows it",
            "location.pathname === '/ui/objects/nodes' && location.hash === '#n1' && \
             document.documentElement.dataset.state === 'ready' && \
             document.querySelector('#objects tr.target[data-name=\"n1\"] details[open]') !== null",
            RENDER,
        )
        .await;
    console.page.assert_clean("/ui/objects", |_| false);
}

/// The changes page, filtered to tasks: it starts near the head, and a
/// change made after it loaded appears within [`LIVE_WITHIN`]; another
/// kind's change does not appear. Returns the measured latency.
async fn check_changes(console: &Console<'_>, host: &Replica, name: &str) -> Duration {
    console.open("/ui/changes?kind=tasks", "ready").await;
    console
        .page
        .wait_for(
            "the changes page follows the stream",
            "document.documentElement.dataset.following === 'true'",
            RENDER,
        )
        .await;
    let before = console.changes().await;
    assert!(!before.is_empty(), "the page opens on the recent changes");
    assert!(before.iter().all(|(kind, _)| kind == "tasks"), "{before:?}");
    put(
        host,
        "/v1/objects/nodes/late-node",
        r#"{"capacity": 0}"#,
        None,
    )
    .await;
    let made = Instant::now();
    put(
        host,
        &format!("/v1/objects/tasks/{name}"),
        r#"{"status": "done"}"#,
        None,
    )
    .await;
    console
        .page
        .wait_for(
            &format!("the change of tasks/{name} shows"),
            &format!("document.querySelector('#changes tr[data-kind=\"tasks\"][data-name=\"{name}\"]') !== null"),
            LIVE_WITHIN,
        )
        .await;
    let latency = made.elapsed();
    eprintln!("a change showed {latency:?} after it was made");
    let after = console.changes().await;
    assert_eq!(
        after[0],
        ("tasks".to_string(), name.to_string()),
        "newest first: {after:?}"
    );
    assert!(
        after.iter().all(|(kind, _)| kind == "tasks"),
        "the kind filter let another kind through: {after:?}"
    );
    console.page.assert_clean("/ui/changes", beyond_the_head);
    latency
}

#[tokio::test]
async fn a_handover_on_postgres_as_the_console_shows_it() {
    handover(Kind::Postgres, true).await;
}

#[tokio::test]
async fn a_handover_on_the_embedded_backend_as_the_console_shows_it() {
    handover(Kind::Embedded, false).await;
}

/// Two hosts on `kind` hand `scheduler` and `rollout` over by SIGTERM; the
/// console on the second shows it. With `screenshots`, each page is
/// written to [`screenshot_dir`].
async fn handover(kind: Kind, screenshots: bool) {
    let _one = ONE_BROWSER.lock().await;
    let dir = TempDir::new();
    let backend = Backend::new(kind, dir.path()).await;
    let cluster = cluster();
    let (port_a, port_b) = (free_port(), free_port());
    let mut host_a = Replica::start(
        dir.path(),
        "host-a",
        port_a,
        &config(&cluster, "host-a", port_a, &backend, ""),
    );
    leads(&host_a, &["scheduler", "rollout"]).await;
    seed(&host_a).await;
    assigned(&host_a, 2).await;

    let host_b = Replica::start(
        dir.path(),
        "host-b",
        port_b,
        &config(&cluster, "host-b", port_b, &backend, ""),
    );
    eventually("host-b is ready, standing by", START, || async {
        let (status, body) = host_b.readyz().await?;
        let standing = ["scheduler", "rollout"]
            .iter()
            .all(|c| body["controllers"][c]["state"] == "standby");
        (status == 200 && standing).then_some(())
    })
    .await;

    // The handover: SIGTERM releases both leases, host-b takes them.
    host_a.signal("TERM");
    assert_eq!(
        host_a.exited(START).await,
        Some(0),
        "{}",
        host_a.log_tail(20)
    );
    leads(&host_b, &["scheduler", "rollout"]).await;
    // host-b's scheduler writes too: a second node frees a slot for t3.
    put(&host_b, "/v1/objects/nodes/n2", r#"{"capacity": 1}"#, None).await;
    assigned(&host_b, 3).await;

    let history = api(&host_b, "/v1/leases/scheduler/history").await["items"].clone();
    let tenures: Vec<(u64, String, Option<String>)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["epoch"].as_u64().unwrap(),
                t["holder"].as_str().unwrap().to_string(),
                t["end_reason"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        tenures,
        [
            (2, "host-b".to_string(), None),
            (1, "host-a".to_string(), Some("released".to_string()))
        ]
    );

    let browser = Browser::start(&[]);
    let console = Console {
        page: browser.new_page().await,
        base: format!("http://{}", host_b.addr),
    };

    // The overview: both leases, held by host-b at epoch 2.
    let rows = check_overview(&console, &host_b).await;
    for lease in ["scheduler", "rollout"] {
        let row = rows.iter().find(|r| r["Lease"] == lease).unwrap();
        assert!(row["Holder"].starts_with("host-b"), "{row:?}");
        assert_eq!(row["Epoch"], "2", "{row:?}");
        assert!(row["This replica"].starts_with("leading"), "{row:?}");
    }
    if screenshots {
        console.screenshot("overview").await;
    }

    // The timeline: both tenures, each in its holder's lane.
    console.open("/ui/leases/scheduler", "ready").await;
    let bars = console.bars().await;
    let drawn: Vec<(u64, &str, &str, &str)> = bars
        .iter()
        .map(|b| {
            (
                b["epoch"].as_u64().unwrap(),
                b["holder"].as_str().unwrap(),
                b["end"].as_str().unwrap(),
                b["lane"].as_str().unwrap_or("(no lane)"),
            )
        })
        .collect();
    assert_eq!(
        drawn,
        [
            (1, "host-a", "released", "host-a"),
            (2, "host-b", "held", "host-b")
        ],
        "{bars:#?}"
    );
    // Each bar is labelled with its epoch, filled by how it ended, and
    // host-a's last write is marked.
    for (bar, epoch) in bars.iter().zip([1, 2]) {
        let label = bar["label"].as_str().unwrap();
        assert!(
            label.starts_with(&format!("epoch {epoch}")) || label == format!("e{epoch}"),
            "{bars:#?}"
        );
    }
    assert_eq!(bars[0]["fill"], "url(#fill-released)");
    assert_eq!(bars[1]["fill"], "url(#fill-held)");
    assert_eq!(bars[0]["writes_marked"], 1, "{bars:#?}");
    assert_greyscale_safe(&console).await;
    // Hovering shows the whole record (the native tooltip).
    let title = bars[0]["title"].as_str().unwrap();
    for part in ["Epoch 1", "host-a", "released", "writes", "database "] {
        assert!(title.contains(part), "{title}");
    }
    // The table says the same, with the handover's gap.
    let table = console.page.table("#tenures").await;
    assert_eq!(names(&table, "Epoch"), ["2", "1"]);
    assert_eq!(names(&table, "Holder"), ["host-b", "host-a"]);
    assert_eq!(names(&table, "How it ended"), ["held now", "released"]);
    assert_ne!(table[0]["Leaderless before"], "—", "{table:#?}");
    assert_ne!(
        table[1]["Writes"], "0",
        "host-a's scheduler wrote: {table:#?}"
    );
    let gaps = console
        .page
        .eval("document.querySelectorAll('#timeline g.gap').length")
        .await;
    assert_eq!(gaps, 1, "the handover's gap is drawn");

    // The keyboard: one bar in the tab order, arrows move, the record
    // follows the focus.
    let tabbable: Vec<u64> = bars
        .iter()
        .filter(|b| b["tabindex"] == "0")
        .map(|b| b["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(tabbable, [2], "the newest bar alone is in the tab order");
    console
        .page
        .eval("document.querySelector('#timeline g.tenure[tabindex=\"0\"]').focus()")
        .await;
    assert_eq!(console.focused_epoch().await, Some(2));
    assert_eq!(console.detail_epoch().await, Some(2));
    console.page.press("ArrowLeft").await;
    assert_eq!(console.focused_epoch().await, Some(1));
    assert_eq!(console.detail_epoch().await, Some(1));
    console.page.press("ArrowDown").await;
    assert_eq!(
        console.focused_epoch().await,
        Some(2),
        "down to host-b's lane"
    );
    console.page.press("Home").await;
    assert_eq!(console.focused_epoch().await, Some(1));
    console.page.press("End").await;
    assert_eq!(console.focused_epoch().await, Some(2));
    // Hovering shows another tenure's record; leaving brings the kept one
    // back.
    let hover = |event: &str, epoch: u64| {
        format!(
            "document.querySelector('#timeline g.tenure[data-epoch=\"{epoch}\"]')\
             .dispatchEvent(new MouseEvent('{event}'))"
        )
    };
    console.page.eval(&hover("mouseenter", 1)).await;
    assert_eq!(console.detail_epoch().await, Some(1));
    console.page.eval(&hover("mouseleave", 1)).await;
    assert_eq!(console.detail_epoch().await, Some(2));
    let record = console
        .page
        .eval("document.getElementById('tenure-record').innerText")
        .await;
    let record = record.as_str().unwrap();
    for part in ["host-b", "held now", "Writes", "Database", "Preceded by"] {
        assert!(record.contains(part), "{record}");
    }
    // Zoom: the last minute puts the first grant further right than
    // "All" does (the test ran for less than a minute since it).
    let all_x = bars[0]["x"].as_f64().unwrap();
    console
        .page
        .eval("document.querySelector('button[data-zoom=\"minute\"]').click()")
        .await;
    let zoomed = console.bars().await;
    assert_eq!(zoomed.len(), 2, "{zoomed:#?}");
    assert!(
        zoomed[0]["x"].as_f64().unwrap() > all_x + 10.0,
        "{zoomed:#?} vs {all_x}"
    );
    assert_eq!(
        console
            .page
            .eval("document.querySelector('button[data-zoom=\"minute\"]').getAttribute('aria-pressed')")
            .await,
        "true"
    );
    console
        .page
        .eval("document.querySelector('button[data-zoom=\"all\"]').click()")
        .await;
    console
        .page
        .eval("document.querySelector('#timeline g.tenure[data-epoch=\"1\"]').dispatchEvent(new MouseEvent('click'))")
        .await;
    console.page.assert_clean("/ui/leases/scheduler", |_| false);
    if screenshots {
        console.screenshot("lease-scheduler").await;
    }

    check_objects(&console, &host_b).await;
    if screenshots {
        console.open("/ui/objects/tasks", "ready").await;
    }
    if screenshots {
        console.screenshot("objects-tasks").await;
    }

    let latency = check_changes(&console, &host_b, "late-task").await;
    assert!(latency < LIVE_WITHIN);
    if screenshots {
        console.screenshot("changes").await;
    }
}

#[tokio::test]
async fn the_pages_on_an_in_memory_host() {
    let _one = ONE_BROWSER.lock().await;
    let dir = TempDir::new();
    let backend = Backend::new(Kind::Memory, dir.path()).await;
    let port = free_port();
    let host = Replica::start(
        dir.path(),
        "solo",
        port,
        &config(&cluster(), "solo", port, &backend, ""),
    );
    leads(&host, &["scheduler", "rollout"]).await;
    seed(&host).await;
    assigned(&host, 2).await;

    let browser = Browser::start(&[]);
    let console = Console {
        page: browser.new_page().await,
        base: format!("http://{}", host.addr),
    };
    let rows = check_overview(&console, &host).await;
    assert_eq!(names(&rows, "Lease"), ["rollout", "scheduler"]);

    console.open("/ui/leases/scheduler", "ready").await;
    let bars = console.bars().await;
    assert_eq!(bars.len(), 1, "{bars:#?}");
    assert_eq!(bars[0]["holder"], "solo");
    assert_eq!(bars[0]["lane"], "solo");
    assert_eq!(bars[0]["end"], "held");
    console.page.assert_clean("/ui/leases/scheduler", |_| false);

    // A lease never granted is said so, not an error.
    console.open("/ui/leases/nobody", "ready").await;
    assert_eq!(
        console
            .page
            .eval("document.getElementById('never-granted') !== null")
            .await,
        true
    );
    console.page.assert_clean("/ui/leases/nobody", |_| false);

    check_objects(&console, &host).await;
    check_changes(&console, &host, "late-task").await;
}

/// The lease `host` holds alone, with its API record, once there is one.
async fn moved_to(host: &Replica) -> Option<Value> {
    let leases = host.leases().await?;
    let here: Vec<&Value> = leases
        .as_array()?
        .iter()
        .filter(|l| l["held_here"] == true)
        .collect();
    (here.len() == 1).then(|| here[0].clone())
}

/// `(epoch, holder, ending)` of each bar, oldest first.
fn drawn(bars: &[Value]) -> Vec<(u64, String, String)> {
    bars.iter()
        .map(|b| {
            (
                b["epoch"].as_u64().unwrap(),
                b["holder"].as_str().unwrap().to_string(),
                b["end"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_placement_move_and_an_expiry_as_the_timeline_draws_them() {
    let _one = ONE_BROWSER.lock().await;
    let dir = TempDir::new();
    let backend = Backend::new(Kind::Postgres, dir.path()).await;
    let cluster = cluster();
    // Placement on, moving after a second: the second host gets one lease.
    let placed = |holder: &str, port: u16| {
        config(&cluster, holder, port, &backend, "")
            .replace("enabled = false", "enabled = true\nmin_tenure = \"1s\"")
    };
    let (port_a, port_b) = (free_port(), free_port());
    let host_a = Replica::start(dir.path(), "host-a", port_a, &placed("host-a", port_a));
    leads(&host_a, &["scheduler", "rollout"]).await;
    let host_b = Replica::start(dir.path(), "host-b", port_b, &placed("host-b", port_b));
    let lease = eventually("placement hands host-b one lease", START, || async {
        let lease = moved_to(&host_b).await?;
        (lease["last_move"]["reason"] == "over_share").then_some(lease)
    })
    .await;
    let name = lease["name"].as_str().unwrap().to_string();

    let browser = Browser::start(&[]);
    let console = Console {
        page: browser.new_page().await,
        base: format!("http://{}", host_a.addr),
    };
    // The overview names the move; the timeline draws it.
    let rows = check_overview(&console, &host_a).await;
    let row = rows.iter().find(|r| r["Lease"] == name).unwrap();
    assert!(
        row["Last placement move"].starts_with("over share: host-a → host-b"),
        "{row:?}"
    );
    let path = format!("/ui/leases/{name}");
    console.open(&path, "ready").await;
    let bars = console.bars().await;
    assert_eq!(
        drawn(&bars),
        [
            (1, "host-a".into(), "move".into()),
            (2, "host-b".into(), "held".into())
        ],
        "{bars:#?}"
    );
    assert_eq!(bars[0]["fill"], "url(#fill-move)");
    console.page.assert_clean(&path, |_| false);

    // host-b stops answering (SIGSTOP: its session stays open), so its
    // tenure expires and host-a takes the lease over.
    host_b.signal("STOP");
    eventually(&format!("host-a takes {name} back"), START, || async {
        host_a.holds(&name).await.then_some(())
    })
    .await;
    console.open(&path, "ready").await;
    let bars = console.bars().await;
    // The first tenure stays a move while that move is the lease's last
    // (the takeover records one only when it took the lease beyond
    // host-a's share, which depends on whether host-b still counts as
    // live): as the API says.
    let last_move = api(&host_a, &format!("/v1/leases/{name}")).await["last_move"].clone();
    let first = if last_move["from"] == "host-a" && last_move["to"] == "host-b" {
        "move"
    } else {
        "released"
    };
    assert_eq!(
        drawn(&bars),
        [
            (1, "host-a".into(), first.into()),
            (2, "host-b".into(), "expired".into()),
            (3, "host-a".into(), "held".into())
        ],
        "last move {last_move}: {bars:#?}"
    );
    assert_eq!(bars[1]["fill"], "url(#fill-expired)");
    assert_eq!(bars[2]["lane"], "host-a", "host-a's lane again");
    let table = console.page.table("#tenures").await;
    let first = if first == "move" {
        "placement move"
    } else {
        first
    };
    assert_eq!(
        names(&table, "How it ended"),
        ["held now", "crash taken over · expired", first]
    );
    // Nobody led between the expiry and the takeover: a gap, drawn.
    assert_ne!(table[0]["Leaderless before"], "—", "{table:#?}");
    let gaps = console
        .page
        .eval("document.querySelectorAll('#timeline g.gap').length")
        .await;
    assert!(gaps.as_u64().unwrap() >= 1, "{gaps}");
    console.page.assert_clean(&path, |_| false);
    host_b.signal("CONT");
}

/// The `[http]` additions of a host serving HTTPS with a read and a write
/// token (files 0600).
fn tls_and_tokens(dir: &Path, cert: &leasehold_tests::pki::Issued) -> String {
    let token = |name: &str, secret: &str| {
        let path = dir.join(format!("{name}.token"));
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        owner_only(&path);
        path.display().to_string()
    };
    format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n\n\
         [[http.tokens]]\nname = \"viewer\"\nfile = \"{}\"\nrole = \"read\"\n\n\
         [[http.tokens]]\nname = \"admin\"\nfile = \"{}\"\nrole = \"write\"\n",
        cert.cert.display(),
        cert.key.display(),
        token("viewer", VIEWER),
        token("admin", ADMIN),
    )
}

const VIEWER: &str = "viewer-console-0123456789abcdef";
const ADMIN: &str = "admin-console-0123456789abcdef";

/// A 401 the page's request got before it had a token: Chromium logs
/// every failed request, and this one is how the page learns it needs one.
/// The changes page finds the stream's head with one read far beyond it,
/// which the API answers 410 (a cursor it never issued); the browser logs
/// that load as failed. Any other 410, or another position, is a problem.
fn beyond_the_head(entry: &LogEntry) -> bool {
    entry.source == "network"
        && entry.text.contains("status of 410")
        && entry
            .url
            .as_deref()
            .is_some_and(|u| u.contains("/v1/changes?after=9007199254740991&"))
}

fn unauthorized(entry: &LogEntry) -> bool {
    entry.source == "network"
        && entry.text.contains("401")
        && entry.url.as_deref().is_some_and(|u| u.contains("/v1/"))
}

#[tokio::test]
async fn over_https_the_console_asks_for_a_token_and_keeps_it_in_the_tab() {
    let _one = ONE_BROWSER.lock().await;
    let dir = TempDir::new();
    let ca = Pki::new(dir.path(), "console");
    let cert = ca.server("console", &["127.0.0.1"]);
    let port = free_port();
    let backend = Backend::new(Kind::Embedded, dir.path()).await;
    let host = Replica::start(
        dir.path(),
        "secure",
        port,
        &config(
            &cluster(),
            "secure",
            port,
            &backend,
            &tls_and_tokens(dir.path(), &cert),
        ),
    );
    let tls = ClientTls::trusting(&ca.ca());
    let call =
        |method: &'static str, path: String, token: &'static str, body: Option<&'static str>| {
            let (tls, addr) = (&tls, host.addr.clone());
            async move {
                let auth = format!("Bearer {token}");
                request_tls(
                    tls,
                    &addr,
                    method,
                    &path,
                    &[("Authorization", auth.as_str())],
                    body,
                )
                .await
                .map(|(reply, _)| reply)
            }
        };
    eventually("the host leads both over HTTPS", START, || async {
        let leases = call("GET", "/v1/leases".into(), VIEWER, None).await.ok()?;
        let held = leases.json()["items"]
            .as_array()?
            .iter()
            .filter(|l| l["held_here"] == true)
            .count();
        (held == 2).then_some(())
    })
    .await;
    let reply = call(
        "PUT",
        "/v1/objects/tasks/t1".into(),
        ADMIN,
        Some(r#"{"status": "done"}"#),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 201, "{}", reply.body);
    let base = format!("https://{}", host.addr);

    // Without the pin the browser refuses the host: the test CA is no CA
    // it trusts, and nothing else was relaxed.
    {
        let strict = Browser::start(&[]);
        let page = strict.new_page().await;
        let answer = page
            .command("Page.navigate", json!({"url": format!("{base}/ui/")}))
            .await;
        let error = answer["errorText"].as_str().unwrap_or_default();
        assert!(
            error.contains("CERT"),
            "an untrusted host was loaded: {answer}"
        );
    }

    let browser = Browser::start(&[format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_pin(&cert.cert)
    )]);
    let console = Console {
        page: browser.new_page().await,
        base: base.clone(),
    };

    // No token: every page is the prompt, with no data.
    for path in [
        "/ui/",
        "/ui/leases/scheduler",
        "/ui/objects/tasks",
        "/ui/changes",
    ] {
        console.open(path, "token").await;
        let shown = console.page.eval("document.body.innerText").await;
        let shown = shown.as_str().unwrap();
        for data in ["scheduler", "rollout", "t1", "secure", "epoch"] {
            assert!(
                !shown.contains(data),
                "{path} shows {data:?} without a token:\n{shown}"
            );
        }
        assert_eq!(
            console
                .page
                .eval("document.querySelectorAll('main table').length")
                .await,
            0,
            "{path}"
        );
        assert_eq!(
            console.page.eval("document.activeElement.id").await,
            "token-input",
            "{path}: the prompt takes the focus"
        );
    }

    // A token the host refuses is said so, and forgotten.
    console.open("/ui/", "token").await;
    console.page.type_text("not-a-token-0123456789").await;
    console.page.press("Enter").await;
    console
        .page
        .wait_for(
            "the refusal shows",
            "document.getElementById('token-refused') !== null",
            RENDER,
        )
        .await;
    assert_eq!(
        console
            .page
            .eval("sessionStorage.getItem('leasehold.token')")
            .await,
        Value::Null
    );

    // A read token: the page shows its data.
    console.page.type_text(VIEWER).await;
    console.page.press("Enter").await;
    console
        .page
        .wait_for(
            "the overview shows the leases",
            "document.documentElement.dataset.state === 'ready' && \
             document.querySelector('#leases tr[data-lease=\"scheduler\"]') !== null",
            RENDER,
        )
        .await;
    // Kept in this tab's session storage only, and never shown.
    assert_eq!(
        console
            .page
            .eval("sessionStorage.getItem('leasehold.token')")
            .await,
        VIEWER
    );
    assert_eq!(console.page.eval("localStorage.length").await, 0);
    assert_eq!(console.page.eval("document.cookie").await, "");
    let everything = console
        .page
        .eval("document.documentElement.outerHTML + location.href + document.title")
        .await;
    assert!(
        !everything.as_str().unwrap().contains(VIEWER),
        "the page shows the token"
    );

    // Every page, in the same tab, over HTTPS.
    console.open("/ui/leases/scheduler", "ready").await;
    assert_eq!(console.bars().await.len(), 1);
    console.open("/ui/objects/tasks", "ready").await;
    assert_eq!(names(&console.page.table("#objects").await, "Name"), ["t1"]);
    console.open("/ui/changes", "ready").await;
    console
        .page
        .wait_for(
            "the changes page follows the stream",
            "document.documentElement.dataset.following === 'true'",
            RENDER,
        )
        .await;
    let made = Instant::now();
    let reply = call("PUT", "/v1/objects/tasks/t2".into(), ADMIN, Some("{}"))
        .await
        .unwrap();
    assert_eq!(reply.status, 201);
    console
        .page
        .wait_for(
            "the change shows",
            "document.querySelector('#changes tr[data-name=\"t2\"]') !== null",
            LIVE_WITHIN,
        )
        .await;
    eprintln!(
        "over HTTPS, a change showed {:?} after it was made",
        made.elapsed()
    );

    // Another tab has its own session storage: it asks again.
    let other = Console {
        page: browser.new_page().await,
        base: base.clone(),
    };
    other.open("/ui/", "token").await;
    other.page.close().await;

    // "Forget token" forgets it.
    console.open("/ui/", "ready").await;
    console
        .page
        .eval("document.getElementById('forget-token').click()")
        .await;
    console.page.settled(RENDER).await;
    console
        .page
        .wait_for(
            "the prompt is back",
            "document.documentElement.dataset.state === 'token' && \
             sessionStorage.getItem('leasehold.token') === null",
            RENDER,
        )
        .await;
    console.page.assert_clean("the console with tokens", |e| {
        unauthorized(e) || beyond_the_head(e)
    });
    assert!(
        console.page.logs().iter().any(unauthorized),
        "the page learnt it needs a token from a 401"
    );
    let log = host.log();
    for secret in [VIEWER, ADMIN] {
        assert!(!log.contains(secret), "the host's log shows a token");
    }
}
