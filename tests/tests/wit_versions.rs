//! The WIT as a versioned contract, and what `leasehold:controller@0.2.0`
//! gives guests besides the store.
//!
//! - A component built from the 0.1.0 WIT (`tests/fixtures/v010`, raw
//!   bindings of `wit/0.1.0/controller.wit`) runs unchanged next to a
//!   0.2.0 component (`v020`, raw bindings of `wit/0.2.0/controller.wit`),
//!   a 0.3.0 one (`v030`, raw bindings of `wit/0.3.0/controller.wit`) and a
//!   0.4.0 one (`misbehaving`, raw bindings of the current text), on one
//!   engine and one store, in process and in a real `leasehold` process.
//! - A component of a version no host supports (`future-world`, 0.5.0) is
//!   refused by the runtime, by `leasehold check` and at start, with a
//!   message naming the version it targets and the supported ones.
//! - `[controllers.settings]` reaches a 0.2.0 guest as JSON, typed with
//!   serde, and a reload (SIGHUP) with new settings restarts the
//!   controller so its next instance reads them; the guest reads the host's
//!   wall clock.
//! - A 0.2.0 guest reads an object's metadata, status, generation and
//!   deletion mark through the host, and writes a finalizer, an owned
//!   object with labels, a status at the generation it read and a check,
//!   all through the fenced commit path and the store's own rules; and
//!   lists a kind selectively (labels, JSON containment) through the host;
//!   the metadata round trip runs on the memory and PostgreSQL backends.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_host::authority::postgres::PostgresAuthority;
use leasehold_host::authority::{AcquireRequest, Acquired, Authority, ExpectedIdentity};
use leasehold_host::fence::LeaseKey;
use leasehold_host::runtime::{
    CommitCounters, CompiledController, EngineConfig, GuestLimits, ReconcileReason, Reconciled,
    Runtime, Settings, WorldVersion,
};
use leasehold_host::store::{ApiWrite, Metadata, ObjectKey, Origin, PostgresStore, Store, Written};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use leasehold_tests::{MemoryBackends, TempDir, guest, http};
use serde_json::{Value, json};

/// The SDK's limits, compiled from its own source (this crate does not
/// depend on the SDK): the settings bound both sides enforce must agree.
#[allow(dead_code)]
#[path = "../../guest-sdk/src/limits.rs"]
mod sdk_limits;

const CLUSTER: &str = "wv";

fn runtime() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Runtime::new(&EngineConfig {
                max_guests: 8,
                memory_bytes: 64 << 20,
                pooling: false,
                cache_dir: None,
            })
            .expect("engine")
        })
        .clone()
}

fn load(name: &str, file: &str, limits: GuestLimits) -> CompiledController {
    runtime()
        .load(name, &guest(file), limits, Vec::new())
        .unwrap_or_else(|e| panic!("load {file}: {e}"))
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: kind.into(),
        name: name.into(),
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[test]
fn the_sdk_and_the_host_bound_settings_alike() {
    assert_eq!(
        sdk_limits::MAX_SETTINGS_BYTES,
        leasehold_host::limits::MAX_SETTINGS_BYTES
    );
}

#[tokio::test]
async fn a_010_component_runs_unchanged_next_to_020_components() {
    let old = load("old", "v010", GuestLimits::default());
    let settings =
        Settings::from_json(r#"{"greeting": "hello", "regions": ["eu", "us"]}"#).expect("settings");
    let new = load(
        "new",
        "v020",
        GuestLimits {
            settings: settings.clone(),
            ..GuestLimits::default()
        },
    );
    let raw = load("raw", "misbehaving", GuestLimits::default());
    let sharded = load("sharded", "v030", GuestLimits::default());
    assert_eq!(old.world(), WorldVersion::V0_1_0);
    assert_eq!(new.world(), WorldVersion::V0_2_0);
    assert_eq!(sharded.world(), WorldVersion::V0_3_0);
    // The raw-bindings fixture builds from the current text: 0.4.0.
    assert_eq!(raw.world(), WorldVersion::V0_4_0);

    // One store, four leases, four instances alive at once.
    let backends = MemoryBackends::new();
    let mut guests = Vec::new();
    for compiled in [&old, &new, &raw, &sharded] {
        let grant = backends.grant(CLUSTER, compiled.name(), "host-a").await;
        let instance = compiled
            .instantiate(
                grant.fence.clone(),
                backends.store.clone(),
                Arc::new(CommitCounters::default()),
                compiled.revocation(),
            )
            .await
            .unwrap_or_else(|e| panic!("instantiate {}: {e}", compiled.name()));
        guests.push((grant.fence, instance));
    }
    let [
        (old_fence, old_guest),
        (_, new_guest),
        (_, raw_guest),
        (sharded_fence, sharded_guest),
    ] = &mut guests[..]
    else {
        unreachable!()
    };
    // The 0.3.0 guest: its description's shard label, and the tenure's
    // shard (0 of 1: unsharded) read through the 0.3.0 types.
    let described = sharded_guest.describe().await.unwrap();
    assert_eq!(described.watches, ["cmd"]);
    assert_eq!(described.shard_label.as_deref(), Some("v030.test/tenant"));
    assert_eq!(described.settings_schema, None);
    assert_eq!(
        sharded_guest.reconcile("cmd", "one").await.unwrap(),
        Reconciled::Done
    );
    let mark = backends
        .store
        .get(CLUSTER, &key("marks", "v030-one"))
        .await
        .unwrap()
        .expect("the 0.3.0 guest's commit landed");
    assert_eq!(
        serde_json::from_str::<Value>(&mark.value).unwrap(),
        json!({"shard": 0, "count": 1, "epoch": sharded_fence.epoch.0})
    );
    assert_eq!(old_guest.describe().await.unwrap().watches, ["notes"]);
    assert_eq!(
        new_guest.describe().await.unwrap().watches,
        ["notes", "items"]
    );
    assert_eq!(raw_guest.describe().await.unwrap().watches, ["cmd"]);

    for name in ["a", "b"] {
        backends
            .store
            .put(CLUSTER, &key("notes", name), r#"{"text":"hi"}"#, None)
            .await
            .unwrap();
    }
    let note = backends
        .store
        .get(CLUSTER, &key("notes", "a"))
        .await
        .unwrap()
        .unwrap();

    // The 0.1.0 guest: get, list (paged), tenure, commit with an event,
    // logging, and a failure with its retry, all through the 0.1.0 types.
    assert_eq!(
        old_guest.reconcile("notes", "a").await.unwrap(),
        Reconciled::Done
    );
    let echo = backends
        .store
        .get(CLUSTER, &key("echoes", "a"))
        .await
        .unwrap()
        .expect("the 0.1.0 guest's commit landed");
    let echo: Value = serde_json::from_str(&echo.value).unwrap();
    assert_eq!(
        echo,
        json!({
            "note": { "text": "hi" },
            "note_version": note.version,
            "epoch": old_fence.epoch.0,
            "pages": 2,
        })
    );
    assert_eq!(
        backends
            .store
            .written_by(CLUSTER, &key("echoes", "a"))
            .unwrap(),
        Some(Origin::Guest {
            lease: "old".into(),
            epoch: old_fence.epoch,
            holder: "host-a".into(),
        })
    );
    let events = backends.store.events(CLUSTER, 0, 100).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.reason == "Echoed" && e.kind == "echoes" && e.name == "a"),
        "{events:?}"
    );
    backends
        .store
        .put(CLUSTER, &key("notes", "b"), r#""fail""#, None)
        .await
        .unwrap();
    assert_eq!(
        old_guest.reconcile("notes", "b").await.unwrap(),
        Reconciled::Failed {
            message: "notes/b asked to fail".into(),
            retry_after: Some(Duration::from_millis(7)),
        }
    );

    // The 0.2.0 guest, in the same store: settings and the wall clock.
    let before = unix_ms(SystemTime::now());
    assert_eq!(
        new_guest.reconcile("notes", "a").await.unwrap(),
        Reconciled::Done
    );
    let after = unix_ms(SystemTime::now());
    let read = backends
        .store
        .get(CLUSTER, &key("reads", "a"))
        .await
        .unwrap()
        .expect("the 0.2.0 guest's commit landed");
    let read: Value = serde_json::from_str(&read.value).unwrap();
    assert_eq!(read["note"], json!({ "text": "hi" }));
    assert_eq!(
        read["settings"],
        json!({ "greeting": "hello", "regions": ["eu", "us"] })
    );
    assert_eq!(read["greeting"], "hello");
    assert_eq!(read["reason"], "change");
    let now = read["now_unix_ms"].as_u64().expect("a clock reading");
    assert!(
        (before..=after).contains(&now),
        "the guest's wall clock read {now}, outside [{before}, {after}]"
    );
    // Its timer: a wake-up 5 s after the clock it read.
    backends
        .store
        .put(CLUSTER, &key("notes", "a"), r#"{"wake_in_ms":5000}"#, None)
        .await
        .unwrap();
    match new_guest.reconcile("notes", "a").await.unwrap() {
        Reconciled::RequeueAfter(delay) => assert!(
            delay <= Duration::from_secs(5) && delay > Duration::from_secs(4),
            "{delay:?}"
        ),
        other => panic!("expected a requeue, got {other:?}"),
    }
    // Every reason reaches the 0.2.0 guest as the host gave it.
    for reason in [
        ReconcileReason::Requeue,
        ReconcileReason::Resync,
        ReconcileReason::Retry,
        ReconcileReason::Change,
    ] {
        new_guest
            .reconcile_because("notes", "a", reason)
            .await
            .unwrap();
        let read = backends
            .store
            .get(CLUSTER, &key("reads", "a"))
            .await
            .unwrap()
            .expect("written");
        let read: Value = serde_json::from_str(&read.value).unwrap();
        assert_eq!(read["reason"], reason.as_str());
    }
    // The 0.1.0 guest is called as before, whatever the reason: it has no
    // such argument.
    assert_eq!(
        old_guest
            .reconcile_because("notes", "a", ReconcileReason::Retry)
            .await
            .unwrap(),
        Reconciled::Done
    );

    // The raw 0.4.0 guest still works beside them.
    assert_eq!(
        raw_guest.reconcile("cmd", "ok").await.unwrap(),
        Reconciled::Done
    );
    assert!(
        backends
            .store
            .get(CLUSTER, &key("marks", "m-1"))
            .await
            .unwrap()
            .is_some()
    );

    // The 0.1.0 guest once more, after the others ran: nothing of theirs
    // leaked into it.
    assert_eq!(
        old_guest.reconcile("notes", "a").await.unwrap(),
        Reconciled::Done
    );
}

/// The finalizer the v020 fixture keeps on its items.
const HOLD: &str = "v020.test/hold";

#[tokio::test]
async fn a_020_guest_reads_metadata_and_status_and_writes_finalizers_status_and_checks() {
    let compiled = load("items", "v020", GuestLimits::default());
    let backends = MemoryBackends::new();
    let grant = backends.grant(CLUSTER, compiled.name(), "host-a").await;
    metadata_through_the_host(&compiled, backends.store.clone(), grant.fence.clone()).await;
    assert_eq!(
        backends
            .store
            .written_by(CLUSTER, &key("seen", "a"))
            .unwrap(),
        Some(Origin::Guest {
            lease: "items".into(),
            epoch: grant.fence.epoch,
            holder: "host-a".into(),
        })
    );
}

#[tokio::test]
async fn a_020_guest_reads_metadata_and_status_and_writes_them_on_postgresql() {
    let compiled = load("items", "v020", GuestLimits::default());
    let db = TestDatabase::create().await;
    let authority = PostgresAuthority::new(db.database(2), ExpectedIdentity::default());
    let request = AcquireRequest {
        key: LeaseKey::new(CLUSTER, compiled.name()),
        holder: "host-a".into(),
        ttl: Duration::from_secs(60),
    };
    let fence = match authority.acquire(&request).await.expect("acquire") {
        Acquired::Granted(grant) => grant.fence,
        Acquired::Held { holder, .. } => panic!("held by {holder}"),
    };
    let store: Arc<dyn Store> = Arc::new(PostgresStore::new(db.database(4)));
    metadata_through_the_host(&compiled, store, fence).await;
}

/// The v020 guest's items, driven through the host on `store` under
/// `fence`: what it reads of metadata, status, generation and the deletion
/// mark, and what its finalizer, owned child, status write and check do.
async fn metadata_through_the_host(
    compiled: &CompiledController,
    store: Arc<dyn Store>,
    fence: leasehold_host::fence::Fence,
) {
    let mut guest = compiled
        .instantiate(
            fence,
            store.clone(),
            Arc::new(CommitCounters::default()),
            compiled.revocation(),
        )
        .await
        .expect("instantiate");
    let get = async |kind: &str, name: &str| store.get(CLUSTER, &key(kind, name)).await.unwrap();
    let json = |text: &str| serde_json::from_str::<Value>(text).unwrap();

    let gate = store
        .put(CLUSTER, &key("gates", "main"), "{}", None)
        .await
        .unwrap()
        .version;
    let labels = Metadata {
        labels: [("team".to_string(), "db".to_string())].into(),
        ..Metadata::default()
    };
    store
        .write(
            CLUSTER,
            &ApiWrite::Put {
                key: key("items", "a"),
                value: json!({ "gate_version": gate }).to_string(),
                meta: Some(labels),
                expected_version: None,
            },
        )
        .await
        .unwrap();

    // First reconcile: it saw the labels, no finalizers, generation 1, no
    // status; it added its finalizer, created an owned, labelled child and
    // wrote the status at the generation the finalizer made.
    assert_eq!(
        guest.reconcile("items", "a").await.unwrap(),
        Reconciled::Done
    );
    let seen = json(&get("seen", "a").await.expect("seen").value);
    assert_eq!(seen["labels"], json!({ "team": "db" }));
    assert_eq!(seen["finalizers"], json!([]));
    assert_eq!(seen["owner"], Value::Null);
    assert_eq!(
        (seen["generation"].clone(), seen["status"].clone()),
        (json!(1), Value::Null)
    );
    assert_eq!(seen["deleting"], false);
    let item = get("items", "a").await.expect("item");
    assert_eq!(item.meta.finalizers, [HOLD]);
    assert_eq!(item.meta.labels["team"], "db", "labels kept by the guest");
    assert_eq!(item.generation, 2);
    assert_eq!(
        item.status.as_deref().map(json),
        Some(json!({ "phase": "held", "observed": 2 }))
    );
    let child = get("children", "a").await.expect("the owned child");
    assert_eq!(child.meta.owner, Some(key("items", "a")));
    assert_eq!(child.meta.labels["parent"], "a");

    // Second reconcile: it reads back what it wrote, through the host.
    assert_eq!(
        guest.reconcile("items", "a").await.unwrap(),
        Reconciled::Done
    );
    let seen = json(&get("seen", "a").await.expect("seen").value);
    assert_eq!(seen["finalizers"], json!([HOLD]));
    assert_eq!(seen["generation"], 2);
    assert_eq!(seen["status"], json!({ "phase": "held", "observed": 2 }));

    // The gate moves: the guest's check fails its whole commit.
    store
        .put(CLUSTER, &key("gates", "main"), r#"{"moved":true}"#, None)
        .await
        .unwrap();
    let seen_before = get("seen", "a").await.expect("seen").version;
    match guest.reconcile("items", "a").await.unwrap() {
        Reconciled::Failed { message, .. } => {
            assert!(message.contains("gates/main"), "{message}")
        }
        other => panic!("the check should fail the reconcile, got {other:?}"),
    }
    assert_eq!(
        get("seen", "a").await.expect("seen").version,
        seen_before,
        "nothing of the checked commit was written"
    );

    // A user's delete: the finalizer holds the item, the owned child is
    // collected at once; the guest sees the mark and lets the item go.
    let gate = get("gates", "main").await.expect("gate").version;
    store
        .put(
            CLUSTER,
            &key("items", "a"),
            &json!({ "gate_version": gate }).to_string(),
            None,
        )
        .await
        .unwrap();
    let marked = store
        .write(
            CLUSTER,
            &ApiWrite::Delete {
                key: key("items", "a"),
                expected_version: None,
            },
        )
        .await
        .unwrap();
    let since = match marked {
        Written::Marked(object) => object.deleting_since.expect("marked"),
        other => panic!("the finalizer should hold the item, got {other:?}"),
    };
    assert!(
        get("children", "a").await.is_none(),
        "collected with its owner"
    );
    assert_eq!(
        guest.reconcile("items", "a").await.unwrap(),
        Reconciled::Done
    );
    let seen = json(&get("seen", "a").await.expect("seen").value);
    assert_eq!(seen["deleting"], true);
    assert_eq!(
        seen["deleting_since_ms"],
        json!(since.timestamp_millis()),
        "the mark's time, in milliseconds"
    );
    assert!(
        get("items", "a").await.is_none(),
        "removing the last finalizer removed it"
    );
}

#[tokio::test]
async fn a_020_guest_lists_selectively_through_the_host() {
    let compiled = load("selects", "v020", GuestLimits::default());
    let backends = MemoryBackends::new();
    let store = backends.store.clone();
    let grant = backends.grant(CLUSTER, compiled.name(), "host-a").await;
    let mut guest = compiled
        .instantiate(
            grant.fence.clone(),
            store.clone(),
            Arc::new(CommitCounters::default()),
            compiled.revocation(),
        )
        .await
        .expect("instantiate");
    let team = |name: &str| Metadata {
        labels: [("team".to_string(), name.to_string())].into(),
        ..Metadata::default()
    };
    let items = [
        (
            "a",
            json!({ "select": { "labels": { "team": "db" }, "contains": { "color": "red" } } }),
            team("db"),
        ),
        ("b", json!({ "color": "red", "size": 1 }), team("db")),
        ("c", json!({ "color": "blue" }), team("db")),
        ("d", json!({ "color": "red" }), team("web")),
        ("e", json!({ "color": "red" }), Metadata::default()),
        (
            "f",
            json!({ "select": { "labels": { "-bad": "x" } } }),
            Metadata::default(),
        ),
    ];
    for (name, value, meta) in items {
        store
            .write(
                CLUSTER,
                &ApiWrite::Put {
                    key: key("items", name),
                    value: value.to_string(),
                    meta: Some(meta),
                    expected_version: None,
                },
            )
            .await
            .unwrap();
    }
    assert_eq!(
        guest.reconcile("items", "a").await.unwrap(),
        Reconciled::Done
    );
    let seen = store
        .get(CLUSTER, &key("seen", "a"))
        .await
        .unwrap()
        .expect("seen");
    let seen: Value = serde_json::from_str(&seen.value).unwrap();
    assert_eq!(seen["selected"], json!(["b"]), "labels and containment");
    // A selector the store refuses fails the guest's read, naming it.
    match guest.reconcile("items", "f").await.unwrap() {
        Reconciled::Failed { message, .. } => {
            assert!(message.contains("selector"), "{message}")
        }
        other => panic!("the bad selector should fail the reconcile, got {other:?}"),
    }
}

#[tokio::test]
async fn settings_that_do_not_fit_the_guests_type_fail_its_reconcile_without_quoting_them() {
    let compiled = load(
        "picky",
        "v020",
        GuestLimits {
            settings: Settings::from_json(r#"{"max_notes": "hunter2-9c4"}"#).unwrap(),
            ..GuestLimits::default()
        },
    );
    let backends = MemoryBackends::new();
    let grant = backends.grant(CLUSTER, "picky", "host-a").await;
    let mut instance = compiled
        .instantiate(
            grant.fence,
            backends.store.clone(),
            Arc::default(),
            compiled.revocation(),
        )
        .await
        .unwrap();
    backends
        .store
        .put(CLUSTER, &key("notes", "a"), "1", None)
        .await
        .unwrap();
    match instance.reconcile("notes", "a").await.unwrap() {
        Reconciled::Failed { message, .. } => {
            assert!(
                message.contains("settings do not have the expected shape"),
                "{message}"
            );
            assert!(!message.contains("hunter2"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_component_of_an_unknown_version_is_refused_by_name() {
    let error = match runtime().load(
        "future",
        &guest("future_world"),
        GuestLimits::default(),
        Vec::new(),
    ) {
        Ok(compiled) => panic!("a 0.5.0 component was accepted as {}", compiled.world()),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("controller future"), "{error}");
    assert!(error.contains("future_world.wasm"), "{error}");
    assert!(
        error.contains("it targets leasehold:controller@0.5.0"),
        "{error}"
    );
    assert!(
        error.contains(
            "this host supports leasehold:controller@0.1.0, leasehold:controller@0.2.0, \
             leasehold:controller@0.3.0 and leasehold:controller@0.4.0"
        ),
        "{error}"
    );
}

/// A config on the embedded backend running `controllers` (name,
/// component file, extra TOML lines).
fn config(port: u16, controllers: &[(&str, &str, &str)]) -> String {
    let mut text = format!("cluster = \"{CLUSTER}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n");
    for (name, file, extra) in controllers {
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"{name}\"\ncomponent = \"{}\"\n{extra}\n",
            guest(file).display()
        ));
    }
    text
}

#[test]
fn check_names_the_version_of_each_refused_component() {
    let dir = TempDir::new();
    let path = dir.path().join("leasehold.toml");
    let both = config(
        free_port(),
        &[
            ("old", "v010", ""),
            ("new", "v020", "[controllers.settings]\ngreeting = \"hi\"\n"),
        ],
    );
    std::fs::write(&path, &both).unwrap();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("check passed"), "{stdout}");

    let future = config(free_port(), &[("future", "future_world", "")]);
    std::fs::write(&path, &future).unwrap();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("controller future")
            && stderr.contains("it targets leasehold:controller@0.5.0")
            && stderr.contains("leasehold:controller@0.1.0, leasehold:controller@0.2.0, leasehold:controller@0.3.0 and leasehold:controller@0.4.0"),
        "{stderr}"
    );

    // Settings are checked too, without their values in the message.
    let bad = config(
        free_port(),
        &[("new", "v020", "settings = \"hunter2-41f\"\n")],
    );
    std::fs::write(&path, &bad).unwrap();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("settings must be a table"), "{stderr}");
    assert!(!stderr.contains("hunter2") && !stdout.contains("hunter2"));
}

#[tokio::test]
async fn run_refuses_to_start_a_component_of_an_unknown_version() {
    let dir = TempDir::new();
    let port = free_port();
    let mut replica = Replica::start(
        dir.path(),
        "future",
        port,
        &config(port, &[("future", "future_world", "")]),
    );
    let code = replica.exited(Duration::from_secs(60)).await;
    assert!(
        matches!(code, Some(code) if code != 0),
        "exit {code:?}\n{}",
        replica.log_tail(20)
    );
    let log = replica.log();
    assert!(
        log.contains("it targets leasehold:controller@0.5.0")
            && log.contains("leasehold:controller@0.1.0, leasehold:controller@0.2.0, leasehold:controller@0.3.0 and leasehold:controller@0.4.0"),
        "{log}"
    );
}

/// The object `kind/name` from the replica's API once it satisfies
/// `ready`.
async fn object_when(
    replica: &Replica,
    kind: &str,
    name: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/v1/objects/{kind}/{name}");
    eventually(
        &format!("{kind}/{name} is written as expected"),
        Duration::from_secs(30),
        || async {
            let response = http::get(&replica.addr, &path).await.ok()?;
            if response.status != 200 {
                return None;
            }
            let object = response.json();
            ready(&object["value"]).then_some(object["value"].clone())
        },
    )
    .await
}

#[tokio::test]
async fn a_real_host_runs_both_worlds_and_reloads_settings_on_sighup() {
    let dir = TempDir::new();
    let port = free_port();
    let with_greeting = |greeting: &str| {
        config(
            port,
            &[
                ("old", "v010", ""),
                (
                    "new",
                    "v020",
                    &format!(
                        "[controllers.settings]\ngreeting = \"{greeting}\"\nsince = 2026-01-02T03:04:05Z\n"
                    ),
                ),
            ],
        )
    };
    let mut replica = Replica::start(dir.path(), "a", port, &with_greeting("hello"));
    replica.wait_healthy(Duration::from_secs(60)).await;

    let put = http::put(&replica.addr, "/v1/objects/notes/a", r#"{"text":"one"}"#)
        .await
        .expect("put notes/a");
    assert!(put.status == 200 || put.status == 201, "{put:?}");
    let echo = object_when(&replica, "echoes", "a", |v| v["note"]["text"] == "one").await;
    assert_eq!(echo["pages"], 1);
    let read = object_when(&replica, "reads", "a", |v| v["note"]["text"] == "one").await;
    assert_eq!(read["greeting"], "hello");
    assert_eq!(read["settings"]["since"], "2026-01-02T03:04:05Z");

    // New settings: the reload restarts `new` (and only it), whose next
    // instance reads them.
    let before = replica.log().matches("config reloaded").count();
    replica.set_config(&with_greeting("bonjour"));
    replica.signal("HUP");
    eventually(
        "the config is reloaded",
        Duration::from_secs(30),
        || async { (replica.log().matches("config reloaded").count() > before).then_some(()) },
    )
    .await;
    let put = http::put(&replica.addr, "/v1/objects/notes/b", r#"{"text":"two"}"#)
        .await
        .expect("put notes/b");
    assert!(put.status == 200 || put.status == 201, "{put:?}");
    let read = object_when(&replica, "reads", "b", |v| v["note"]["text"] == "two").await;
    assert_eq!(read["greeting"], "bonjour");
    let echo = object_when(&replica, "echoes", "b", |v| v["note"]["text"] == "two").await;
    assert_eq!(echo["pages"], 2);
    let log = replica.log();
    assert!(
        !log.contains("bonjour") && !log.contains("hello"),
        "settings reached the log:\n{log}"
    );
    replica.kill().await;
}

/// A 0.4.0 component that declares the shape of its settings (the
/// `caller` fixture: `timeout_ms`, `endpoint`, nothing else) has its
/// `[controllers.settings]` checked: `leasehold check` and the start
/// refuse a mistyped key and a value of the wrong type, naming each key and
/// never a value; a reload (SIGHUP) to such settings is refused and the
/// controller runs on; `check` warns about a URL `http_allow` does not
/// cover.
#[tokio::test]
async fn settings_that_do_not_fit_the_declared_schema_are_refused_naming_each_key() {
    let dir = TempDir::new();
    let path = dir.path().join("leasehold.toml");
    let port = free_port();
    let caller = |settings: &str| {
        config(
            port,
            &[(
                "calls",
                "caller",
                &format!(
                    "http_allow = [\"http://127.0.0.1:9/hooks\"]\n[controllers.settings]\n{settings}"
                ),
            )],
        )
    };
    let check = |text: String| {
        std::fs::write(&path, text).unwrap();
        run_to_end(&["check", "--config", path.to_str().unwrap()], &[])
    };

    let (code, stdout, stderr) = check(caller(
        "timout_ms = 5\nendpoint = 8080\nsecret_hint = \"hunter2-7d1\"\n",
    ));
    assert_ne!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for expected in [
        "controller calls: [controllers.settings] do not fit its schema: settings.timout_ms: \
         unknown key (the settings have endpoint, timeout_ms)",
        "controller calls: [controllers.settings] do not fit its schema: settings.endpoint: \
         expected string or null, found an integer",
        "settings.secret_hint: unknown key",
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in:\n{stderr}");
    }
    assert!(!format!("{stdout}{stderr}").contains("hunter2"), "{stderr}");

    // Settings that fit pass; a URL outside http_allow is warned about.
    let (code, stdout, stderr) = check(caller(
        "timeout_ms = 5\nendpoint = \"https://elsewhere.example.com/v1?key=hunter2\"\n",
    ));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains(
            "settings.endpoint (https://elsewhere.example.com/v1) is an http(s) URL \
                         its http_allow does not cover"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("hunter2"), "{stdout}");

    // The start refuses what check refuses.
    let mut refused = Replica::start(dir.path(), "refused", port, &caller("timout_ms = 5\n"));
    let code = refused.exited(Duration::from_secs(60)).await;
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}");
    assert!(
        refused.log().contains("settings.timout_ms: unknown key"),
        "{}",
        refused.log()
    );

    // A running host keeps its settings when a reload brings wrong ones.
    let mut running = Replica::start(dir.path(), "running", port, &caller("timeout_ms = 5\n"));
    running.wait_healthy(Duration::from_secs(60)).await;
    eventually("calls leads", Duration::from_secs(60), || {
        running.leads("calls")
    })
    .await;
    running.set_config(&caller("timeout_ms = \"soon\"\n"));
    running.signal("HUP");
    eventually("the reload is refused", Duration::from_secs(60), || async {
        running
            .log()
            .contains("settings.timeout_ms: expected integer or null, found a string")
            .then_some(())
    })
    .await;
    assert_eq!(running.leads("calls").await, Some(true));
    running.signal("TERM");
    assert_eq!(running.exited(Duration::from_secs(30)).await, Some(0));
}
