//! TLS to PostgreSQL: a cluster of the test's own (`pg_createcluster`)
//! with `ssl = on`, a server certificate from a CA the test makes, and a
//! `pg_hba.conf` that lets TCP in only over `hostssl`.
//!
//! - Hosts with `sslmode=verify-full&sslrootcert=<CA>` lead, write and hand
//!   over on SIGTERM; every session they hold shows `ssl` in
//!   `pg_stat_ssl`, and `/readyz` and `leasehold_db_tls` say so.
//! - A server certificate from another CA is a start-up refusal naming the
//!   problem (unknown issuer), never a retry loop; a certificate for
//!   another name is refused under `verify-full` (name mismatch) and
//!   accepted under `verify-ca`; `sslmode=disable` is refused naming the
//!   server's demand for encryption.
//! - Client-certificate authentication (`hostssl ... cert`) works with
//!   `sslcert`/`sslkey`, and without them the server refuses.

use std::time::{Duration, Instant};

use leasehold_tests::pgcluster::ScratchCluster;
use leasehold_tests::pki::Pki;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use leasehold_tests::{TempDir, guest_dir, http};

/// Only TLS over TCP: trust for every user but `certuser`, who must
/// present a client certificate (its common name is the user).
const HBA: &str = "\
local all all trust
hostssl all certuser 127.0.0.1/32 cert
hostssl all certuser ::1/128 cert
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128 trust
";

/// The database the hosts use.
const DATABASE: &str = "leasehold_tls";

/// A cluster with TLS, its CA, and a folder for the test's files.
struct Setup {
    dir: TempDir,
    ca: Pki,
    cluster: ScratchCluster,
}

impl Setup {
    /// The server's certificate names `names`.
    fn new(names: &[&str]) -> Self {
        let dir = TempDir::new();
        let ca = Pki::new(dir.path(), "db");
        let server = ca.server("server", names);
        let cluster = ScratchCluster::create_with_tls(&server, &ca.ca(), HBA);
        cluster.local_sql("postgres", &format!("CREATE DATABASE {DATABASE}"));
        cluster.local_sql("postgres", "CREATE ROLE certuser LOGIN SUPERUSER");
        Self { dir, ca, cluster }
    }

    /// A URL of the hosts' database at `host` with `params`.
    fn url(&self, user: &str, host: &str, params: &str) -> String {
        format!(
            "postgres://{user}@{host}:{}/{DATABASE}?{params}",
            self.cluster.port()
        )
    }

    /// `verify-full` against the test's CA, at 127.0.0.1.
    fn verified_url(&self) -> String {
        self.url(
            "postgres",
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={}", self.ca.ca().display()),
        )
    }
}

fn config(cluster: &str, holder: &str, port: u16, url: &str) -> String {
    let cache = guest_dir().join("../../leasehold-test-cache");
    format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n\n[database]\nurl = \"{url}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n\n\
         [[controllers]]\nname = \"scheduler\"\ncomponent = \"{}/scheduler.wasm\"\n\
         lease_ttl = \"2s\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n",
        cache.display(),
        guest_dir().display()
    )
}

/// The epoch `replica` leads the scheduler at, once it says it does.
async fn leads(replica: &Replica) -> Option<u64> {
    let leases = replica.leases().await?;
    leases
        .as_array()?
        .iter()
        .find(|l| l["name"] == "scheduler" && l["held_here"] == true)
        .and_then(|l| l["epoch"].as_u64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_on_a_tls_only_server_lead_write_and_hand_over_with_every_session_encrypted() {
    let setup = Setup::new(&["127.0.0.1", "localhost"]);
    let url = setup.verified_url();
    let cluster = format!("tls-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = Replica::start(
        setup.dir.path(),
        "a",
        port_a,
        &config(&cluster, "replica-a", port_a, &url),
    );
    a.wait_healthy(Duration::from_secs(60)).await;
    let first = eventually(
        "replica a leads the scheduler",
        Duration::from_secs(60),
        || leads(&a),
    )
    .await;
    // The standby starts once a leads, so that a, not whichever replica
    // won the first grant, is the one the handover below stops.
    let b = Replica::start(
        setup.dir.path(),
        "b",
        port_b,
        &config(&cluster, "replica-b", port_b, &url),
    );
    b.wait_healthy(Duration::from_secs(60)).await;

    // Writes through the API and by the guest.
    for (path, body) in [
        ("/v1/objects/nodes/n1", r#"{"capacity": 4}"#),
        ("/v1/objects/tasks/t1", r#"{"status": "pending"}"#),
    ] {
        let put = http::put(&a.addr, path, body).await.unwrap();
        assert!(put.status == 201, "{path}: {} {}", put.status, put.body);
    }
    eventually(
        "the scheduler assigns t1",
        Duration::from_secs(30),
        || async {
            let task = http::get(&b.addr, "/v1/objects/tasks/t1").await.ok()?;
            (task.json()["value"]["node"] == "n1").then_some(())
        },
    )
    .await;

    // Every session of both hosts is encrypted, as the server sees it.
    let sessions = setup.cluster.local_sql(
        DATABASE,
        "SELECT count(*) || ' ' || count(*) FILTER (WHERE s.ssl) \
           FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
          WHERE a.application_name LIKE 'leasehold%'",
    );
    let (all, encrypted) = sessions.split_once(' ').unwrap();
    assert!(all.parse::<u32>().unwrap() >= 4, "sessions: {sessions}");
    assert_eq!(all, encrypted, "every host session is TLS: {sessions}");
    // And as the hosts see it.
    let (_, ready) = a.readyz().await.expect("readyz");
    assert_eq!(
        ready["database"]["tls"]["encrypted"], true,
        "readyz: {ready}"
    );
    assert_eq!(a.metric("leasehold_db_tls{pool=\"main\"}").await, Some(1.0));
    assert_eq!(
        a.metric("leasehold_db_tls{pool=\"session\"}").await,
        Some(1.0)
    );

    // Handover: the leader releases on SIGTERM, the other leads above.
    a.signal("TERM");
    assert_eq!(a.exited(Duration::from_secs(30)).await, Some(0));
    let next = eventually(
        "replica b leads the scheduler",
        Duration::from_secs(30),
        || leads(&b),
    )
    .await;
    assert!(next > first, "epoch {next} after {first}");
    let put = http::put(&b.addr, "/v1/objects/tasks/t2", r#"{"status": "pending"}"#)
        .await
        .unwrap();
    assert_eq!(put.status, 201, "{}", put.body);
    eventually(
        "the new leader assigns t2",
        Duration::from_secs(30),
        || async {
            let task = http::get(&b.addr, "/v1/objects/tasks/t2").await.ok()?;
            (task.json()["value"]["node"] == "n1").then_some(())
        },
    )
    .await;
    let plain = setup.cluster.local_sql(
        DATABASE,
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
          WHERE a.application_name LIKE 'leasehold%' AND NOT s.ssl",
    );
    assert_eq!(plain, "0");
}

/// `leasehold migrate` against `url`: exit code and everything it printed.
fn migrate(url: &str) -> (i32, String) {
    let (code, out, err) = run_to_end(&["migrate", "--database-url", url], &[]);
    (code, format!("{out}{err}"))
}

#[tokio::test]
async fn certificates_that_do_not_verify_are_refused_at_once_naming_the_problem() {
    let setup = Setup::new(&["localhost"]);
    let other = Pki::new(setup.dir.path(), "other");
    let ca = setup.ca.ca();

    // Another CA: unknown issuer, at start, without retrying.
    let started = Instant::now();
    let (code, output) = migrate(&setup.url(
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", other.ca().display()),
    ));
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("unknown issuer"), "{output}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused after {:?}: retried?",
        started.elapsed()
    );

    // The certificate names localhost, not 127.0.0.1.
    let (code, output) = migrate(&setup.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ));
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("name mismatch"), "{output}");
    let (code, output) = migrate(&setup.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
    ));
    assert_eq!(code, 0, "verify-ca does not check the name: {output}");
    let (code, output) = migrate(&setup.url(
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ));
    assert_eq!(code, 0, "{output}");

    // The server takes no plaintext.
    let (code, output) = migrate(&setup.url("postgres", "127.0.0.1", "sslmode=disable"));
    assert_ne!(code, 0, "{output}");
    assert!(
        output.contains("demands an encrypted connection"),
        "{output}"
    );

    // A host refuses at start the same way, and says so in its log.
    let port = free_port();
    let cluster = format!("tls-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let bad = setup.url(
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", other.ca().display()),
    );
    let mut host = Replica::start(
        setup.dir.path(),
        "refused",
        port,
        &config(&cluster, "refused", port, &bad),
    );
    let code = host.exited(Duration::from_secs(20)).await;
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}");
    let log = host.log();
    assert!(log.contains("unknown issuer"), "{log}");
    assert!(!log.contains("retrying"), "{log}");
}

#[tokio::test]
async fn client_certificate_authentication_works_with_sslcert_and_sslkey() {
    let setup = Setup::new(&["localhost", "127.0.0.1"]);
    let client = setup.ca.client("certuser", "certuser");
    let ca = setup.ca.ca();
    let with_cert = setup.url(
        "certuser",
        "127.0.0.1",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            ca.display(),
            client.cert.display(),
            client.key.display()
        ),
    );
    let (code, output) = migrate(&with_cert);
    assert_eq!(code, 0, "{output}");
    let (code, output) = migrate(&setup.url(
        "certuser",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ));
    assert_ne!(code, 0, "without a client certificate: {output}");
    // The CLI reaches the database the same way.
    let (code, output, err) = run_to_end(
        &["leases", "--database-url", &with_cert, "--cluster", "any"],
        &[],
    );
    assert_eq!(code, 0, "{output}{err}");
}
