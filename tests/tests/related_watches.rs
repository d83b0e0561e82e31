//! Related watches through the real boundary: the `v020` fixture (raw
//! bindings of `wit/0.2.0/controller.wit`, `leasehold:controller@0.2.0`)
//! describes `parts` mapped
//! to their owning note and `tags` mapped through a label to the note they
//! name; a real host, on the embedded backend and on PostgreSQL,
//! reconciles the note with the reason `related` when such an object is
//! written or deleted through the HTTP API.

use std::time::Duration;

use leasehold_host::runtime::{RelatedMap, RelatedWatch};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::harness::ComponentHarness;
use leasehold_tests::process::{Replica, eventually, free_port, run_to_end};
use leasehold_tests::{TempDir, guest, http};
use serde_json::Value;

const CLUSTER: &str = "related";

/// The label the fixture maps `tags` through.
const TAG_LABEL: &str = "v020.test/note";

/// The fixture's description crosses the WIT as it was written.
#[tokio::test]
async fn the_description_carries_the_related_watches() {
    let mut harness = ComponentHarness::load("v020").await;
    let description = harness.describe().await;
    assert_eq!(description.watches, ["notes", "items"]);
    assert_eq!(
        description.related,
        [
            RelatedWatch {
                kind: "parts".into(),
                map: RelatedMap::Owner {
                    kind: Some("notes".into()),
                },
            },
            RelatedWatch {
                kind: "tags".into(),
                map: RelatedMap::Label {
                    key: TAG_LABEL.into(),
                    target_kind: "notes".into(),
                },
            },
        ]
    );
}

fn config(port: u16, database: Option<&str>) -> String {
    let database = database
        .map(|url| format!("\n[database]\nurl = \"{url}\"\n"))
        .unwrap_or_default();
    format!(
        "cluster = \"{CLUSTER}\"\n{database}\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n\
         [[controllers]]\nname = \"notes\"\ncomponent = \"{}\"\n",
        guest("v020").display()
    )
}

/// `reads/NAME`, the fixture's record of its last reconcile of
/// `notes/NAME`, once `ready` holds for it.
async fn read_when(replica: &Replica, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/v1/objects/reads/{name}");
    eventually(
        &format!("reads/{name} is written as expected"),
        Duration::from_secs(30),
        || async {
            let response = http::get(&replica.addr, &path).await.ok()?;
            if response.status != 200 {
                return None;
            }
            let value = response.json()["value"].clone();
            ready(&value).then_some(value)
        },
    )
    .await
}

/// A user's write of value and metadata.
async fn put_with(replica: &Replica, path: &str, body: &str) {
    let response = http::request(
        &replica.addr,
        "PUT",
        path,
        &[("Content-Type", "application/vnd.leasehold.object+json")],
        Some(body),
    )
    .await
    .unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    assert!(
        response.status == 200 || response.status == 201,
        "PUT {path}: {response:?}"
    );
}

/// The clock reading of a `reads` record: every reconcile writes a new one.
fn at(read: &Value) -> u64 {
    read["now_unix_ms"].as_u64().unwrap()
}

async fn owner_and_label_changes_reconcile_the_note(database: Option<&str>) {
    let dir = TempDir::new();
    let port = free_port();
    let mut replica = Replica::start(dir.path(), "a", port, &config(port, database));
    replica.wait_healthy(Duration::from_secs(60)).await;
    for name in ["n1", "n2"] {
        let put = http::put(&replica.addr, &format!("/v1/objects/notes/{name}"), "{}")
            .await
            .expect("put a note");
        assert!(put.status == 200 || put.status == 201, "{put:?}");
    }
    let first = read_when(&replica, "n1", |v| v["reason"] != "related").await;
    read_when(&replica, "n2", |v| v["reason"] != "related").await;

    // A part owned by n1, created through the API: n1 is reconciled as
    // related.
    put_with(
        &replica,
        "/v1/objects/parts/p1",
        r#"{"value": {}, "owner": {"kind": "notes", "name": "n1"}}"#,
    )
    .await;
    let created = read_when(&replica, "n1", |v| {
        v["reason"] == "related" && at(v) > at(&first)
    })
    .await;

    // Deleting the part wakes its owner again.
    let deleted = http::request(&replica.addr, "DELETE", "/v1/objects/parts/p1", &[], None)
        .await
        .expect("delete parts/p1");
    assert_eq!(deleted.status, 204, "{deleted:?}");
    read_when(&replica, "n1", |v| {
        v["reason"] == "related" && at(v) > at(&created)
    })
    .await;

    // A tag whose label names n2: n2 is reconciled as related. Moving the
    // label to n1 wakes both.
    let label = |note: &str| format!(r#"{{"value": {{}}, "labels": {{"{TAG_LABEL}": "{note}"}}}}"#);
    put_with(&replica, "/v1/objects/tags/t1", &label("n2")).await;
    let tagged = read_when(&replica, "n2", |v| v["reason"] == "related").await;
    let n1_before = read_when(&replica, "n1", |_| true).await;
    put_with(&replica, "/v1/objects/tags/t1", &label("n1")).await;
    read_when(&replica, "n2", |v| {
        v["reason"] == "related" && at(v) > at(&tagged)
    })
    .await;
    read_when(&replica, "n1", |v| {
        v["reason"] == "related" && at(v) > at(&n1_before)
    })
    .await;
    replica.kill().await;
}

#[tokio::test]
async fn owned_and_labelled_changes_reconcile_their_note_on_the_memory_backend() {
    owner_and_label_changes_reconcile_the_note(None).await;
}

#[tokio::test]
async fn owned_and_labelled_changes_reconcile_their_note_on_postgresql() {
    let db = TestDatabase::create().await;
    owner_and_label_changes_reconcile_the_note(Some(db.url())).await;
}

/// `leasehold check` asks the component what it watches and refuses a
/// related watch of a malformed kind or label key, naming the controller
/// and what is wrong; the same component with well-formed watches passes
/// and the note lists them.
#[test]
fn check_refuses_malformed_related_watches() {
    let dir = TempDir::new();
    let path = dir.path().join("leasehold.toml");
    let good = config(free_port(), None);
    std::fs::write(&path, &good).unwrap();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("controller notes: watches [\"notes\", \"items\"], related: parts by owner of kind notes; tags by label v020.test/note naming notes"),
        "{stdout}"
    );

    let bad = format!("{good}[controllers.settings]\nbad_related = true\n");
    std::fs::write(&path, &bad).unwrap();
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("controller notes: related watch of kind \"Bad_Kind\"")
            && stderr.contains("Bad_Kind"),
        "{stderr}"
    );
}
