//! Two real hosts of different schema versions on one database: the older
//! (`leasehold`) creates the schema, leads the scheduler and writes; the
//! newer (`leasehold-newer-schema`, the same program knowing one migration
//! more) joins and migrates; from then on the older neither writes (API or
//! guest), renews, leads again nor starts, and says why: upgrade, naming
//! the database's version and its own.

use std::path::PathBuf;
use std::time::Duration;

use leasehold_host::db::{DEFAULT_URL, MIGRATIONS, URL_ENV};
use leasehold_tests::process::{Replica, eventually, free_port};
use leasehold_tests::{TempDir, guest_dir, http};

const CLUSTER: &str = "schemas";
const SCHEDULER: &str = "scheduler";
/// How long a host may take to start (compiling the component in a debug
/// build on busy cores) or the cluster to act.
const LIMIT: Duration = Duration::from_secs(60);

/// The newer host's program, built by `cargo build -p
/// leasehold-newer-schema` (`cargo xtask test` does).
fn newer_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
    let path = dir.join("leasehold-newer-schema");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p leasehold-newer-schema` (`cargo xtask test` does)",
        path.display()
    );
    path
}

/// An empty database (no schema: the first host creates it), dropped at
/// the end.
struct EmptyDatabase {
    admin: String,
    name: String,
    url: String,
}

impl EmptyDatabase {
    async fn create() -> Self {
        let admin = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_string());
        let name = format!("leasehold_test_{}", uuid::Uuid::new_v4().simple());
        let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .expect("connect to PostgreSQL");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the database");
        let mut url = url::Url::parse(&admin).expect("admin url");
        url.set_path(&name);
        Self {
            admin,
            name,
            url: url.to_string(),
        }
    }

    async fn sql(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        client
    }

    async fn schema_version(&self) -> i32 {
        self.sql()
            .await
            .query_one("SELECT max(version) FROM leasehold_migrations", &[])
            .await
            .expect("read the schema version")
            .get(0)
    }

    /// (holder, epoch, held now) of the scheduler's lease.
    async fn lease(&self) -> Option<(String, i64, bool)> {
        self.sql()
            .await
            .query_opt(
                "SELECT holder, epoch, NOT released AND expires_at > clock_timestamp()
                   FROM leasehold_leases WHERE cluster = $1 AND name = $2",
                &[&CLUSTER, &SCHEDULER],
            )
            .await
            .expect("read the lease")
            .map(|r| (r.get(0), r.get(1), r.get(2)))
    }
}

impl Drop for EmptyDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&admin, tokio_postgres::NoTls).await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

fn config(holder: &str, port: u16, url: &str) -> String {
    let guests = guest_dir();
    format!(
        r#"cluster = "{CLUSTER}"
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
renew_interval = "200ms"
renew_deadline = "1400ms"
backoff_max = "1s"
"#,
        cache = guests.join("../../leasehold-test-cache").display(),
        guests = guests.display(),
    )
}

async fn put(addr: &str, kind: &str, name: &str, body: &str) -> http::Response {
    http::request(
        addr,
        "PUT",
        &format!("/v1/objects/{kind}/{name}"),
        &[],
        Some(body),
    )
    .await
    .expect("the host answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_host_refuses_to_write_once_a_newer_one_migrated() {
    // The fixture's one more migration is numbered after this build's last.
    let older_version = MIGRATIONS.last().expect("migrations").0;
    let newest = older_version + 1;
    let db = EmptyDatabase::create().await;
    let dir = TempDir::new();

    // The older host creates the schema at its version, leads and writes:
    // the API, and its guest assigning a task.
    let older_port = free_port();
    let mut older = Replica::start(
        dir.path(),
        "older",
        older_port,
        &config("older", older_port, &db.url),
    );
    older.wait_healthy(LIMIT).await;
    assert_eq!(
        db.schema_version().await,
        older_version,
        "the older host migrates to its own version"
    );
    let (_, first_epoch, _) = eventually("the older host leads the scheduler", LIMIT, || async {
        db.lease()
            .await
            .filter(|(h, _, held)| h == "older" && *held)
    })
    .await;
    let node = put(&older.addr, "nodes", "n1", r#"{"capacity": 100}"#).await;
    assert_eq!(node.status, 201, "{node:?}");
    let task = put(
        &older.addr,
        "tasks",
        "t-0",
        r#"{"status": "pending", "id": "t-0"}"#,
    )
    .await;
    assert_eq!(task.status, 201, "{task:?}");
    eventually("the older host's guest assigns t-0", LIMIT, || async {
        db.sql()
            .await
            .query_opt(
                "SELECT 1 FROM leasehold_objects
                  WHERE cluster = $1 AND kind = 'tasks' AND name = 't-0' AND holder = 'older'",
                &[&CLUSTER],
            )
            .await
            .expect("read t-0")
    })
    .await;

    // The newer host joins and migrates.
    let newer_port = free_port();
    let mut newer = Replica::start_binary(
        newer_binary(),
        dir.path(),
        "newer",
        newer_port,
        &config("newer", newer_port, &db.url),
    );
    newer.wait_healthy(LIMIT).await;
    assert_eq!(db.schema_version().await, newest, "the newer host migrates");
    // Everything committed before this snapshot may be the older host's;
    // nothing after it may.
    let migrated: String = db
        .sql()
        .await
        .query_one("SELECT pg_current_snapshot()::text", &[])
        .await
        .expect("take a snapshot")
        .get(0);
    // Work for a scheduler: the older host's guest would assign it if its
    // writes were let through.
    for n in 1..=3 {
        let task = put(
            &newer.addr,
            "tasks",
            &format!("t-{n}"),
            &format!(r#"{{"status": "pending", "id": "t-{n}"}}"#),
        )
        .await;
        assert_eq!(task.status, 201, "the newer host writes: {task:?}");
    }

    let upgrade = |text: &str| {
        text.contains("upgrade this host")
            && text.contains(&format!("[{newest}]"))
            && text.contains(&format!("up to {older_version}"))
    };
    // An API write through the older host is refused, saying why.
    let refused = put(&older.addr, "tasks", "t-old", r#"{"status": "pending"}"#).await;
    assert!(
        !(200..300).contains(&refused.status) && upgrade(&refused.body),
        "the older host must refuse an API write with the upgrade message naming both versions: {refused:?}"
    );
    // Its lease ends (it cannot renew), the newer host leads.
    let (_, next_epoch, _) = eventually("the newer host leads the scheduler", LIMIT, || async {
        db.lease()
            .await
            .filter(|(h, _, held)| h == "newer" && *held)
    })
    .await;
    assert!(next_epoch > first_epoch);
    eventually("the newer host's guest assigns t-1..t-3", LIMIT, || async {
        let assigned: i64 = db
            .sql()
            .await
            .query_one(
                "SELECT count(*) FROM leasehold_objects
                  WHERE cluster = $1 AND kind = 'tasks' AND holder = 'newer'",
                &[&CLUSTER],
            )
            .await
            .expect("read tasks")
            .get(0);
        (assigned == 3).then_some(())
    })
    .await;
    eventually(
        "the older host's log says to upgrade, naming both versions",
        LIMIT,
        || async { older.log().lines().any(upgrade).then_some(()) },
    )
    .await;

    // The newer host releases the lease: the older one still refuses to
    // lead, and says so again.
    let refusals = older.log().lines().filter(|l| upgrade(l)).count();
    newer.signal("TERM");
    assert!(newer.exited(LIMIT).await.is_some(), "the newer host stops");
    eventually(
        "the older host refuses the released lease again",
        LIMIT,
        || async { (older.log().lines().filter(|l| upgrade(l)).count() > refusals).then_some(()) },
    )
    .await;
    let (holder, epoch, _) = db.lease().await.expect("the lease row");
    assert_eq!(
        (holder.as_str(), epoch),
        ("newer", next_epoch),
        "the older host must not lead after the migration"
    );

    // Nothing stamped by the older host committed after the migration: each
    // row's transaction is visible in the snapshot taken after it.
    let sql = db.sql().await;
    for table in ["leasehold_objects", "leasehold_events", "leasehold_changes"] {
        let late: i64 = sql
            .query_one(
                &format!(
                    "SELECT count(*) FROM {table} r,
                            (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS xmax) cur
                      WHERE r.cluster = $1 AND r.holder = 'older'
                        AND NOT pg_visible_in_snapshot(
                              (cur.xmax - ((cur.xmax - r.xmin::text::int8) % 4294967296
                                           + 4294967296) % 4294967296)::text::xid8,
                              $2::text::pg_snapshot)"
                ),
                &[&CLUSTER, &migrated],
            )
            .await
            .expect("read late writes")
            .get(0);
        assert_eq!(
            late, 0,
            "{table}: the older host wrote after the newer one migrated"
        );
    }

    // Started again, the older host refuses to start.
    older.kill().await;
    older.restart();
    let code = older.exited(LIMIT).await;
    assert!(
        matches!(code, Some(c) if c != 0),
        "the older host must not start on a newer schema (exit {code:?})"
    );
    assert!(
        older.log_tail(5).lines().any(upgrade),
        "{}",
        older.log_tail(10)
    );
    drop(sql);
}
