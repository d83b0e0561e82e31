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
use leasehold_guest::{
    At, ConditionStatus, EventType, FakeHost, Fault, HttpFault, HttpRecord, HttpReply, Metadata,
    Object, Reply, get_condition,
};
use provisioner::{
    BUCKET_FINALIZER, BUCKETS, BucketSpec, BucketStatus, CONFLICT_RETRY_AFTER,
    DELETE_REFUSED_RETRY_AFTER, DEPROVISIONED, PROVISION_FAILED, PROVISIONED, PROVISIONING, Phase,
    Provisioner, READY,
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

fn value(size_gb: u32) -> Value {
    json!({ "spec": spec(size_gb), "endpoint": ENDPOINT, "owner": "team-a" })
}

/// A user's write of the bucket object; returns its version.
fn seed(host: &FakeHost, size_gb: u32) -> u64 {
    host.seed(BUCKETS, "photos", &value(size_gb))
}

fn photos(host: &FakeHost) -> Object<Value> {
    host.object::<Value>(BUCKETS, "photos")
        .expect("photos exists")
}

/// The provisioner's record: the object's status part.
fn status(host: &FakeHost) -> Option<BucketStatus> {
    photos(host)
        .status::<BucketStatus>()
        .expect("a BucketStatus")
}

fn reconcile(host: &FakeHost) -> Reply {
    host.reconcile(&Provisioner, BUCKETS, "photos")
}

/// The incarnation of the bucket these tests seed: the version the
/// finalizer's commit gave it (the seed took revision 1 and its change
/// position 2: the fake numbers as the host does, with gaps).
const INCARNATION: u64 = 3;

/// The key of the `PUT` of `generation`'s spec by the object of
/// `incarnation` (the version at its first status write).
fn put_key(generation: u64, incarnation: u64) -> String {
    format!("buckets/photos@{generation}/put-{incarnation}")
}

fn delete_key(generation: u64, incarnation: u64) -> String {
    format!("buckets/photos@{generation}/delete-{incarnation}")
}

fn keys(host: &FakeHost, method: Method) -> Vec<String> {
    host.http_requests()
        .iter()
        .filter(|r| r.method == method)
        .map(|r| r.header("idempotency-key").unwrap_or_default().to_string())
        .collect()
}

fn applied(cloud: &Rc<RefCell<Cloud>>, method: Method) -> usize {
    cloud
        .borrow()
        .applied
        .iter()
        .filter(|(m, _, _)| *m == method)
        .count()
}

/// Provision photos and let the user delete it: it is marked, held by the
/// provisioner's finalizer. Returns the marked generation.
fn provisioned_then_deleted(host: &FakeHost) -> u64 {
    seed(host, 10);
    assert_eq!(reconcile(host), Reply::Done);
    assert_eq!(status(host).map(|s| s.phase), Some(Phase::Ready));
    host.remove(BUCKETS, "photos");
    let marked = photos(host);
    assert!(marked.is_deleting(), "the finalizer holds it");
    marked.generation
}

#[test]
fn a_new_bucket_gets_the_finalizer_then_is_put_once_and_its_status_recorded() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);

    assert_eq!(reconcile(&host), Reply::Done);
    let bucket = photos(&host);
    assert!(bucket.has_finalizer(BUCKET_FINALIZER));
    // Created at generation 1 (version 1); the finalizer made it 2
    // (version 3, the incarnation: the version when the first status was
    // written), and the status writes kept it there.
    assert_eq!(bucket.generation, 2);
    let sent = host.http_requests();
    assert_eq!(sent.len(), 1);
    let put = &sent[0];
    assert_eq!((put.method, put.url.as_str()), (Method::Put, URL));
    assert_eq!(put.body_json(), Some(spec(10)));
    assert_eq!(
        put.header("idempotency-key"),
        Some(put_key(2, INCARNATION).as_str())
    );
    assert_eq!(put.header("content-type"), Some("application/json"));
    assert_eq!(put.header("leasehold-epoch"), Some("1"));

    let status = status(&host).expect("a status");
    assert_eq!(status.phase, Phase::Ready);
    assert_eq!(
        status.applied_spec,
        Some(BucketSpec {
            size_gb: 10,
            region: "eu".into()
        })
    );
    assert_eq!(status.cloud_generation, Some(1));
    assert_eq!(
        (status.observed_generation, status.incarnation),
        (Some(2), Some(INCARNATION))
    );
    let ready = get_condition(&status.conditions, READY).expect("a Ready condition");
    assert_eq!(
        (
            ready.status,
            ready.reason.as_str(),
            ready.observed_generation
        ),
        (ConditionStatus::True, PROVISIONED, 2)
    );
    assert_eq!(bucket.value, value(10), "the user's value is never written");
    let events = host.events_with_reason(PROVISIONED);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type(), EventType::Normal);
    // Three commits: the finalizer, Pending, then Ready.
    assert_eq!(host.commits().len(), 3);

    // In sync: a reconcile (the watch echo of our own commit, a resync)
    // costs no request and writes nothing.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.http_requests().len(), 1);
    assert_eq!(host.commits().len(), 3);
    assert_eq!(cloud.borrow().applied.len(), 1);
}

#[test]
fn a_changed_spec_is_a_new_put_with_the_new_generations_key() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    assert_eq!(reconcile(&host), Reply::Done);
    seed(&host, 20);
    assert_eq!(photos(&host).generation, 3);

    assert_eq!(reconcile(&host), Reply::Done);
    let sent = host.http_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].body_json(), Some(spec(20)));
    assert_eq!(
        keys(&host, Method::Put),
        [put_key(2, INCARNATION), put_key(3, INCARNATION)]
    );
    let status = status(&host).expect("a status");
    assert_eq!(status.applied_spec.map(|s| s.size_gb), Some(20));
    assert_eq!(status.cloud_generation, Some(2));
    assert_eq!(
        get_condition(&status.conditions, READY).map(|c| c.observed_generation),
        Some(3)
    );
    assert_eq!(cloud.borrow().applied.len(), 2);
}

#[test]
fn a_lost_answer_after_pending_was_recorded_is_retried_with_the_same_key_and_applied_once() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    host.fail_next_http(HttpFault::ReplyLost);

    // The cloud applied it, the guest cannot know: it fails, for the host
    // to retry with backoff, having recorded only that the spec was sent.
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
    let pending = status(&host).expect("Pending was recorded before the PUT");
    assert_eq!(pending.phase, Phase::Pending);
    let condition = get_condition(&pending.conditions, READY).expect("a Ready condition");
    assert_eq!(
        (condition.status, condition.reason.as_str()),
        (ConditionStatus::Unknown, PROVISIONING)
    );
    assert_eq!(cloud.borrow().applied.len(), 1);
    let after_pending = photos(&host);

    // Recording Pending took a new version but kept the generation: the
    // retry carries the same key, and the cloud replays its answer.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(
        keys(&host, Method::Put),
        [put_key(2, INCARNATION), put_key(2, INCARNATION)]
    );
    assert_eq!(cloud.borrow().applied.len(), 1, "applied exactly once");
    let status = status(&host).expect("a status");
    assert_eq!(
        (status.phase, status.cloud_generation),
        (Phase::Ready, Some(1))
    );
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("replayed")),
        "{status:?}"
    );
    assert!(photos(&host).version > after_pending.version);
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
        vec![
            (1, Some(put_key(2, INCARNATION))),
            (2, Some(put_key(2, INCARNATION)))
        ]
    );
    assert_eq!(
        cloud.borrow().applied,
        vec![(Method::Put, 1, put_key(2, INCARNATION))]
    );
    let epochs: Vec<u64> = host.commits().iter().map(|c| c.epoch).collect();
    assert_eq!(
        epochs,
        [1, 1, 2],
        "the finalizer and Pending by the first tenure; Ready by the one that learned the outcome"
    );
}

#[test]
fn nothing_is_sent_before_the_finalizer_is_on() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    host.fail_next_commit(Fault::Unavailable);
    assert!(matches!(reconcile(&host), Reply::Failed { .. }));
    assert!(host.http_requests().is_empty());
    assert!(cloud.borrow().applied.is_empty());

    // The finalizer's commit conflicts: a user wrote meanwhile. Nothing is
    // sent; the provisioner looks again soon.
    host.before_commit(1, |host| {
        seed(host, 11);
    });
    assert_eq!(reconcile(&host), Reply::RequeueAfter(CONFLICT_RETRY_AFTER));
    assert!(host.http_requests().is_empty());
    assert!(!photos(&host).has_finalizer(BUCKET_FINALIZER));
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
    assert_eq!(status(&host).map(|s| s.phase), Some(Phase::Pending));
    assert!(host.events().is_empty());
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
    assert_eq!(status(&host).map(|s| s.phase), Some(Phase::Pending));
}

#[test]
fn a_lease_lost_before_the_request_sends_nothing() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    host.fail_next_http(HttpFault::Fenced);
    assert_eq!(reconcile(&host), Reply::Fenced);
    assert!(host.http_requests().is_empty());
    assert!(cloud.borrow().applied.is_empty());
}

#[test]
fn a_lease_lost_at_the_status_commit_stops_the_guest() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    // The third commit records Ready.
    host.fail(At::Commit(3), Fault::Fenced);
    assert_eq!(reconcile(&host), Reply::Fenced);
    // Applied at the cloud, not recorded: the successor replays it.
    assert_eq!(cloud.borrow().applied.len(), 1);
    assert_eq!(status(&host).map(|s| s.phase), Some(Phase::Pending));
    host.new_tenure();
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(cloud.borrow().applied.len(), 1);
    assert_eq!(status(&host).map(|s| s.phase), Some(Phase::Ready));
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
    assert_ne!(status(&host).map(|s| s.phase), Some(Phase::Ready));
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
    let commits = host.commits().len();
    assert_eq!(
        reconcile(&host),
        Reply::Failed {
            message: format!("{URL} answered 429: slow down; retrying"),
            retry_after: Some(Duration::from_secs(7)),
        }
    );
    assert_eq!(
        host.commits().len(),
        commits,
        "Pending is recorded once per generation"
    );
    assert_eq!(status(&host).map(|s| s.phase), Some(Phase::Pending));
}

#[test]
fn a_refused_spec_is_recorded_as_a_warning_and_waits_for_a_change() {
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
    let failed = status(&host).expect("a status");
    assert_eq!(failed.phase, Phase::Failed);
    assert_eq!(failed.rejected_spec.map(|s| s.size_gb), Some(10));
    assert_eq!(failed.applied_spec, None);
    assert!(
        failed
            .message
            .as_deref()
            .is_some_and(|m| m.contains("region eu is full")),
        "{:?}",
        failed.message
    );
    let ready = get_condition(&failed.conditions, READY).expect("a Ready condition");
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, PROVISION_FAILED)
    );
    let warnings = host.events_with_reason(PROVISION_FAILED);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].event_type(), EventType::Warning);
    assert!(warnings[0].text().contains("region eu is full"));

    // Not retried while the spec is the one refused.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.http_requests().len(), 1);

    // A new spec is tried.
    seed(&host, 5);
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.http_requests().len(), 2);
    let status = status(&host).expect("a status");
    assert_eq!((status.phase, status.rejected_spec), (Phase::Ready, None));
    let ready = get_condition(&status.conditions, READY).expect("a Ready condition");
    assert_eq!(
        (ready.status, ready.observed_generation),
        (ConditionStatus::True, 3)
    );
}

#[test]
fn a_status_commit_that_conflicts_requeues_and_looks_again() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    // The user changes the spec while the PUT is out (before the third
    // commit, which would record Ready).
    host.before(At::Commit(3), |host| {
        seed(host, 30);
    });
    assert_eq!(reconcile(&host), Reply::RequeueAfter(CONFLICT_RETRY_AFTER));
    assert_eq!(
        status(&host).map(|s| s.phase),
        Some(Phase::Pending),
        "nothing recorded from a stale read"
    );

    // The next reconcile decides again from the new generation: a new key.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(
        keys(&host, Method::Put),
        [put_key(2, INCARNATION), put_key(3, INCARNATION)]
    );
    assert_eq!(
        status(&host)
            .and_then(|s| s.applied_spec)
            .map(|s| s.size_gb),
        Some(30)
    );
    assert_eq!(cloud.borrow().applied.len(), 2);
}

#[test]
fn a_deleted_bucket_is_deleted_at_the_cloud_before_its_object_goes() {
    let (host, cloud) = host_with_cloud();
    let marked = provisioned_then_deleted(&host);

    // The answer is lost once: the finalizer holds the object; the retry
    // sends the same key, the cloud replays, then the object goes.
    host.fail_next_http(HttpFault::ReplyLost);
    assert!(matches!(reconcile(&host), Reply::Failed { .. }));
    assert!(photos(&host).has_finalizer(BUCKET_FINALIZER));
    assert_eq!(reconcile(&host), Reply::Done);

    assert_eq!(
        keys(&host, Method::Delete),
        [
            delete_key(marked, INCARNATION),
            delete_key(marked, INCARNATION)
        ]
    );
    assert!(
        host.http_requests()
            .iter()
            .filter(|r| r.method == Method::Delete)
            .all(|r| r.url == URL)
    );
    assert_eq!(applied(&cloud, Method::Delete), 1);
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());
    let events = host.events_with_reason(DEPROVISIONED);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type(), EventType::Normal);
    // The event came with the finalizer's removal, in one commit.
    let last = host.commits().pop().expect("a commit");
    assert_eq!(last.events[0].reason, DEPROVISIONED);
    assert_eq!(last.ops.len(), 1);
}

#[test]
fn deleting_a_bucket_the_cloud_never_had_still_fences_the_cloud() {
    let host = FakeHost::new();
    host.allow_http([ENDPOINT]);
    host.respond(URL, HttpReply::json(404, &json!({ "error": "no bucket" })));
    // Held by the provisioner's finalizer, then deleted before any PUT.
    host.seed_with(
        BUCKETS,
        "photos",
        &value(1),
        &Metadata::new().finalizer(BUCKET_FINALIZER),
    );
    host.remove(BUCKETS, "photos");
    assert_eq!(reconcile(&host), Reply::Done);
    // The DELETE went out (raising the cloud's epoch mark) although there
    // was nothing to delete, and the object is gone.
    let sent = host.http_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].method, Method::Delete);
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());
}

#[test]
fn an_object_deleted_before_the_provisioner_saw_it_goes_without_a_request() {
    let (host, _cloud) = host_with_cloud();
    seed(&host, 1);
    host.remove(BUCKETS, "photos");
    assert_eq!(reconcile(&host), Reply::Done);
    assert!(host.http_requests().is_empty());
    assert!(host.commits().is_empty());
}

#[test]
fn a_bucket_made_again_under_the_same_name_is_provisioned_anew() {
    let (host, cloud) = host_with_cloud();
    provisioned_then_deleted(&host);
    assert_eq!(reconcile(&host), Reply::Done);
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());

    // A new object, same name and spec: its generation starts at 1 again,
    // so the generation alone would repeat the first object's key and the
    // cloud would replay its old answer, creating nothing.
    seed(&host, 10);
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(photos(&host).generation, 2, "as the first object's was");
    let puts = keys(&host, Method::Put);
    assert_eq!(puts.len(), 2);
    assert_ne!(puts[0], puts[1], "a new incarnation, a new key");
    assert_eq!(applied(&cloud, Method::Put), 2, "applied, not replayed");
    assert_eq!(status(&host).map(|s| s.phase), Some(Phase::Ready));
}

#[test]
fn a_stale_epoch_on_delete_stops_the_guest_and_keeps_the_object() {
    let (host, cloud) = host_with_cloud();
    provisioned_then_deleted(&host);
    cloud
        .borrow_mut()
        .highest
        .insert("test/controller".into(), 9);
    assert_eq!(reconcile(&host), Reply::Fenced);
    assert!(photos(&host).has_finalizer(BUCKET_FINALIZER));
    assert_eq!(applied(&cloud, Method::Delete), 0);
}

#[test]
fn a_refused_delete_keeps_the_object_and_asks_again_later() {
    let (host, cloud) = host_with_cloud();
    provisioned_then_deleted(&host);
    host.respond_once(
        URL,
        HttpReply::json(400, &json!({ "error": "bucket is not empty" })),
    );
    match reconcile(&host) {
        Reply::Failed {
            message,
            retry_after,
        } => {
            assert!(message.contains("bucket is not empty"), "{message}");
            assert_eq!(retry_after, Some(DELETE_REFUSED_RETRY_AFTER));
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(photos(&host).has_finalizer(BUCKET_FINALIZER));
    assert!(host.events_with_reason(DEPROVISIONED).is_empty());

    // Later the cloud accepts it.
    assert_eq!(reconcile(&host), Reply::Done);
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());
    assert_eq!(applied(&cloud, Method::Delete), 1);
}

#[test]
fn a_marked_bucket_whose_spec_is_malformed_is_still_deleted_at_the_cloud() {
    let (host, cloud) = host_with_cloud();
    seed(&host, 10);
    assert_eq!(reconcile(&host), Reply::Done);
    // The user breaks the spec, then deletes the object.
    host.seed(
        BUCKETS,
        "photos",
        &json!({ "spec": { "size_gb": "big" }, "endpoint": ENDPOINT }),
    );
    host.remove(BUCKETS, "photos");
    assert_eq!(reconcile(&host), Reply::Done);
    assert!(host.object::<Value>(BUCKETS, "photos").is_none());
    assert_eq!(applied(&cloud, Method::Delete), 1);
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
    assert!(host.commits().is_empty(), "not even a finalizer");
    let warnings: Vec<String> = host
        .logs()
        .into_iter()
        .map(|l| l.message)
        .filter(|m| m.starts_with("skipping buckets/photos"))
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
}
