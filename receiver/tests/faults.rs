//! The test hooks: each fault shapes only the delivery of an answer, never
//! what is applied, and hooks are off unless enabled.

mod support;

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use leasehold_receiver::{
    Fault, FaultSpec, Outcome, Receiver, ReceiverConfig, ReceiverError, RunningReceiver,
};
use serde_json::{Value, json};
use support::{Req, TEST_WAIT, until};

const LEASE: &str = "demo/provisioner";

async fn start_with_hooks() -> RunningReceiver {
    Receiver::start(ReceiverConfig::default().with_test_hooks(true))
        .await
        .expect("start a receiver")
}

fn spec(size_gb: u32) -> Value {
    json!({ "size_gb": size_gb, "region": "eu" })
}

#[tokio::test]
async fn drop_after_apply_applies_then_closes_without_an_answer() {
    let receiver = start_with_hooks().await;
    let addr = receiver.local_addr();
    receiver
        .set_fault(FaultSpec::once(Fault::DropAfterApply))
        .expect("hooks are on");

    let put = Req::put("photos", LEASE, 1, "photos-put", &spec(10));
    let error = put
        .send_head(addr)
        .await
        .expect_err("the connection is closed without a response");
    assert!(error.is_incomplete_message(), "{error}");
    // The effect happened although the client never heard.
    let bucket = receiver.bucket("photos").expect("applied before the drop");
    assert_eq!(bucket.generation, 1);
    assert_eq!(
        receiver.record()[0].fault.as_deref(),
        Some("drop_after_apply")
    );

    // The fault was for one request: the retry gets an answer, a replay.
    let retry = put.send(addr).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotency-replayed"), Some("true"));
    assert_eq!(receiver.effects().len(), 1);
    assert_eq!(receiver.check(), vec![]);
}

#[tokio::test]
async fn hang_applies_and_never_answers() {
    let receiver = start_with_hooks().await;
    let addr = receiver.local_addr();
    receiver
        .set_fault(FaultSpec::once(Fault::Hang))
        .expect("hooks are on");

    let put = Req::put("photos", LEASE, 1, "photos-put", &spec(10));
    let waiting = tokio::spawn({
        let put = put.clone();
        async move { put.send_head(addr).await.map(|r| r.status()) }
    });
    until("the hanging request to be applied", || {
        receiver.effects().len() == 1
    })
    .await;
    // Applied, and still no answer: the client is waiting on a reply
    // that will never come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a hung request was answered");

    let retry = put.send(addr).await;
    assert_eq!(retry.header("idempotency-replayed"), Some("true"));

    // Stopping the receiver cuts the hung connection.
    receiver.shutdown().await;
    let outcome = tokio::time::timeout(TEST_WAIT, waiting)
        .await
        .expect("the hung request ends when the receiver stops")
        .expect("the client task");
    assert!(
        outcome.is_err(),
        "no answer, only a closed connection: {outcome:?}"
    );
}

#[tokio::test]
async fn delay_answers_late_after_applying() {
    let receiver = start_with_hooks().await;
    let addr = receiver.local_addr();
    receiver
        .set_fault(FaultSpec::times(Fault::Delay { delay_ms: 300 }, 2))
        .expect("hooks are on");

    for (key, size) in [("k1", 1), ("k2", 2)] {
        let started = Instant::now();
        let reply = Req::put("photos", LEASE, 1, key, &spec(size))
            .send(addr)
            .await;
        assert!(reply.status == 200 || reply.status == 201);
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "answered after {:?}",
            started.elapsed()
        );
    }
    // The third request is past the fault's count.
    let reply = Req::put("photos", LEASE, 1, "k3", &spec(3))
        .send(addr)
        .await;
    assert_eq!(reply.status, 200);
    let faults: Vec<_> = receiver.record().iter().map(|e| e.fault.clone()).collect();
    assert_eq!(
        faults,
        vec![Some("delay".into()), Some("delay".into()), None]
    );
}

#[tokio::test]
async fn endless_body_never_ends() {
    let receiver = start_with_hooks().await;
    let addr = receiver.local_addr();
    receiver
        .set_fault(FaultSpec::once(Fault::EndlessBody {
            chunk_interval_ms: 0,
        }))
        .expect("hooks are on");

    let response = Req::put("photos", LEASE, 1, "k1", &spec(1))
        .send_head(addr)
        .await
        .expect("a response head");
    assert_eq!(response.status(), 201);
    let mut body = response.into_body();
    let mut received = Vec::new();
    // Far more than any answer of the API: the body goes on.
    while received.len() < 4 * 1024 * 1024 {
        let frame = tokio::time::timeout(TEST_WAIT, body.frame())
            .await
            .expect("the next chunk")
            .expect("the body has not ended")
            .expect("a chunk");
        if let Ok(data) = frame.into_data() {
            received.extend_from_slice(&data);
        }
    }
    // It starts with the real answer, so a client that bounds the body
    // could still have parsed it.
    let answer: Value = serde_json::Deserializer::from_slice(&received)
        .into_iter()
        .next()
        .expect("one JSON value")
        .expect("valid JSON");
    assert_eq!(answer["generation"], 1);
    assert_eq!(receiver.effects().len(), 1);
}

#[tokio::test]
async fn faults_over_http_and_their_bounds() {
    let receiver = start_with_hooks().await;
    let addr = receiver.local_addr();
    let set = Req::new("POST", "/_faults")
        .body(r#"{"kind": "drop_after_apply", "requests": 2}"#)
        .send(addr)
        .await;
    assert_eq!(set.status, 200, "{}", set.json());
    let pending = Req::get("/_faults").send(addr).await.json();
    assert_eq!(
        pending["pending"],
        json!({"kind": "drop_after_apply", "requests": 2})
    );
    // Cleared, nothing shapes the next request.
    assert_eq!(Req::new("DELETE", "/_faults").send(addr).await.status, 204);
    assert_eq!(
        Req::put("a", LEASE, 1, "k1", &spec(1))
            .send(addr)
            .await
            .status,
        201
    );
    for bad in [
        r#"{"kind": "explode"}"#,
        r#"{"kind": "hang", "requests": 0}"#,
        r#"{"kind": "delay"}"#,
        r#"{"kind": "hang", "delay_ms": 5}"#,
        r#"{"kind": "delay", "delay_ms": 99999999999}"#,
    ] {
        let reply = Req::new("POST", "/_faults").body(bad).send(addr).await;
        assert_eq!(reply.status, 400, "{bad}");
    }
    // A fault shapes refusals too: the decision is made first.
    receiver
        .set_fault(FaultSpec::once(Fault::DropAfterApply))
        .expect("hooks are on");
    let stale = Req::put("a", LEASE, 0, "k2", &spec(1))
        .send_head(addr)
        .await;
    assert!(stale.is_err());
    let entry = receiver.record().last().cloned().expect("recorded");
    assert_eq!(
        (entry.outcome, entry.fault.as_deref()),
        (Outcome::Stale, Some("drop_after_apply"))
    );
}

#[tokio::test]
async fn hooks_are_off_unless_enabled() {
    let receiver = Receiver::start(ReceiverConfig::default())
        .await
        .expect("start a receiver");
    let addr = receiver.local_addr();
    assert!(matches!(
        receiver.set_fault(FaultSpec::once(Fault::Hang)),
        Err(ReceiverError::HooksDisabled)
    ));
    let reply = Req::new("POST", "/_faults")
        .body(r#"{"kind": "hang"}"#)
        .send(addr)
        .await;
    assert_eq!(reply.status, 404);
    // So the next request is answered normally.
    assert_eq!(
        Req::put("a", LEASE, 1, "k1", &spec(1))
            .send(addr)
            .await
            .status,
        201
    );
}
