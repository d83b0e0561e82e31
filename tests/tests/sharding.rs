//! Sharding recorded with the leases and enforced across hosts (issue 36,
//! item 5): real `leasehold` processes on PostgreSQL, each with its own
//! config.
//!
//! - a second host started with another `shards` count refuses to lead
//!   the controller's leases, saying why in `/readyz` and its log (what is
//!   recorded, by which holder, and what it has), and still refuses once
//!   the first host released them; `leasehold check` with its config says
//!   the same;
//! - the documented count change (docs/operations.md, "Changing a
//!   controller's sharding"): `leasehold reshard` is refused while a lease
//!   is held; with the controller removed from every host's config and
//!   reloaded, it records the new count, and the hosts lead and reconcile
//!   with it;
//! - an unsharded controller `x-1` on one host and `x` of 2 shards on
//!   another never share the lease `x-1`;
//! - a guest whose description is not the one its leases are led under
//!   fails its start instead of reconciling by it.
//!
//! Every wait is bounded; order comes from what the processes report.

use std::time::Duration;

use leasehold_host::testing::TestDatabase;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use leasehold_tests::{TempDir, guest_dir, http};
use serde_json::Value;

/// Room for a debug build starting on two busy cores.
const START: Duration = Duration::from_secs(90);
/// Bound on a lease changing hands, a reload or a refusal showing.
const SETTLE: Duration = Duration::from_secs(20);

/// A host's config: `controllers` as (name, component, extra keys).
fn config(
    cluster: &str,
    holder: &str,
    port: u16,
    url: &str,
    controllers: &[(&str, &str, &str)],
) -> String {
    let guests = guest_dir();
    let cache = guest_dir().join("../../leasehold-test-cache");
    let mut text = format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n\n[database]\nurl = \"{url}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n",
        cache.display()
    );
    for (name, component, extra) in controllers {
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"{name}\"\ncomponent = \"{}/{component}.wasm\"\n\
             lease_ttl = \"2s\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n\
             backoff_min = \"100ms\"\nbackoff_max = \"1s\"\n{extra}\n",
            guests.display()
        ));
    }
    text
}

fn cluster() -> String {
    format!("shd-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

async fn sql(db: &TestDatabase) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    client
}

/// Every tenure `holder` was ever granted in `cluster`.
async fn tenures_of(db: &TestDatabase, cluster: &str, holder: &str) -> Vec<String> {
    sql(db)
        .await
        .query(
            "SELECT lease FROM leasehold_tenures WHERE cluster = $1 AND holder = $2",
            &[&cluster, &holder],
        )
        .await
        .expect("read the tenures")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Who holds each of `leases` now (not released, not expired), if all are
/// held.
async fn all_held(db: &TestDatabase, cluster: &str, leases: &[&str]) -> Option<Vec<String>> {
    let rows = sql(db)
        .await
        .query(
            "SELECT name, holder FROM leasehold_leases
              WHERE cluster = $1 AND NOT released AND expires_at > clock_timestamp()",
            &[&cluster],
        )
        .await
        .expect("read the leases");
    leases
        .iter()
        .map(|lease| {
            rows.iter()
                .find(|r| r.get::<_, String>(0) == *lease)
                .map(|r| r.get::<_, String>(1))
        })
        .collect()
}

/// Wait until every lease of `leases` is held, by `holder` when given.
async fn until_held(db: &TestDatabase, cluster: &str, leases: &[&str], holder: Option<&str>) {
    let what = format!("{leases:?} are held by {}", holder.unwrap_or("anyone"));
    eventually(&what, START, || async {
        let holders = all_held(db, cluster, leases).await?;
        holders
            .iter()
            .all(|h| holder.is_none_or(|want| h == want))
            .then_some(())
    })
    .await;
}

/// `replica`'s `/readyz` once each of `leases` is failing with a reason
/// containing `needle(lease)`; returns the reasons by lease.
async fn refusals(
    replica: &Replica,
    leases: &[&str],
    needle: impl Fn(&str) -> String,
) -> (u16, Vec<String>) {
    let what = format!("{} refuses {leases:?}", replica.name);
    eventually(&what, START, || async {
        let (code, body) = replica.readyz().await?;
        let reasons: Option<Vec<String>> = leases
            .iter()
            .map(|lease| {
                let state = &body["controllers"][*lease];
                let reason = state["reason"].as_str()?;
                (state["state"] == "failing" && reason.contains(&needle(lease)))
                    .then(|| reason.to_string())
            })
            .collect();
        reasons.map(|r| (code, r))
    })
    .await
}

/// SIGHUP `replica` after writing `text` as its config, and wait until it
/// logged the reload.
async fn reload(replica: &mut Replica, text: &str) {
    let needle = "config reloaded";
    let before = replica.log().matches(needle).count();
    replica.set_config(text);
    replica.signal("HUP");
    eventually(&format!("{} reloads", replica.name), SETTLE, || async {
        (replica.log().matches(needle).count() > before).then_some(())
    })
    .await;
}

fn assert_contains(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
}

/// A host with `shards = 3` beside one that recorded `shards = 2` leads
/// none of the controller's leases and says why, also once they are free;
/// `leasehold check` with its config names both.
#[tokio::test]
async fn a_second_host_with_another_shard_count_refuses_to_lead_and_says_why() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let (pa, pb) = (free_port(), free_port());
    let with = |holder: &str, port: u16, shards: u32| {
        let extra = format!("shards = {shards}");
        config(
            &cluster,
            holder,
            port,
            db.url(),
            &[("r", "rollout", extra.as_str())],
        )
    };
    let mut a = Replica::start(dir.path(), "host-a", pa, &with("host-a", pa, 2));
    until_held(&db, &cluster, &["r-0", "r-1"], Some("host-a")).await;

    let b = Replica::start(dir.path(), "host-b", pb, &with("host-b", pb, 3));
    let (code, reasons) = refusals(&b, &["r-0", "r-1", "r-2"], |lease| {
        format!("refusing to lead lease {cluster}/{lease} (")
    })
    .await;
    assert_eq!(code, 503, "a host that leads nothing it runs is not ready");
    let both = [
        "of controller r: the database records controller r as 2 shards (leases r-0 … r-1) \
         by kind/name",
        "recorded by holder host-a at ",
        "this host runs it as 3 shards (leases r-0 … r-2) by kind/name",
        "leasehold reshard",
    ];
    assert_contains(&reasons[0], &both);
    assert_contains(&reasons[0], &["(epoch 1)"]);
    assert_contains(&reasons[2], &["(never granted)"]);
    let log = b.log();
    assert_contains(
        &log,
        &[
            "refusing to lead: the sharding recorded for the lease is not this host's",
            &format!("refusing to lead lease {cluster}/r-2 (never granted) of controller r"),
        ],
    );

    // `leasehold check` with host-b's config sees it; with host-a's, the
    // config runs the controller as recorded.
    let b_config = b.config.display().to_string();
    let (code, _, err) = run_to_end(&["check", "--config", &b_config], &[]);
    assert_ne!(code, 0, "check passed a config the record refuses:\n{err}");
    assert_contains(
        &err,
        &[
            "controller r: the database records it as 2 shards (leases r-0 … r-1)",
            "recorded by holder host-a",
            "this config runs it as 3 shards (leases r-0 … r-2)",
        ],
    );
    let a_config = a.config.display().to_string();
    let (code, out, err) = run_to_end(&["check", "--config", &a_config], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_contains(&out, &["controller r: runs as the database records it"]);

    // host-a stops and releases its leases; host-b judges them again after
    // that and still takes none.
    let judged = |log: &str| {
        log.matches(&format!("refusing to lead lease {cluster}/r-0 (epoch 1)"))
            .count()
    };
    a.signal("TERM");
    assert_eq!(a.exited(SETTLE).await, Some(0), "{}", a.log_tail(20));
    let before = judged(&b.log());
    eventually("host-b judges r-0 after the release", SETTLE, || async {
        (judged(&b.log()) > before).then_some(())
    })
    .await;
    assert_eq!(
        tenures_of(&db, &cluster, "host-b").await,
        Vec::<String>::new()
    );
    let (_, ready) = b.readyz().await.expect("host-b answers");
    assert_eq!(ready["controllers"]["r-1"]["state"], "failing", "{ready}");
}

/// The procedure of docs/operations.md, "Changing a controller's
/// sharding", from 2 shards on two hosts to 3.
#[tokio::test]
async fn the_documented_count_change_moves_a_controller_to_a_new_count() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let (pa, pb) = (free_port(), free_port());
    let with = |holder: &str, port: u16, shards: Option<u32>| {
        let extra = shards.map(|n| format!("shards = {n}"));
        let controllers: Vec<(&str, &str, &str)> = match &extra {
            Some(extra) => vec![("r", "rollout", extra.as_str())],
            None => Vec::new(),
        };
        config(&cluster, holder, port, db.url(), &controllers)
    };
    let mut a = Replica::start(dir.path(), "host-a", pa, &with("host-a", pa, Some(2)));
    let mut b = Replica::start(dir.path(), "host-b", pb, &with("host-b", pb, Some(2)));
    until_held(&db, &cluster, &["r-0", "r-1"], None).await;

    // The new config, kept beside host-a's.
    let next = dir.path().join("next.toml");
    std::fs::write(&next, with("host-a", pa, Some(3))).unwrap();
    let next = next.display().to_string();
    // Refused while its leases are held, naming the lease and its holder.
    let (code, out, err) = run_to_end(&["reshard", "--config", &next, "r"], &[]);
    assert_ne!(code, 0, "{out}");
    assert_contains(
        &err,
        &[
            "refusing to change the sharding of controller r: its lease ",
            " is held by host-",
            "records it as 2 shards (leases r-0 … r-1)",
        ],
    );

    // 1. Remove it from every host's config and reload: its leases are
    //    released.
    reload(&mut a, &with("host-a", pa, None)).await;
    reload(&mut b, &with("host-b", pb, None)).await;
    let a_config = a.config.display().to_string();
    let (code, out, err) = run_to_end(&["leases", "--config", &a_config, "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let leases: Value = serde_json::from_str(&out).expect("leases print JSON");
    let leases = leases.as_array().unwrap();
    assert!(
        leases.len() == 2 && leases.iter().all(|l| l["released"] == true),
        "{leases:?}"
    );
    // 2. Record the new count.
    let (code, out, err) = run_to_end(&["reshard", "--config", &next, "r"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_contains(
        &out,
        &[
            "controller r: recorded as 3 shards (leases r-0 … r-2) by kind/name",
            "was 2 shards (leases r-0 … r-1) by kind/name",
            "recorded by holder host-",
        ],
    );
    // 3. Every host runs it with the new count.
    reload(&mut a, &with("host-a", pa, Some(3))).await;
    reload(&mut b, &with("host-b", pb, Some(3))).await;
    until_held(&db, &cluster, &["r-0", "r-1", "r-2"], None).await;
    let put = |name: String| {
        let addr = a.addr.clone();
        async move {
            let body = "{\"current\": \"v1\", \"desired\": \"v2\", \"steps\": [\"v1\", \"v2\"]}";
            let r = http::put(&addr, &format!("/v1/objects/services/{name}"), body)
                .await
                .unwrap();
            assert!(r.status == 200 || r.status == 201, "{name}: {}", r.status);
        }
    };
    for i in 0..6 {
        put(format!("s-{i}")).await;
    }
    eventually("every service reached v2", SETTLE, || async {
        let r = http::get(&a.addr, "/v1/objects/services").await.ok()?;
        let items = r.json()["items"].as_array()?.clone();
        (items.len() == 6 && items.iter().all(|s| s["value"]["current"] == "v2")).then_some(())
    })
    .await;
    // Without a config, `leasehold leases` names each shard from the
    // database's record.
    let (code, out, err) = run_to_end(
        &[
            "leases",
            "--database-url",
            db.url(),
            "--cluster",
            &cluster,
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let leases: Value = serde_json::from_str(&out).unwrap();
    for lease in leases.as_array().unwrap() {
        let name = lease["name"].as_str().unwrap();
        let index: u32 = name.trim_start_matches("r-").parse().unwrap();
        assert_eq!(
            lease["shard"],
            serde_json::json!({"controller": "r", "index": index, "count": 3}),
            "{lease}"
        );
    }
}

/// An unsharded controller `x-1` on one host and shard 1 of `x` on
/// another never share the lease `x-1`.
#[tokio::test]
async fn an_unsharded_x_1_and_shard_1_of_x_never_share_a_lease_across_hosts() {
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let cluster = cluster();
    let (pa, pb) = (free_port(), free_port());
    let a = Replica::start(
        dir.path(),
        "host-a",
        pa,
        &config(
            &cluster,
            "host-a",
            pa,
            db.url(),
            &[("x", "rollout", "shards = 2")],
        ),
    );
    until_held(&db, &cluster, &["x-0", "x-1"], Some("host-a")).await;
    let b = Replica::start(
        dir.path(),
        "host-b",
        pb,
        &config(&cluster, "host-b", pb, db.url(), &[("x-1", "rollout", "")]),
    );
    let (_, reasons) = refusals(&b, &["x-1"], |lease| {
        format!("refusing to lead lease {cluster}/{lease} (epoch 1) of controller x-1")
    })
    .await;
    assert_contains(
        &reasons[0],
        &[
            "the database records lease x-1 as shard 1 of 2 of controller x",
            "recorded by holder host-a",
            "this host runs it as the lease of the unsharded controller x-1",
            "Two controllers never share a lease",
        ],
    );
    assert_eq!(
        tenures_of(&db, &cluster, "host-b").await,
        Vec::<String>::new()
    );
    assert!(a.holds("x-1").await, "host-a keeps shard 1 of x");
}

/// A guest that describes another shard label or other every-shard kinds
/// than its leases are led under fails its start, naming both; the same
/// description starts.
#[tokio::test]
async fn a_guest_that_describes_other_sharding_than_its_leases_fails_its_start() {
    use leasehold_host::runtime::{GuestError, GuestLimits, Runtime};
    use leasehold_host::shard::Shard;
    use leasehold_tests::MemoryBackends;

    let runtime = Runtime::new(&leasehold_host::runtime::EngineConfig {
        max_guests: 2,
        memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
        pooling: false,
        cache_dir: Some(guest_dir().join("../../leasehold-test-cache")),
    })
    .expect("engine");
    let scheduler = runtime
        .load(
            "scheduler",
            &leasehold_tests::guest("scheduler"),
            GuestLimits::default(),
            Vec::new(),
        )
        .expect("compile the scheduler");
    let backends = MemoryBackends::new();
    let grant = backends.grant("east", "scheduler-0", "host-a").await;
    let shard = Shard { index: 0, count: 2 };
    let describe = |led: Vec<String>| {
        let unit = scheduler.clone().with_shard(shard).led_under(None, led);
        let fence = grant.fence.clone();
        let store = backends.store.clone();
        async move {
            let revocation = unit.revocation();
            let mut guest = unit
                .instantiate(fence, store, Default::default(), revocation)
                .await
                .expect("instantiate");
            guest.describe().await
        }
    };
    // The scheduler watches nodes on every shard; led as if it did not.
    match describe(Vec::new()).await {
        Err(GuestError::Described {
            controller,
            fence,
            problem,
        }) => {
            assert_eq!(controller, "scheduler");
            assert!(
                fence.contains("east/scheduler-0") && fence.contains("epoch 1"),
                "{fence}"
            );
            assert_contains(
                &problem,
                &[
                    "every-shard kinds [\"nodes\"]",
                    "led under the label None and kinds []",
                ],
            );
        }
        other => panic!("expected the start to fail, got {other:?}"),
    }
    let described = describe(vec!["nodes".to_string()]).await.expect("starts");
    assert_eq!(described.every_shard, ["nodes"]);
}
