//! The provisioner's behaviour against the SDK's fake host, whose outbound
//! HTTP is answered by a small fenced receiver written here (the real one
//! is `leasehold-receiver`, exercised end to end in `tests/`).
// The fake host exists on native targets only; these tests are what
// `cargo test` runs there.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use leasehold_guest::http::Method;
use leasehold_guest::{At, FakeHost, Fault, HttpFault, HttpRecord, HttpReply, Reply};
use provisioner::{
    BUCKETS, Bucket, BucketSpec, CONFLICT_RETRY_AFTER, DEPROVISIONED, PROVISION_FAILED,
    PROVISIONED, Phase, Provisioner,
};
use serde_json::{Value, json};

const ENDPOINT: &str = "http://cloud.test:9000";
const URL: &str = "http://cloud.test:9000/buckets/photos";

/// A fenced receiver in miniature: the highest epoch accepted per lease
/// (409 "stale epoch" below it), answers stored by idempotency key, and a
/// count of effects applied.
#[derive(Debug, Default)]
struct Cloud {
    highest: HashMap<String, u64>,
    answers: HashMap<String, HttpReply>,
    /// (method, epoch, key) of each effect applied, in order.
    applied: Vec<(Method, u64, String)>,
    generation: u64,
}

impl Cloud {
    fn answer(&mut self, request: &HttpRecord) -> HttpReply {
        let lease = request
            .header("leasehold-lease")
            .unwrap_or_default()
            .to_string();
        let epoch: u64 = request
            .header("leasehold-epoch")
            .and_then(|e| e.parse().ok())
            .expect("the host stamps the epoch");
        let highest = self.highest.get(&lease).copied().unwrap_or(0);
        if epoch < highest {
            return HttpReply::json(409, &json!({ "error": "stale epoch", "highest": highest }));
        }
        let Some(key) = request.header("idempotency-key") else {
            return HttpReply::json(400, &json!({ "error": "idempotency-key is missing" }));
        };
        self.highest.insert(lease, epoch);
        if let Some(stored) = self.answers.get(key) {
            return stored.clone().header("idempotency-replayed", "true");
        }
        self.generation += 1;
        let reply = match request.method {
            Method::Put => HttpReply::json(
                201,
                &json!({
                    "name": "photos",
                    "spec": request.body_json(),
                    "generation": self.generation,
                    "applied_epoch": epoch,
                }),
            ),
            _ => HttpReply::json(
                200,
                &json!({ "deleted": true, "generation": self.generation }),
            ),
        };
        self.applied.push((request.method, epoch, key.to_string()));
        self.answers.insert(key.to_string(), reply.clone());
        reply
    }
}

/// A fake host whose `http_allow` lists the cloud, answered by a fresh
/// [`Cloud`].
fn host_with_cloud() -> (FakeHost, Rc<RefCell<Cloud>>) {
    let host = FakeHost::new();
    host.allow_http([format!("{ENDPOINT}/buckets/")]);
    let cloud = Rc::new(RefCell::new(Cloud::default()));
    let answering = cloud.clone();
    host.respond_with(&format!("{ENDPOINT}/buckets/*"), move |request| {
        answering.borrow_mut().answer(request)
    });
    (host, cloud)
}

fn spec(size_gb: u32) -> Value {
    json!({ "size_gb": size_gb, "region": "eu" })
}

fn seed(host: &FakeHost, size_gb: u32) -> u64 {
    host.seed(
        BUCKETS,
        "photos",
        &json!({ "spec": spec(size_gb), "endpoint": ENDPOINT, "owner": "team-a" }),
    )
}

fn photos(host: &FakeHost) -> Bucket {
    host.object::<Bucket>(BUCKETS, "photos")
        .expect("photos exists")
        .value
}

fn reconcile(host: &FakeHost) -> Reply {
    host.reconcile(&Provisioner, BUCKETS, "photos")
}

fn put_key(version: u64) -> String {
    format!("buckets/photos@{version}/put")
}

#[test]
fn a_new_bucket_is_put_once_and_its_status_recorded() {
    let (host, cloud) = host_with_cloud();
    let version = seed(&host, 10);

    assert_eq!(reconcile(&host), Reply::Done);
    let sent = host.http_requests();
    assert_eq!(sent.len(), 1);
    let put = &sent[0];
    assert_eq!((put.method, put.url.as_str()), (Method::Put, URL));
    assert_eq!(put.body_json(), Some(spec(10)));
    assert_eq!(
        put.header("idempotency-key"),
        Some(put_key(version).as_str())
    );
    assert_eq!(put.header("content-type"), Some("application/json"));
    assert_eq!(put.header("leasehold-epoch"), Some("1"));

    let bucket = photos(&host);
    let status = bucket.status.expect("a status");
    assert_eq!(status.phase, Phase::Ready);
    assert_eq!(
        status.applied_spec,
        Some(BucketSpec {
            size_gb: 10,
            region: "eu".into()
        })
    );
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(bucket.rest["owner"], "team-a", "other fields are kept");
    assert_eq!(host.events_with_reason(PROVISIONED).len(), 1);
    // One commit: the status, conditional on the version read.
    assert_eq!(host.commits().len(), 1);

    // In sync: a reconcile (the watch echo of our own commit, a resync)
    // costs no request.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.http_requests().len(), 1);
    assert_eq!(cloud.borrow().applied.len(), 1);
}

#[test]
fn a_changed_spec_is_a_new_put_with_a_new_key() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    assert_eq!(reconcile(&host), Reply::Done);
    let mut changed = serde_json::to_value(photos(&host)).expect("JSON");
    changed["spec"] = spec(20);
    let version = host.seed(BUCKETS, "photos", &changed);

    assert_eq!(reconcile(&host), Reply::Done);
    let sent = host.http_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].body_json(), Some(spec(20)));
    assert_eq!(
        sent[1].header("idempotency-key"),
        Some(put_key(version).as_str())
    );
    let status = photos(&host).status.expect("a status");
    assert_eq!(status.applied_spec.map(|s| s.size_gb), Some(20));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(cloud.borrow().applied.len(), 2);
}

#[test]
fn a_lost_answer_is_retried_with_the_same_key_and_applied_once() {
    let (host, cloud) = host_with_cloud();
    let version = seed(&host, 10);
    host.fail_next_http(HttpFault::ReplyLost);

    // The cloud applied it, the guest cannot know: it writes nothing and
    // fails, for the host to retry with backoff.
    match reconcile(&host) {
        Reply::Failed {
            message,
            retry_after,
        } => {
            assert!(message.contains("connection"), "{message}");
            assert_eq!(retry_after, None, "the host's backoff");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(photos(&host).status.is_none(), "no status it did not learn");
    assert!(host.commits().is_empty());
    assert_eq!(cloud.borrow().applied.len(), 1);

    // The retry carries the same key: the cloud replays its answer.
    assert_eq!(reconcile(&host), Reply::Done);
    let sent = host.http_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[1].header("idempotency-key"),
        sent[0].header("idempotency-key")
    );
    assert_eq!(
        sent[0].header("idempotency-key"),
        Some(put_key(version).as_str())
    );
    assert_eq!(cloud.borrow().applied.len(), 1, "applied exactly once");
    let status = photos(&host).status.expect("a status");
    assert_eq!(status.observed_generation, Some(1));
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("replayed")),
        "{status:?}"
    );
}

#[test]
fn a_successor_completes_a_predecessors_unanswered_put_with_the_same_key() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    host.fail_next_http(HttpFault::ReplyTimedOut);
    assert!(matches!(reconcile(&host), Reply::Failed { .. }));

    // The leader dies; the next tenure starts from the store, where
    // nothing says the bucket was applied.
    host.new_tenure();
    assert_eq!(reconcile(&host), Reply::Done);
    let sent = host.http_requests();
    assert_eq!(
        sent.iter()
            .map(|r| (r.epoch, r.header("idempotency-key").map(str::to_string)))
            .collect::<Vec<_>>(),
        vec![(1, Some(put_key(1))), (2, Some(put_key(1)))]
    );
    assert_eq!(cloud.borrow().applied, vec![(Method::Put, 1, put_key(1))]);
    let commits = host.commits();
    assert_eq!(commits.len(), 1);
    assert_eq!(
        commits[0].epoch, 2,
        "the tenure that learned the outcome records it"
    );
}

#[test]
fn a_stale_epoch_at_the_cloud_stops_the_guest() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    // A newer tenure of this lease already acted at the cloud.
    cloud
        .borrow_mut()
        .highest
        .insert("test/controller".into(), 5);

    assert_eq!(reconcile(&host), Reply::Fenced);
    assert!(photos(&host).status.is_none());
    assert!(host.commits().is_empty());
    assert!(cloud.borrow().applied.is_empty());
}

#[test]
fn a_409_that_is_not_a_stale_epoch_is_retried() {
    let host = FakeHost::new();
    host.allow_http([ENDPOINT]);
    host.respond(
        URL,
        HttpReply::json(409, &json!({ "error": "bucket is being migrated" })),
    );
    seed(&host, 10);
    match reconcile(&host) {
        Reply::Failed { message, .. } => assert!(message.contains("409"), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(photos(&host).status.is_none());
}

#[test]
fn a_lease_lost_before_the_request_sends_nothing() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    host.fail_next_http(HttpFault::Fenced);
    assert_eq!(reconcile(&host), Reply::Fenced);
    assert!(host.http_requests().is_empty());
    assert!(cloud.borrow().applied.is_empty());
    assert!(host.commits().is_empty());
}

#[test]
fn a_lease_lost_at_the_status_commit_stops_the_guest() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    host.fail(At::Commit(1), Fault::Fenced);
    assert_eq!(reconcile(&host), Reply::Fenced);
    // Applied at the cloud, not recorded: the successor replays it.
    assert_eq!(cloud.borrow().applied.len(), 1);
    host.new_tenure();
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(cloud.borrow().applied.len(), 1);
    assert!(photos(&host).status.is_some());
}

#[test]
fn a_cloud_not_in_http_allow_is_a_failure_and_nothing_is_sent() {
    let host = FakeHost::new();
    seed(&host, 10);
    match reconcile(&host) {
        Reply::Failed { message, .. } => assert!(message.contains("http_allow"), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(host.http_requests().is_empty());
    assert!(photos(&host).status.is_none());
}

#[test]
fn server_errors_are_retried_and_retry_after_is_honoured() {
    let host = FakeHost::new();
    host.allow_http([ENDPOINT]);
    host.respond_once(URL, HttpReply::text(503, "maintenance"));
    host.respond_once(
        URL,
        HttpReply::json(429, &json!({ "error": "slow down" })).header("Retry-After", "7"),
    );
    seed(&host, 10);
    match reconcile(&host) {
        Reply::Failed {
            message,
            retry_after,
        } => {
            assert!(
                message.contains("503") && message.contains("maintenance"),
                "{message}"
            );
            assert_eq!(retry_after, None);
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(
        reconcile(&host),
        Reply::Failed {
            message: format!("{URL} answered 429: slow down; retrying"),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
    assert!(photos(&host).status.is_none());
    assert!(host.commits().is_empty());
}

#[test]
fn a_refused_spec_is_recorded_and_waits_for_a_change() {
    let host = FakeHost::new();
    host.allow_http([ENDPOINT]);
    host.respond_once(
        URL,
        HttpReply::json(400, &json!({ "error": "region eu is full" })),
    );
    host.respond(
        URL,
        HttpReply::json(200, &json!({ "name": "photos", "generation": 1 })),
    );
    seed(&host, 10);

    assert_eq!(reconcile(&host), Reply::Done);
    let status = photos(&host).status.expect("a status");
    assert_eq!(status.phase, Phase::Failed);
    assert_eq!(status.rejected_spec.map(|s| s.size_gb), Some(10));
    assert_eq!(status.applied_spec, None);
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("region eu is full")),
        "{:?}",
        status.message
    );
    assert_eq!(host.events_with_reason(PROVISION_FAILED).len(), 1);

    // Not retried while the spec is the one refused.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.http_requests().len(), 1);

    // A new spec is tried.
    let mut changed = serde_json::to_value(photos(&host)).expect("JSON");
    changed["spec"] = spec(5);
    host.seed(BUCKETS, "photos", &changed);
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.http_requests().len(), 2);
    let status = photos(&host).status.expect("a status");
    assert_eq!((status.phase, status.rejected_spec), (Phase::Ready, None));
}

#[test]
fn a_status_commit_that_conflicts_requeues_and_looks_again() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    // The user changes the spec while the PUT is out.
    host.before(At::Commit(1), |host| {
        host.seed(
            BUCKETS,
            "photos",
            &json!({ "spec": spec(30), "endpoint": ENDPOINT }),
        );
    });
    assert_eq!(reconcile(&host), Reply::RequeueAfter(CONFLICT_RETRY_AFTER));
    assert!(
        photos(&host).status.is_none(),
        "nothing recorded from a stale read"
    );

    // The next reconcile decides again from the new version: a new key.
    assert_eq!(reconcile(&host), Reply::Done);
    let sent = host.http_requests();
    assert_eq!(sent.len(), 2);
    assert_ne!(
        sent[0].header("idempotency-key"),
        sent[1].header("idempotency-key")
    );
    assert_eq!(
        photos(&host)
            .status
            .and_then(|s| s.applied_spec)
            .map(|s| s.size_gb),
        Some(30)
    );
    assert_eq!(cloud.borrow().applied.len(), 2);
}

#[test]
fn deleting_deletes_at_the_cloud_then_the_object() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    assert_eq!(reconcile(&host), Reply::Done);
    let mut value = serde_json::to_value(photos(&host)).expect("JSON");
    value["deleting"] = json!(true);
    let version = host.seed(BUCKETS, "photos", &value);

    // The answer is lost once: the retry replays, then the object goes.
    host.fail_next_http(HttpFault::ReplyLost);
    assert!(matches!(reconcile(&host), Reply::Failed { .. }));
    assert!(host.object::<Value>(BUCKETS, "photos").is_some());
    assert_eq!(reconcile(&host), Reply::Done);

    let sent = host.http_requests();
    let deletes: Vec<&HttpRecord> = sent.iter().filter(|r| r.method == Method::Delete).collect();
    assert_eq!(deletes.len(), 2);
    let key = format!("buckets/photos@{version}/delete");
    assert!(
        deletes
            .iter()
            .all(|r| r.header("idempotency-key") == Some(key.as_str()) && r.url == URL)
    );
    assert_eq!(
        cloud
            .borrow()
            .applied
            .iter()
            .filter(|(m, _, _)| *m == Method::Delete)
            .count(),
        1
    );
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());
    assert_eq!(host.events_with_reason(DEPROVISIONED).len(), 1);
}

#[test]
fn deleting_a_bucket_the_cloud_never_had_still_fences_the_cloud() {
    let host = FakeHost::new();
    host.allow_http([ENDPOINT]);
    host.respond(URL, HttpReply::json(404, &json!({ "error": "no bucket" })));
    host.seed(
        BUCKETS,
        "photos",
        &json!({ "spec": spec(1), "endpoint": ENDPOINT, "deleting": true }),
    );
    assert_eq!(reconcile(&host), Reply::Done);
    // The DELETE went out (raising the cloud's epoch mark) although there
    // was nothing to delete, and the object is gone.
    assert_eq!(host.http_requests().len(), 1);
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());
}

#[test]
fn a_stale_epoch_on_delete_stops_the_guest_and_keeps_the_object() {
    let (host, cloud) = host_with_cloud();
    host.seed(
        BUCKETS,
        "photos",
        &json!({ "spec": spec(1), "endpoint": ENDPOINT, "deleting": true }),
    );
    cloud
        .borrow_mut()
        .highest
        .insert("test/controller".into(), 9);
    assert_eq!(reconcile(&host), Reply::Fenced);
    assert!(host.object::<Value>(BUCKETS, "photos").is_some());
}

#[test]
fn absent_and_malformed_objects_are_left_alone() {
    let (host, _cloud) = host_with_cloud();
    assert_eq!(reconcile(&host), Reply::Done);
    host.seed(
        BUCKETS,
        "photos",
        &json!({ "spec": { "size_gb": "big" }, "endpoint": ENDPOINT }),
    );
    assert_eq!(reconcile(&host), Reply::Done);
    host.seed(
        BUCKETS,
        "photos",
        &json!({ "spec": spec(1), "endpoint": "ftp://cloud.test" }),
    );
    assert_eq!(reconcile(&host), Reply::Done);
    assert!(host.http_requests().is_empty());
    assert!(host.commits().is_empty());
    let warnings: Vec<String> = host
        .logs()
        .into_iter()
        .map(|l| l.message)
        .filter(|m| m.starts_with("skipping buckets/photos"))
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
}
