//! The receiver's HTTP contract: the fence, idempotency, header checks,
//! and the record the checker judges.

mod support;

use leasehold_receiver::{
    Outcome, Receiver, ReceiverConfig, RecordEntry, RunningReceiver, Violation, check,
};
use serde_json::{Value, json};
use support::Req;

const LEASE: &str = "demo/provisioner";

async fn start() -> RunningReceiver {
    Receiver::start(ReceiverConfig::default())
        .await
        .expect("start a receiver")
}

fn spec(size_gb: u32) -> Value {
    json!({ "size_gb": size_gb, "region": "eu" })
}

fn outcomes(receiver: &RunningReceiver) -> Vec<Outcome> {
    receiver.record().iter().map(|e| e.outcome).collect()
}

#[tokio::test]
async fn a_stale_epoch_is_refused_with_409_and_nothing_is_applied() {
    let receiver = start().await;
    let addr = receiver.local_addr();

    let reply = Req::put("photos", LEASE, 2, "k1", &spec(10))
        .send(addr)
        .await;
    assert_eq!(reply.status, 201, "{}", reply.json());
    assert_eq!(
        reply.json(),
        json!({"name": "photos", "spec": spec(10), "generation": 1, "applied_epoch": 2})
    );

    // The deposed leader, epoch 1: refused, whatever it asks.
    let reply = Req::put("photos", LEASE, 1, "k2", &spec(99))
        .send(addr)
        .await;
    assert_eq!(reply.status, 409);
    let refusal = reply.json();
    assert_eq!(refusal["error"], "stale epoch");
    assert_eq!(refusal["highest"], 2);
    let reply = Req::delete("photos", LEASE, 1, "k3").send(addr).await;
    assert_eq!(reply.status, 409);
    let reply = Req::put("logs", LEASE, 1, "k4", &spec(1)).send(addr).await;
    assert_eq!(reply.status, 409, "the mark is per lease, not per bucket");

    // Nothing of it was applied.
    let reply = Req::get("/buckets/photos").send(addr).await;
    assert_eq!(
        reply.json(),
        json!({"name": "photos", "spec": spec(10), "generation": 1, "applied_epoch": 2})
    );
    assert_eq!(Req::get("/buckets/logs").send(addr).await.status, 404);
    assert_eq!(receiver.effects().len(), 1);

    // The same epoch is accepted; a higher one raises the mark.
    let reply = Req::put("photos", LEASE, 2, "k5", &spec(20))
        .send(addr)
        .await;
    assert_eq!(reply.status, 200);
    let reply = Req::put("photos", LEASE, 3, "k6", &spec(30))
        .send(addr)
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(receiver.highest_epoch(LEASE), Some(3));
    let reply = Req::put("photos", LEASE, 2, "k7", &spec(40))
        .send(addr)
        .await;
    assert_eq!(reply.status, 409);
    assert_eq!(reply.json()["highest"], 3);

    // Another lease has its own mark.
    let reply = Req::put("other", "demo/other", 1, "k8", &spec(1))
        .send(addr)
        .await;
    assert_eq!(reply.status, 201);

    let bucket = receiver.bucket("photos").expect("photos exists");
    assert_eq!(
        (bucket.spec.size_gb, bucket.generation, bucket.applied_epoch),
        (30, 3, 3)
    );
    use Outcome::*;
    assert_eq!(
        outcomes(&receiver)
            .into_iter()
            .filter(|o| *o != Read)
            .collect::<Vec<_>>(),
        vec![
            Applied, Stale, Stale, Stale, Applied, Applied, Stale, Applied
        ]
    );
    assert_eq!(receiver.check(), vec![]);
}

#[tokio::test]
async fn a_repeated_key_replays_the_stored_answer_without_applying_again() {
    let receiver = start().await;
    let addr = receiver.local_addr();

    let first = Req::put("photos", LEASE, 1, "photos-v1-put", &spec(10))
        .send(addr)
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotency-replayed"), None);

    // The reply was "lost"; the same leader retries.
    let again = Req::put("photos", LEASE, 1, "photos-v1-put", &spec(10))
        .send(addr)
        .await;
    assert_eq!(again.status, 201, "the stored status, not a fresh 200");
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));

    // Its successor retries the same action: replayed too, and its epoch
    // is now the mark.
    let successor = Req::put("photos", LEASE, 2, "photos-v1-put", &spec(10))
        .send(addr)
        .await;
    assert_eq!(successor.status, 201);
    assert_eq!(successor.header("idempotency-replayed"), Some("true"));
    assert_eq!(receiver.highest_epoch(LEASE), Some(2));

    // The deposed leader cannot even replay: stale comes first.
    let stale = Req::put("photos", LEASE, 1, "photos-v1-put", &spec(10))
        .send(addr)
        .await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.header("idempotency-replayed"), None);

    // Deletes replay the same way.
    let deleted = Req::delete("photos", LEASE, 2, "photos-delete")
        .send(addr)
        .await;
    assert_eq!(deleted.status, 200);
    let again = Req::delete("photos", LEASE, 2, "photos-delete")
        .send(addr)
        .await;
    assert_eq!((again.status, again.body), (200, deleted.body));
    // A new key for the gone bucket is a 404, and not stored: once the
    // bucket exists again the same key applies.
    let missing = Req::delete("photos", LEASE, 2, "late-delete")
        .send(addr)
        .await;
    assert_eq!(missing.status, 404);

    let effects = receiver.effects();
    assert_eq!(effects.len(), 2, "{effects:#?}");
    assert_eq!(effects[0].generation, Some(1));
    assert_eq!(effects[1].generation, Some(2));
    assert_eq!(
        outcomes(&receiver),
        vec![
            Outcome::Applied,
            Outcome::Replayed,
            Outcome::Replayed,
            Outcome::Stale,
            Outcome::Applied,
            Outcome::Replayed,
            Outcome::Rejected
        ]
    );
    // A replay records the generation its original application made.
    assert_eq!(receiver.record()[2].generation, Some(1));
    assert_eq!(receiver.check(), vec![]);
}

#[tokio::test]
async fn a_key_reused_for_a_different_request_is_422() {
    let receiver = start().await;
    let addr = receiver.local_addr();
    assert_eq!(
        Req::put("photos", LEASE, 1, "k1", &spec(10))
            .send(addr)
            .await
            .status,
        201
    );
    // Different body.
    let reply = Req::put("photos", LEASE, 1, "k1", &spec(11))
        .send(addr)
        .await;
    assert_eq!(reply.status, 422, "{}", reply.json());
    // Different target.
    let reply = Req::put("logs", LEASE, 1, "k1", &spec(10)).send(addr).await;
    assert_eq!(reply.status, 422);
    // Different method.
    let reply = Req::delete("photos", LEASE, 1, "k1").send(addr).await;
    assert_eq!(reply.status, 422);

    assert_eq!(receiver.effects().len(), 1);
    let bucket = receiver.bucket("photos").expect("photos exists");
    assert_eq!((bucket.spec.size_gb, bucket.generation), (10, 1));
    assert!(receiver.bucket("logs").is_none());
}

#[tokio::test]
async fn missing_or_malformed_headers_are_400_and_apply_nothing() {
    let receiver = start().await;
    let addr = receiver.local_addr();
    let good = Req::put("photos", LEASE, 1, "k1", &spec(10));

    let cases = [
        ("no lease", good.clone().without("leasehold-lease")),
        ("no epoch", good.clone().without("leasehold-epoch")),
        ("no holder", good.clone().without("leasehold-holder")),
        ("no key", good.clone().without("idempotency-key")),
        (
            "epoch not decimal",
            good.clone()
                .without("leasehold-epoch")
                .header("leasehold-epoch", "three"),
        ),
        (
            "negative epoch",
            good.clone()
                .without("leasehold-epoch")
                .header("leasehold-epoch", "-1"),
        ),
        ("two epochs", good.clone().header("leasehold-epoch", "2")),
        (
            "lease without cluster",
            good.clone()
                .without("leasehold-lease")
                .header("leasehold-lease", "provisioner"),
        ),
        ("not a spec", good.clone().body("{\"size_gb\": \"big\"}")),
        (
            "not a DNS label",
            Req::put("Photos", LEASE, 1, "k1", &spec(10)),
        ),
        (
            "body over the bound",
            good.clone()
                .body(vec![b' '; leasehold_receiver::MAX_REQUEST_BODY_BYTES + 1]),
        ),
        (
            "no fence at all",
            Req::new("DELETE", "/buckets/photos").header("idempotency-key", "k9"),
        ),
    ];
    for (what, request) in &cases {
        let reply = request.send(addr).await;
        let expected = if *what == "body over the bound" {
            413
        } else {
            400
        };
        assert_eq!(reply.status, expected, "{what}: {}", reply.json());
        assert!(
            reply.json()["error"]
                .as_str()
                .is_some_and(|e| !e.is_empty()),
            "{what}: the answer says why"
        );
    }
    assert_eq!(receiver.effects(), vec![]);
    assert!(receiver.bucket("photos").is_none());
    assert_eq!(
        receiver.highest_epoch(LEASE),
        None,
        "no refusal raises the mark"
    );
    assert!(
        receiver
            .record()
            .iter()
            .all(|e| e.outcome == Outcome::Rejected && e.detail.is_some())
    );
    assert_eq!(receiver.record().len(), cases.len());

    // The problems are named.
    let reply = good
        .clone()
        .without("leasehold-epoch")
        .without("leasehold-holder")
        .send(addr)
        .await;
    let error = reply.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("leasehold-epoch is missing")
            && error.contains("leasehold-holder is missing"),
        "{error}"
    );

    // Reads need none of it; the request that was refused can now be made.
    assert_eq!(Req::get("/buckets").send(addr).await.status, 200);
    assert_eq!(good.send(addr).await.status, 201);
    // A method the API does not have.
    let reply = Req::new("POST", "/buckets/photos")
        .fence(LEASE, 1)
        .send(addr)
        .await;
    assert_eq!(reply.status, 405);
}

#[tokio::test]
async fn the_record_and_the_checker_agree() {
    let receiver = start().await;
    let addr = receiver.local_addr();
    Req::put("a", LEASE, 1, "a1", &spec(1)).send(addr).await;
    Req::put("a", LEASE, 1, "a1", &spec(1)).send(addr).await;
    Req::put("b", LEASE, 2, "b1", &spec(2)).send(addr).await;
    Req::put("a", LEASE, 1, "a2", &spec(3)).send(addr).await;
    Req::put("a", LEASE, 2, "a1", &spec(9)).send(addr).await;
    Req::get("/buckets/a").send(addr).await;
    Req::delete("b", LEASE, 2, "b2").send(addr).await;

    let record = receiver.record();
    assert_eq!(record.len(), 7);
    assert_eq!(
        record.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=7).collect::<Vec<_>>(),
        "seq counts every request without gaps"
    );
    let stale = &record[3];
    assert_eq!(
        (
            stale.outcome,
            stale.status,
            stale.epoch,
            stale.lease.as_deref()
        ),
        (Outcome::Stale, 409, Some(1), Some(LEASE))
    );
    assert_eq!(stale.holder.as_deref(), Some("host-a"));
    assert_eq!(stale.idempotency_key.as_deref(), Some("a2"));
    assert_eq!(
        record[4].outcome,
        Outcome::Rejected,
        "a1 reused with another body"
    );
    assert_eq!(record[5].outcome, Outcome::Read);
    assert_eq!(
        (record[6].resource.as_deref(), record[6].generation),
        (Some("buckets/b"), Some(2))
    );

    // The same record over HTTP.
    let over_http: Vec<RecordEntry> =
        serde_json::from_slice(&Req::get("/_record").send(addr).await.body).expect("a record");
    assert_eq!(over_http, record);
    let effects: Vec<RecordEntry> =
        serde_json::from_slice(&Req::get("/_effects").send(addr).await.body).expect("effects");
    assert_eq!(effects, receiver.effects());
    assert_eq!(
        effects.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 3, 7]
    );

    // What the receiver did keeps the rule...
    assert_eq!(check(&record), vec![]);
    // ...and the same record, as an unfenced receiver would have written
    // it, does not: the stale request applied.
    let mut unfenced = record.clone();
    unfenced[3].outcome = Outcome::Applied;
    unfenced[3].status = 201;
    assert_eq!(
        check(&unfenced),
        vec![
            Violation::StaleNotRefused {
                lease: LEASE.into(),
                seq: 4,
                epoch: 1,
                outcome: Outcome::Applied,
                highest_seq: 3,
                highest: 2,
            },
            Violation::AcceptedEpochWentBack {
                lease: LEASE.into(),
                seq: 4,
                epoch: 1,
                highest_seq: 3,
                highest: 2,
            },
        ]
    );
    // And one without idempotency: the retry applied again.
    let mut no_dedup = record;
    no_dedup[1].outcome = Outcome::Applied;
    assert_eq!(
        check(&no_dedup),
        vec![Violation::KeyAppliedTwice {
            key: "a1".into(),
            first_seq: 1,
            seq: 2
        }]
    );
}
