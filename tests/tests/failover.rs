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
use leasehold_tests::http;
use leasehold_tests::pgcluster::{ScratchCluster, server_program};
use leasehold_tests::process::{Replica, binary, eventually, free_port};
use leasehold_tests::proxy::{FaultProxy, Mode};
use leasehold_tests::{TempDir, guest_dir};
use serde_json::{Value, json};

const SCHEDULER: &str = "scheduler";

/// The first epoch a grant on timeline 2 may carry.
const TIMELINE_2_FLOOR: i64 = (1 << 32) + 1;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A short lease, so the rehearsal's waits for expiry stay short.
fn config(cluster: &str, holder: &str, port: u16, url: &str) -> String {
    let guests = guest_dir();
    let cache = guests.join("../../leasehold-test-cache");
    format!(
        r#"cluster = "{cluster}"
holder = "{holder}"

[database]
url = "{url}"

[http]
listen = "127.0.0.1:{port}"

[runtime]
cache_dir = "{cache}"

[[controllers]]
name = "{SCHEDULER}"
component = "{guests}/{SCHEDULER}.wasm"
lease_ttl = "2000ms"
renew_interval = "400ms"
renew_deadline = "1400ms"
backoff_max = "1s"
"#,
        cache = cache.display(),
        guests = guests.display(),
    )
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
