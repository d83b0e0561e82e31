//! A failover rehearsal (issue 18): a primary and its asynchronous
//! streaming standby (`pg_basebackup`), real `leasehold` processes that
//! list both servers in one URL with `target_session_attrs=read-write`,
//! and a grant that the standby never receives. The primary stops, the
//! standby is promoted, and:
//!
//! - while the standby is in recovery nothing leads from it: a host whose
//!   URL names only the standby refuses to start, saying why, and the
//!   lease authority refuses to acquire or renew there;
//! - after promotion the hosts lead again, at an epoch above every epoch
//!   the former primary issued, the lost grant's included (the timeline
//!   floor: `(timeline - 1) * 2^32 + 1`), so no fence token repeats;
//! - the invariant checker finds nothing wrong in the promoted database;
//! - the former primary, started again without being rewound, is refused
//!   by a host that saw the new timeline.
//!
//! And copies are refused: a `pg_dump` restored into another database is
//! not the database it came from, even with every row the same.

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{
    AcquireRequest, Acquired, Authority, AuthorityError, ExpectedIdentity,
};
use leasehold_host::db::Database;
use leasehold_host::fence::LeaseKey;
use leasehold_host::store::{ObjectKey, PostgresStore, Store as _};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::faults::checker::{self, Ack};
use leasehold_tests::faults::rig;
use leasehold_tests::faults::watch::{ChangeFact, HostLogs, judge_wake_ups};
use leasehold_tests::http;
use leasehold_tests::pgcluster::{ScratchCluster, server_program};
use leasehold_tests::process::{Replica, binary, eventually, free_port};
use leasehold_tests::proxy::{FaultProxy, Mode};
use leasehold_tests::{TempDir, short_lease_config as config};
use serde_json::{Value, json};

const SCHEDULER: &str = "scheduler";

/// The rehearsals run one at a time: each starts its own servers and
/// hosts, and the lossy one holds wake-ups to a one-second bound that
/// must not measure the others' load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The first epoch a grant on timeline 2 may carry.
const TIMELINE_2_FLOOR: i64 = (1 << 32) + 1;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The lease row of the scheduler on the server at `url`: (holder, epoch,
/// active).
async fn lease_row(url: &str, cluster: &str) -> Option<(String, i64, bool)> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(connection);
    let row = client
        .query_opt(
            "SELECT holder, epoch, NOT released AND expires_at > clock_timestamp()
               FROM leasehold_leases WHERE cluster = $1 AND name = $2",
            &[&cluster, &SCHEDULER],
        )
        .await
        .ok()??;
    Some((row.get(0), row.get(1), row.get(2)))
}

/// Wait until the server at `url` shows the scheduler actively held at an
/// epoch above `after` by one of `hosts` that itself says it leads;
/// returns (its index, the epoch).
async fn leader_after(
    url: &str,
    cluster: &str,
    hosts: &[(&str, &Replica)],
    after: i64,
) -> (usize, i64) {
    eventually(
        &format!("a host leads {SCHEDULER} at an epoch above {after}"),
        secs(60),
        || async {
            let (holder, epoch, active) = lease_row(url, cluster).await?;
            if !active || epoch <= after {
                return None;
            }
            let i = hosts.iter().position(|(name, _)| *name == holder)?;
            hosts[i].1.leads(SCHEDULER).await?.then_some((i, epoch))
        },
    )
    .await
}

/// Create `kind/name` with `value` through `addr`, create-only; returns
/// the acknowledgement.
async fn create(addr: &str, kind: &str, name: &str, value: Value) -> Ack {
    let response = http::request_within(
        secs(5),
        addr,
        "PUT",
        &format!("/v1/objects/{kind}/{name}"),
        &[("If-None-Match", "*")],
        Some(&value.to_string()),
    )
    .await
    .unwrap_or_else(|e| panic!("create {kind}/{name} through {addr}: {e}"));
    assert_eq!(response.status, 201, "create {name}: {}", response.body);
    let version = response.json()["version"]
        .as_u64()
        .expect("an acknowledged write names its version");
    Ack {
        kind: kind.into(),
        name: name.into(),
        version,
        value,
    }
}

/// Create pending tasks `prefix-0..n` through `addr`.
async fn tasks(addr: &str, prefix: &str, n: usize) -> Vec<Ack> {
    let mut acks = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let value = json!({"status": "pending", "id": name});
        acks.push(create(addr, "tasks", &name, value).await);
    }
    acks
}

/// Wait until every task in `acks` shows as assigned on the server at `url`.
async fn assigned(url: &str, cluster: &str, acks: &[Ack]) {
    let names: Vec<String> = acks
        .iter()
        .filter(|a| a.kind == "tasks")
        .map(|a| a.name.clone())
        .collect();
    eventually("every task is assigned", secs(60), || async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(connection);
        let pending: i64 = client
            .query_one(
                "SELECT count(*) FROM leasehold_objects
                  WHERE cluster = $1 AND kind = 'tasks' AND name = ANY($2)
                    AND value::jsonb ->> 'status' <> 'assigned'",
                &[&cluster, &names],
            )
            .await
            .ok()?
            .get(0);
        (pending == 0).then_some(())
    })
    .await;
}

/// Prints the hosts' logs when the test fails.
struct Tails(Vec<std::path::PathBuf>);

impl Drop for Tails {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for path in &self.0 {
                let log = std::fs::read_to_string(path).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!(
                    "---- {} ----\n{}",
                    path.display(),
                    lines[lines.len().saturating_sub(40)..].join("\n")
                );
            }
        }
    }
}

fn request(cluster: &str, holder: &str) -> AcquireRequest {
    AcquireRequest {
        key: LeaseKey::new(cluster, SCHEDULER),
        holder: holder.to_string(),
        ttl: secs(2),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking step")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_loses_a_grant_never_repeats_an_epoch() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // Declared first, dropped last.
    let primary = std::sync::Arc::new(blocking(ScratchCluster::create).await);
    let db = TestDatabase::create_on(&primary.url()).await;
    let name = db.url().rsplit('/').next().unwrap().to_string();
    // The standby streams through a proxy, so the test can cut it off.
    let replication = FaultProxy::start_opaque(
        format!("127.0.0.1:{}", primary.port())
            .parse()
            .expect("primary address"),
    )
    .await;
    let standby = {
        let primary = primary.clone();
        let through = replication.addr().port();
        std::sync::Arc::new(
            blocking(move || ScratchCluster::standby_streaming_from(&primary, through)).await,
        )
    };
    let primary_url = format!("postgres://postgres@127.0.0.1:{}/{name}", primary.port());
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/{name}", standby.port());
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let cluster = format!("fo-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = TempDir::new();
    let (port_a, port_b, port_c) = (free_port(), free_port(), free_port());
    let _tails = Tails(
        ["a", "b", "c"]
            .map(|h| dir.path().join(format!("{h}.log")))
            .to_vec(),
    );
    let mut a = Replica::start_binary(
        binary(),
        dir.path(),
        "a",
        port_a,
        &config(&cluster, "host-a", port_a, &both),
    );
    a.wait_healthy(secs(60)).await;
    let (first, epoch) = leader_after(&primary_url, &cluster, &[("host-a", &a)], 0).await;
    assert_eq!((first, epoch), (0, 1));
    let b = Replica::start_binary(
        binary(),
        dir.path(),
        "b",
        port_b,
        &config(&cluster, "host-b", port_b, &both),
    );
    b.wait_healthy(secs(60)).await;
    let mut acks = vec![create(&a.addr, "nodes", "n1", json!({"capacity": 1000})).await];
    acks.extend(tasks(&a.addr, "before", 3).await);
    assigned(&primary_url, &cluster, &acks).await;

    // Everything so far reaches the standby; then replication stops, and
    // the next grant exists only on the primary.
    {
        let (primary, standby) = (primary.clone(), standby.clone());
        blocking(move || standby.catch_up_with(&primary)).await;
    }
    replication.set(Mode::Reset);
    a.kill().await;
    let (leader, lost) =
        leader_after(&primary_url, &cluster, &[("host-a", &a), ("host-b", &b)], 1).await;
    assert_eq!((leader, lost), (1, 2), "host-b took over on the primary");
    eprintln!("host-b leads at epoch {lost} on the primary only; stopping the primary");
    {
        let primary = primary.clone();
        blocking(move || primary.stop()).await;
    }

    // The standby, still in recovery, shows the lease at epoch 1: the
    // grant of epoch 2 never reached it.
    let (_, seen, _) = lease_row(&standby_url, &cluster)
        .await
        .expect("the standby answers reads");
    assert_eq!(
        seen, 1,
        "the grant of epoch {lost} must be lost for this test"
    );

    // Nothing leads from a server in recovery: the authority refuses to
    // acquire there, naming why ...
    let on_standby = PostgresAuthority::new(
        Database::new(&standby_url, 2).unwrap(),
        ExpectedIdentity::default(),
    );
    match on_standby.acquire(&request(&cluster, "host-x")).await {
        Err(AuthorityError::WrongDatabase { problems, .. }) => {
            assert!(problems.contains("in recovery"), "{problems}");
        }
        other => panic!("acquiring on a standby must be refused, got {other:?}"),
    }
    // ... a write through it is refused in its own transaction, saying
    // why (not merely failing as read-only) ...
    let standby_store = PostgresStore::new(Database::new(&standby_url, 2).unwrap());
    let id: uuid::Uuid = {
        let (client, connection) = tokio_postgres::connect(&standby_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .query_one("SELECT id FROM leasehold_database", &[])
            .await
            .unwrap()
            .get(0)
    };
    standby_store.pin_database(id);
    let key = ObjectKey {
        kind: "tasks".into(),
        name: "through-the-standby".into(),
    };
    let refused = standby_store
        .put(&cluster, &key, "{}", None)
        .await
        .expect_err("a write through a standby")
        .to_string();
    assert!(
        refused.contains("in recovery") && refused.contains("refusing to write"),
        "{refused}"
    );
    // ... and a host whose URL names only the standby refuses to start.
    let mut c = Replica::start_binary(
        binary(),
        dir.path(),
        "c",
        port_c,
        &config(&cluster, "host-c", port_c, &standby_url),
    );
    let code = c.exited(secs(60)).await.expect("host-c gives up");
    assert_ne!(code, 0, "host-c must not run against a standby");
    let log = c.log();
    assert!(
        log.contains("in recovery") && log.contains("primary"),
        "host-c's refusal names the recovery: {log}"
    );

    eprintln!("promoting the standby");
    {
        let standby = standby.clone();
        blocking(move || standby.promote()).await;
    }
    c.restart();
    let hosts = [("host-a", &a), ("host-b", &b), ("host-c", &c)];
    let (_, after) = leader_after(&standby_url, &cluster, &hosts, 1).await;
    eprintln!("after the failover: epoch {after} (the lost grant was epoch {lost})");
    assert!(
        after >= TIMELINE_2_FLOOR,
        "the first grant on timeline 2 must start at its floor {TIMELINE_2_FLOOR}, got {after}: \
         epoch {lost} was already issued by the former primary"
    );
    // The scheduler keeps assigning on the new primary.
    let addr = if b.leads(SCHEDULER).await == Some(true) {
        b.addr.clone()
    } else {
        c.addr.clone()
    };
    let more = tasks(&addr, "after", 3).await;
    assigned(&standby_url, &cluster, &more).await;
    acks.extend(more);
    let report = checker::check(&standby_url, &cluster, &acks).await;
    eprintln!("failover: {report}");
    report.assert_clean("failover");

    // host-b writes on the promoted server (timeline 2) ...
    create(&b.addr, "nodes", "n2", json!({"capacity": 1})).await;
    // ... then the former primary is started again without being rewound: writable,
    // on timeline 1, and first in host-b's URL. host-b saw timeline 2, so
    // once its sessions end and it reconnects there, it writes nothing
    // (an API write acknowledged there would be lost with the rewind).
    {
        let primary = primary.clone();
        blocking(move || primary.start()).await;
    }
    let (admin, connection) = tokio_postgres::connect(&standby_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let refused = eventually(
        "host-b refuses a write once it reaches the former primary",
        secs(30),
        || async {
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .ok()?;
            let name = format!("split-{}", uuid::Uuid::new_v4().simple());
            let response = http::request_within(
                secs(5),
                &b.addr,
                "PUT",
                &format!("/v1/objects/tasks/{name}"),
                &[("If-None-Match", "*")],
                Some(r#"{"status": "pending"}"#),
            )
            .await
            .ok()?;
            assert_ne!(
                response.status, 201,
                "host-b wrote {name} into the former primary"
            );
            response
                .body
                .contains("former primary")
                .then_some(response.body)
        },
    )
    .await;
    eprintln!("host-b at the former primary: {refused}");
    let (old, connection) = tokio_postgres::connect(&primary_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let split: i64 = old
        .query_one(
            "SELECT count(*) FROM leasehold_objects WHERE name LIKE 'split-%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(split, 0, "nothing was written into the former primary");
    // The hosts stop before their database is dropped.
    drop((b, c, db));
}

/// A database the test made, dropped (sessions and all) with this value.
struct Made {
    admin: String,
    name: String,
}

impl Drop for Made {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let _ = std::process::Command::new(server_program("psql"))
                .args([
                    "-XqAc",
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                ])
                .arg(&admin)
                .output();
        })
        .join();
    }
}

/// A `pg_dump` of a Leasehold database restored into another database of
/// the same server carries every row, the uuid included; the authority
/// still refuses it, naming the copy and the original, until an operator
/// adopts it (README, "Running in production"), which moves every lease
/// above the epochs the original issued.
#[tokio::test]
async fn a_restored_dump_is_refused_as_a_copy() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let original = TestDatabase::create().await;
    let source = original.url().to_string();
    let name = source.rsplit('/').next().unwrap().to_string();
    let mut admin = url::Url::parse(&source).unwrap();
    admin.set_path("postgres");
    let made = Made {
        admin: admin.to_string(),
        name: format!("{name}_restored"),
    };
    let mut restored = url::Url::parse(&source).unwrap();
    restored.set_path(&made.name);
    let restored = restored.to_string();
    let dir = TempDir::new();
    let file = dir.path().join("dump");
    let run = |program: &str, args: &[&str]| {
        let output = std::process::Command::new(server_program(program))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            output.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    // The original has given epoch 1 of a lease before it is dumped.
    let original_authority =
        PostgresAuthority::new(original.database(2), ExpectedIdentity::default());
    assert!(matches!(
        original_authority.acquire(&request("east", "host-a")).await,
        Ok(Acquired::Granted(_))
    ));
    let file_arg = file.to_str().unwrap();
    run(
        "psql",
        &[
            "-XqAc",
            &format!("CREATE DATABASE {}", made.name),
            &made.admin,
        ],
    );
    run("pg_dump", &["-Fc", "-f", file_arg, "-d", &source]);
    run("pg_restore", &["--no-owner", "-d", &restored, file_arg]);

    let authority = PostgresAuthority::new(
        Database::new(&restored, 2).unwrap(),
        ExpectedIdentity::default(),
    );
    match authority.acquire(&request("east", "host-a")).await {
        Err(AuthorityError::WrongDatabase { problems, .. }) => {
            assert!(problems.contains("is a copy"), "{problems}");
            assert!(problems.contains(&made.name), "{problems}");
            assert!(problems.contains(&format!("{name:?}")), "{problems}");
        }
        other => panic!("a restored dump must be refused, got {other:?}"),
    }

    // Adopted as the README says (every host stopped), it is led from,
    // above every epoch the original could have issued.
    run(
        "psql",
        &[
            "-XqAc",
            "UPDATE leasehold_database
                SET system_identifier = (SELECT system_identifier FROM pg_control_system()),
                    database_oid = (SELECT oid FROM pg_database WHERE datname = current_database()),
                    database_name = current_database();
             UPDATE leasehold_leases SET epoch = ((epoch >> 32) + 1) << 32, released = true;",
            &restored,
        ],
    );
    let adopted = PostgresAuthority::new(
        Database::new(&restored, 2).unwrap(),
        ExpectedIdentity::default(),
    );
    match adopted.acquire(&request("east", "host-b")).await {
        Ok(Acquired::Granted(grant)) => {
            assert_eq!(grant.fence.epoch.0, (1 << 32) + 1, "{grant:?}");
        }
        other => panic!("an adopted copy is led from, got {other:?}"),
    }
}

/// A script running the `leasehold` binary with JSON logs that include
/// every reconcile: the evidence of the wake-up rule.
fn logging_reconciles(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("leasehold-{name}-logging-reconciles"));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nexec '{}' --log-format json --log-level '{}' \"$@\"\n",
            binary().display(),
            rig::RECONCILE_LOG_FILTER
        ),
    )
    .expect("write the host's start script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the host's start script executable");
    path
}

/// Every change of `cluster` on the server at `url`, by position.
async fn changes_on(url: &str, cluster: &str) -> std::collections::BTreeMap<u64, ChangeFact> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .query(
            "SELECT position, (extract(epoch FROM at) * 1000000)::int8, kind, name, change,
                    version
               FROM leasehold_changes WHERE cluster = $1",
            &[&cluster],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let position = r.get::<_, i64>(0) as u64;
            let fact = ChangeFact {
                position,
                at_micros: r.get(1),
                kind: r.get(2),
                name: r.get(3),
                change: r.get(4),
                version: r.get::<_, i64>(5) as u64,
            };
            (position, fact)
        })
        .collect()
}

/// Every number the server at `url` holds for `cluster` — change
/// positions, revisions and versions, event seqs and revisions, object
/// versions — each with the objects it numbered (`kind/name`).
async fn numbers_on(url: &str, cluster: &str) -> std::collections::BTreeMap<u64, BTreeSet<String>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut numbers: std::collections::BTreeMap<u64, BTreeSet<String>> = Default::default();
    for (table, columns) in [
        (
            "leasehold_changes",
            ["position", "revision", "version"].as_slice(),
        ),
        ("leasehold_events", ["seq", "revision"].as_slice()),
        ("leasehold_objects", ["version"].as_slice()),
    ] {
        for column in columns {
            let rows = client
                .query(
                    &format!(
                        "SELECT {column}, kind || '/' || name FROM {table} WHERE cluster = $1"
                    ),
                    &[&cluster],
                )
                .await
                .unwrap();
            for r in rows {
                numbers
                    .entry(r.get::<_, i64>(0) as u64)
                    .or_default()
                    .insert(r.get::<_, String>(1));
            }
        }
    }
    numbers
}

/// The highest epoch of any lease of `cluster` on the server at `url`.
async fn highest_epoch(url: &str, cluster: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .query_one(
            "SELECT coalesce(max(epoch), 0) FROM leasehold_leases WHERE cluster = $1",
            &[&cluster],
        )
        .await
        .unwrap()
        .get(0)
}

/// What an API reader of `/v1/changes` gets from `after` on, through
/// `addr`: `Ok` with every change it reads (following `next` until null)
/// and its last cursor, or `Err` with the status and body of a refusal.
async fn read_changes(addr: &str, after: u64) -> Result<(Vec<Value>, u64), (u16, Value)> {
    let mut cursor = after;
    let mut read = Vec::new();
    loop {
        let response = http::request_within(
            secs(10),
            addr,
            "GET",
            &format!("/v1/changes?after={cursor}&limit=500"),
            &[],
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("GET /v1/changes through {addr}: {e}"));
        if response.status != 200 {
            return Err((response.status, response.json()));
        }
        let page = response.json();
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if let Some(last) = items.last() {
            cursor = last["position"].as_u64().expect("a change has a position");
        }
        read.extend(items);
        match page["next"].as_u64() {
            Some(next) => cursor = next,
            None => return Ok((read, cursor)),
        }
    }
}

/// Delete `kind/name` through `addr` (marked, if a finalizer is on it:
/// the scheduler's slot finalizer is, once a task is assigned).
async fn delete(addr: &str, kind: &str, name: &str) {
    let response = http::request_within(
        secs(5),
        addr,
        "DELETE",
        &format!("/v1/objects/{kind}/{name}"),
        &[],
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("delete {kind}/{name} through {addr}: {e}"));
    assert!(
        [200, 202, 204].contains(&response.status),
        "delete {name}: {} {}",
        response.status,
        response.body
    );
}

/// Write `nodes/n1` with `capacity` through `addr`, under `If-Match:
/// version` if given: the status, and the version written (on 200/201).
async fn put_node(addr: &str, capacity: u64, if_match: Option<u64>) -> (u16, Option<u64>) {
    let precondition = if_match.map(|v| v.to_string());
    let headers: Vec<(&str, &str)> = precondition
        .iter()
        .map(|v| ("If-Match", v.as_str()))
        .collect();
    let response = http::request_within(
        secs(5),
        addr,
        "PUT",
        "/v1/objects/nodes/n1",
        &headers,
        Some(&json!({"capacity": capacity}).to_string()),
    )
    .await
    .unwrap_or_else(|e| panic!("put nodes/n1 through {addr}: {e}"));
    let version = response.json()["version"].as_u64();
    (response.status, version)
}

/// Kill the server of `cluster` at once, as a crash would: SIGQUIT to its
/// postmaster (an immediate shutdown: no checkpoint, every session cut),
/// then wait until it no longer answers.
async fn kill_immediately(cluster: &ScratchCluster) {
    let data = cluster.sql("SHOW data_directory");
    let pid = std::fs::read_to_string(std::path::Path::new(&data).join("postmaster.pid"))
        .expect("the primary's postmaster.pid")
        .lines()
        .next()
        .expect("a pid")
        .trim()
        .to_string();
    let killed = std::process::Command::new("kill")
        .args(["-QUIT", &pid])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -QUIT {pid}");
    let port = cluster.port();
    eventually("the primary is gone", secs(30), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

/// The acceptance rehearsal of a lossy asynchronous failover (issue 36):
/// the standby stops, the primary goes on taking writes (creates, the
/// scheduler's assignments, deletions), the primary is killed, and the
/// standby, which never received those commits, is started and promoted.
/// Then the hosts lead at epochs above every earlier one; every change
/// after the failover wakes the scheduler within a second; no position,
/// revision, event seq or version the former primary issued is issued
/// again (both timelines' records are read), so `If-Match` with a version
/// the failover lost is refused; and an API reader at its pre-failover
/// cursor is told to re-list (410 `too_old`) or sees every new change,
/// never silently nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_failover_never_repeats_a_position_or_a_version() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // Declared first, dropped last.
    let primary = std::sync::Arc::new(blocking(ScratchCluster::create).await);
    let db = TestDatabase::create_on(&primary.url()).await;
    let name = db.url().rsplit('/').next().unwrap().to_string();
    let standby = {
        let primary = primary.clone();
        std::sync::Arc::new(blocking(move || ScratchCluster::standby_of(&primary)).await)
    };
    let primary_url = format!("postgres://postgres@127.0.0.1:{}/{name}", primary.port());
    let standby_url = format!("postgres://postgres@127.0.0.1:{}/{name}", standby.port());
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let cluster = format!("lossy-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = TempDir::new();
    let (port_a, port_b) = (free_port(), free_port());
    let _tails = Tails(
        ["a", "b"]
            .map(|h| dir.path().join(format!("{h}.log")))
            .to_vec(),
    );
    let a = Replica::start_binary(
        logging_reconciles(dir.path(), "a"),
        dir.path(),
        "a",
        port_a,
        &config(&cluster, "host-a", port_a, &both),
    );
    a.wait_healthy(secs(60)).await;
    let b = Replica::start_binary(
        logging_reconciles(dir.path(), "b"),
        dir.path(),
        "b",
        port_b,
        &config(&cluster, "host-b", port_b, &both),
    );
    b.wait_healthy(secs(60)).await;
    let hosts = [("host-a", &a), ("host-b", &b)];
    leader_after(&primary_url, &cluster, &hosts, 0).await;
    let mut acks = vec![create(&a.addr, "nodes", "n1", json!({"capacity": 10000})).await];
    acks.extend(tasks(&a.addr, "before", 20).await);
    assigned(&primary_url, &cluster, &acks).await;

    // Everything so far reaches the standby; then it stops, and the
    // primary goes on alone: a few hundred changes, deletions among them.
    {
        let (primary, standby) = (primary.clone(), standby.clone());
        blocking(move || {
            standby.catch_up_with(&primary);
            standby.stop();
        })
        .await;
    }
    // Versions of n1 that only the former primary will have issued.
    let mut lost_versions = Vec::new();
    for capacity in 10001..10006 {
        let (status, version) = put_node(&a.addr, capacity, None).await;
        assert_eq!(status, 200, "update n1");
        lost_versions.push(version.expect("an update names its version"));
    }
    let lost = tasks(&b.addr, "lost", 120).await;
    assigned(&primary_url, &cluster, &lost).await;
    for ack in lost.iter().step_by(3).chain(acks[1..].iter().step_by(4)) {
        delete(&a.addr, "tasks", &ack.name).await;
    }
    // An API reader follows the stream to the former primary's end.
    let (_, cursor) = read_changes(&a.addr, 0)
        .await
        .expect("the reader follows the former primary");
    let old_changes = changes_on(&primary_url, &cluster).await;
    let old_numbers = numbers_on(&primary_url, &cluster).await;
    let old_epoch = highest_epoch(&primary_url, &cluster).await;
    eprintln!(
        "before the kill: {} changes, the reader's cursor {cursor}, the highest epoch {old_epoch}",
        old_changes.len()
    );
    assert!(old_changes.len() >= 300, "{} changes", old_changes.len());

    kill_immediately(&primary).await;
    eprintln!("primary killed; starting and promoting the standby");
    {
        let standby = standby.clone();
        blocking(move || {
            standby.start();
            standby.promote();
        })
        .await;
    }
    let (_, epoch) = leader_after(&standby_url, &cluster, &hosts, old_epoch).await;
    eprintln!("after the failover: epoch {epoch} (the former primary's highest: {old_epoch})");
    assert!(epoch >= TIMELINE_2_FLOOR, "epoch {epoch}");
    // The failover lost commits: the promoted server lacks the former
    // primary's last changes (else this test proves nothing).
    let kept = changes_on(&standby_url, &cluster).await;
    let kept_last = kept.keys().next_back().copied().unwrap_or(0);
    assert!(
        kept.len() < old_changes.len() && kept_last < cursor,
        "the standby kept {} of {} changes, up to {kept_last} (cursor {cursor})",
        kept.len(),
        old_changes.len()
    );
    let failed_over_at = {
        let (client, connection) = tokio_postgres::connect(&standby_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };

    // New objects and deletions on the new primary.
    let after = tasks(&a.addr, "after", 20).await;
    for ack in after.iter().step_by(5) {
        delete(&b.addr, "tasks", &ack.name).await;
    }
    let survivors: Vec<Ack> = after
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 != 0)
        .map(|(_, a)| a.clone())
        .collect();
    assigned(&standby_url, &cluster, &survivors).await;
    let new_changes: Vec<ChangeFact> = changes_on(&standby_url, &cluster)
        .await
        .into_values()
        .filter(|c| !kept.contains_key(&c.position))
        .collect();
    let expected: BTreeSet<(String, String)> = new_changes
        .iter()
        .map(|c| (c.name.clone(), c.change.clone()))
        .collect();
    assert!(
        expected.len() >= 20,
        "{} changes after the failover",
        expected.len()
    );

    // No number repeats one the former primary issued: every number the
    // new primary holds that the former one did too numbers the same
    // thing, and every new one is above all of the former's.
    let old_highest = *old_numbers.keys().next_back().unwrap();
    let new_numbers = numbers_on(&standby_url, &cluster).await;
    for (n, what) in &new_numbers {
        match old_numbers.get(n) {
            Some(before) => assert!(
                what.is_subset(before),
                "number {n} issued again: before the failover {before:?}, now {what:?}"
            ),
            None => assert!(
                *n > old_highest,
                "number {n} ({what:?}) is not above the former primary's highest {old_highest}"
            ),
        }
    }

    // A version the failover lost never matches again: If-Match with one
    // is refused however often n1 is written on the new primary (and so is
    // an idempotency key built from it, `for_action(…, version, …)`).
    for capacity in [10000, 10007, 10008, 10009, 10000] {
        let (status, version) = put_node(&b.addr, capacity, None).await;
        assert_eq!(status, 200, "update n1 on the new primary");
        let version = version.expect("an update names its version");
        assert!(
            !lost_versions.contains(&version),
            "n1 took version {version} again"
        );
    }
    for version in &lost_versions {
        let (status, _) = put_node(&a.addr, 10000, Some(*version)).await;
        assert_eq!(
            status, 409,
            "If-Match: {version}, a version the failover lost"
        );
    }

    // The API reader at its pre-failover cursor is told to re-list, or
    // sees every new change.
    match read_changes(&b.addr, cursor).await {
        Err((status, body)) => {
            assert_eq!(status, 410, "{body}");
            assert_eq!(body["code"], "too_old", "{body}");
            let resume = body["oldest_kept"].as_u64().expect("oldest_kept") - 1;
            eprintln!("the reader at {cursor} is told to re-list and resume after {resume}");
            let (read, _) = read_changes(&b.addr, resume)
                .await
                .expect("the reader resumes where it is told");
            let seen: BTreeSet<(String, String)> = read
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["change"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            assert!(
                expected.is_subset(&seen),
                "resumed after {resume}, the reader misses {:?}",
                expected.difference(&seen).collect::<Vec<_>>()
            );
        }
        Ok((read, _)) => {
            let seen: BTreeSet<(String, String)> = read
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["change"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            assert!(
                expected.is_subset(&seen),
                "the reader at its pre-failover cursor {cursor} misses {} of {} new changes \
                 and was not told to re-list",
                expected.difference(&seen).count(),
                expected.len()
            );
        }
    }

    // Every change after the failover woke the scheduler, within a second.
    // The last changes (the scheduler's own, a finalizer's removal) may
    // not be reconciled yet: wait for that, bounded, as the fault suite's
    // checker does, reading the changes and the logs again each time.
    let started = tokio::time::Instant::now();
    let (new_changes, logs, woken) = loop {
        let new_changes: Vec<ChangeFact> = changes_on(&standby_url, &cluster)
            .await
            .into_values()
            .filter(|c| !kept.contains_key(&c.position))
            .collect();
        let mut logs = HostLogs::default();
        for (holder, replica) in hosts {
            logs.add(holder, &replica.log());
        }
        let woken = judge_wake_ups(&new_changes, &logs);
        if woken.missed.is_empty() || started.elapsed() > rig::WAKE_UP_QUIESCENCE {
            break (new_changes, logs, woken);
        }
        // Polling the hosts' logs: nothing tells when a reconcile ran.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        woken.missed.is_empty() && woken.judged >= 20,
        "wake-ups after the failover ({} judged): {:#?}",
        woken.judged,
        woken.missed
    );
    let mut slowest = 0;
    for c in new_changes.iter().filter(|c| c.kind == "tasks") {
        let first = logs
            .reconciles
            .iter()
            .filter(|r| r.controller == SCHEDULER && r.kind == c.kind && r.name == c.name)
            .map(|r| r.started_micros)
            .filter(|&started| started >= c.at_micros)
            .min()
            .unwrap_or_else(|| panic!("no reconcile of {} after change {}", c.name, c.position));
        let delay = first - c.at_micros.max(failed_over_at);
        slowest = slowest.max(delay);
        assert!(
            delay <= 1_000_000,
            "change {} ({} tasks/{}) woke the scheduler after {delay} µs",
            c.position,
            c.change,
            c.name
        );
    }
    eprintln!(
        "lossy failover: {} new changes woke the scheduler (slowest {slowest} µs); {} numbers \
         checked",
        woken.judged,
        new_numbers.len()
    );
    drop((a, b, db));
}
