//! OpenTelemetry traces of a real `leasehold` process, received by an
//! OTLP/HTTP receiver inside the test (JSON bodies at `/v1/traces`): the
//! reconcile span with its attributes, the store calls it made as its
//! children, the lease acquisition, and the trace context of an API write
//! (`traceparent`) carried through the change feed to the reconcile the
//! write triggers. The host is stopped before the spans are read, so what
//! was received is what its shutdown flushed at the latest.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use leasehold_host::store::{ObjectKey, PostgresStore, Store};
use leasehold_host::telemetry::{self, TraceParent};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::process::{Replica, eventually, free_port};
use leasehold_tests::{MemoryBackends, TempDir, guest_dir, http};
use serde_json::Value;

/// Longest a start may take: compiling a component in a debug build on two
/// busy cores.
const START: Duration = Duration::from_secs(90);

/// The caller's trace: the test plays a client that traces its own write.
const TRACE_ID: &str = "5b8efff798038103d269b633813fc60c";
const CALLER_SPAN: &str = "eee19b7ec3c1b174";

/// One span as exported.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
}

impl Span {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// An attribute's value as text, whatever its OTLP JSON type.
fn any_value(value: &Value) -> String {
    for kind in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        if let Some(v) = value.get(kind) {
            return match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
        }
    }
    value.to_string()
}

/// Every span of one export request body.
fn spans_of(body: &Value) -> Vec<Span> {
    let mut spans = Vec::new();
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    for resource in body["resourceSpans"].as_array().into_iter().flatten() {
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let attributes = span["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| (text(a, "key"), any_value(&a["value"])))
                    .collect();
                spans.push(Span {
                    name: text(span, "name"),
                    trace_id: text(span, "traceId").to_lowercase(),
                    span_id: text(span, "spanId").to_lowercase(),
                    parent: text(span, "parentSpanId").to_lowercase(),
                    attributes,
                });
            }
        }
    }
    spans
}

/// The receiver: every export request's body, parsed.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Value>>>);

impl Received {
    fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap().iter().flat_map(spans_of).collect()
    }
}

async fn export(State(received): State<Received>, body: Bytes) -> (StatusCode, &'static str) {
    match serde_json::from_slice::<Value>(&body) {
        Ok(value) => {
            received.0.lock().unwrap().push(value);
            (StatusCode::OK, "{}")
        }
        Err(_) => (StatusCode::BAD_REQUEST, "{}"),
    }
}

/// An OTLP/HTTP receiver on a loopback port; stops with the test's
/// runtime.
async fn receiver() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(export))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), received)
}

fn config(cluster: &str, port: u16, url: &str, collector: &str) -> String {
    let cache = guest_dir().join("../../leasehold-test-cache");
    format!(
        "cluster = \"{cluster}\"\nholder = \"traced\"\n\n[database]\nurl = \"{url}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n\n\
         [telemetry]\notlp_endpoint = \"{collector}\"\nsample_ratio = 1.0\n\n\
         [[controllers]]\nname = \"scheduler\"\ncomponent = \"{}/scheduler.wasm\"\n",
        cache.display(),
        guest_dir().display()
    )
}

#[tokio::test]
async fn reconciles_store_calls_and_leases_are_traced_from_the_api_write_on() {
    let (collector, received) = receiver().await;
    let db = TestDatabase::create().await;
    let dir = TempDir::new();
    let port = free_port();
    let cluster = format!(
        "traced-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut host = Replica::start(
        dir.path(),
        "traced",
        port,
        &config(&cluster, port, db.url(), &collector),
    );
    host.wait_healthy(START).await;
    eventually("the host leads the scheduler", START, || async {
        host.leads("scheduler").await.filter(|l| *l)
    })
    .await;

    let node = http::put(&host.addr, "/v1/objects/nodes/n1", r#"{"capacity": 2}"#)
        .await
        .unwrap();
    assert_eq!(node.status, 201, "{}", node.body);
    // A first task, assigned once the guest's worker runs: from then on
    // every write reaches it through the change feed (not the worker's
    // first resync, which carries no write's context).
    let first = http::put(
        &host.addr,
        "/v1/objects/tasks/t0",
        r#"{"status": "pending"}"#,
    )
    .await
    .unwrap();
    assert_eq!(first.status, 201, "{}", first.body);
    eventually("the scheduler assigns the first task", START, || async {
        let task = http::get(&host.addr, "/v1/objects/tasks/t0").await.ok()?;
        (task.json()["value"]["status"] == "assigned").then_some(())
    })
    .await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let task = http::request(
        &host.addr,
        "PUT",
        "/v1/objects/tasks/t1",
        &[("traceparent", &traceparent)],
        Some(r#"{"status": "pending"}"#),
    )
    .await
    .unwrap();
    assert_eq!(task.status, 201, "{}", task.body);
    eventually("the scheduler assigns the task", START, || async {
        let task = http::get(&host.addr, "/v1/objects/tasks/t1").await.ok()?;
        (task.json()["value"]["status"] == "assigned").then_some(())
    })
    .await;

    // Whichever reconcile assigned it (tasks/t1's own, or one of nodes/n1
    // that found it pending), its commit changed watched objects, and the
    // reconciles those changes woke are that commit's children: wait until
    // one was exported (spans are sent every few seconds) before stopping.
    let woken = |spans: &[Span]| {
        spans.iter().any(|s| {
            s.name == "reconcile"
                && spans.iter().any(|c| {
                    c.name == "store.commit" && c.span_id == s.parent && c.trace_id == s.trace_id
                })
        })
    };
    let deadline = tokio::time::Instant::now() + START;
    while !woken(&received.spans()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no commit woke a reconcile in its trace: {:#?}",
            received.spans()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A clean stop flushes every span still queued.
    host.signal("TERM");
    assert_eq!(host.exited(START).await, Some(0), "{}", host.log_tail(30));
    let spans = received.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();

    // The write itself: a child of the caller's span, in the caller's trace.
    let write = spans
        .iter()
        .find(|s| s.name == "api.write" && s.attribute("name") == Some("t1"))
        .unwrap_or_else(|| panic!("no api.write span of tasks/t1 among {names:?}"));
    assert_eq!(write.trace_id, TRACE_ID);
    assert_eq!(write.parent, CALLER_SPAN);
    assert_eq!(write.attribute("method"), Some("PUT"));

    // The reconcile the write triggered: in the caller's trace, the write's
    // child, with its attributes.
    let reconcile = spans
        .iter()
        .find(|s| {
            s.name == "reconcile"
                && s.attribute("kind") == Some("tasks")
                && s.attribute("name") == Some("t1")
                && s.attribute("reason") == Some("change")
                && s.trace_id == TRACE_ID
        })
        .unwrap_or_else(|| {
            panic!("no reconcile of tasks/t1 in the caller's trace {TRACE_ID}: {spans:#?}")
        });
    assert_eq!(reconcile.parent, write.span_id, "{reconcile:?}");
    assert_eq!(reconcile.attribute("controller"), Some("scheduler"));
    assert_eq!(reconcile.attribute("lease"), Some("scheduler"));
    assert_eq!(reconcile.attribute("object"), Some("tasks/t1"));
    assert!(
        reconcile
            .attribute("epoch")
            .and_then(|e| e.parse::<u64>().ok())
            .is_some_and(|e| e >= 1),
        "{reconcile:?}"
    );
    assert!(
        matches!(reconcile.attribute("outcome"), Some("done" | "requeue")),
        "{reconcile:?}"
    );

    // Its host calls are its children: it read the task.
    let children = |parent: &Span| -> Vec<Span> {
        spans
            .iter()
            .filter(|s| s.parent == parent.span_id && s.trace_id == parent.trace_id)
            .cloned()
            .collect()
    };
    let read: Vec<String> = children(reconcile).into_iter().map(|s| s.name).collect();
    assert!(
        read.iter().any(|n| n == "store.get"),
        "no store.get under the reconcile of tasks/t1: {read:?}"
    );
    // The reconcile that assigned the task committed under its own span,
    // and the changes of that commit woke reconciles as its children.
    let commit = spans
        .iter()
        .find(|c| {
            c.name == "store.commit"
                && c.attribute("outcome") == Some("ok")
                && spans
                    .iter()
                    .any(|r| r.name == "reconcile" && r.span_id == c.parent)
        })
        .unwrap_or_else(|| panic!("no store.commit under a reconcile: {spans:#?}"));
    assert!(
        spans
            .iter()
            .any(|r| r.name == "reconcile" && r.parent == commit.span_id),
        "no reconcile woken by {commit:?}"
    );

    // The lease was acquired: a span of its own, with the epoch.
    let acquired = spans
        .iter()
        .find(|s| s.name == "lease.acquire")
        .unwrap_or_else(|| panic!("no lease.acquire span among {names:?}"));
    assert_eq!(acquired.attribute("controller"), Some("scheduler"));
    assert_eq!(acquired.attribute("lease"), Some("scheduler"));
    assert_eq!(acquired.attribute("holder"), Some("traced"));
    assert_eq!(acquired.attribute("epoch"), reconcile.attribute("epoch"));
}

/// What the change feed of `store` hands back of the trace context a
/// write was made with, for an API write with one, an API write without,
/// and a write whose context was set on another task.
async fn feed_carries_the_write_context(store: &dyn Store) {
    let cluster = "traced";
    let key = |name: &str| ObjectKey {
        kind: "tasks".into(),
        name: name.into(),
    };
    let context = TraceParent::parse(&format!("00-{TRACE_ID}-{CALLER_SPAN}-01"));
    assert!(context.is_some());
    telemetry::with_write_context(
        context.clone(),
        store.put(cluster, &key("with"), "{}", None),
    )
    .await
    .unwrap();
    store
        .put(cluster, &key("without"), "{}", None)
        .await
        .unwrap();
    // A context is the writing task's own: another task's write has none.
    let elsewhere = tokio::spawn({
        let context = context.clone();
        async move { telemetry::with_write_context(context, async {}).await }
    });
    elsewhere.await.unwrap();
    store.put(cluster, &key("after"), "{}", None).await.unwrap();
    let page = store
        .changes(cluster, &["tasks".to_string()], 0, 100)
        .await
        .unwrap();
    let seen: Vec<(String, Option<TraceParent>)> = page
        .changes
        .into_iter()
        .map(|c| (c.name, c.traceparent))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("with".to_string(), context),
            ("without".to_string(), None),
            ("after".to_string(), None),
        ]
    );
}

#[tokio::test]
async fn the_change_feed_hands_back_each_writes_trace_context_on_every_backend() {
    feed_carries_the_write_context(MemoryBackends::new().store.as_ref()).await;
    let db = TestDatabase::create().await;
    feed_carries_the_write_context(&PostgresStore::new(db.database(2))).await;
}
