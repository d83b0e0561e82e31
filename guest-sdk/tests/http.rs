//! Outbound HTTP from a controller, against the native `FakeHost`: what
//! the host lets out (deny by default, `http_allow`, refusal after loss,
//! bounds), the fence headers it stamps, and how a controller that keys
//! its effects by `IdempotencyKey` survives a lost reply and a change of
//! leader.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use leasehold_guest::http::{HttpError, IdempotencyKey, Method, Request};
use leasehold_guest::{
    Context, Controller, Description, Error, FakeHost, Fence, HttpFault, HttpRecord, HttpReply,
    Limits, Reply,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

const BILLING: &str = "http://billing.test/v1/invoices";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    amount: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invoice: Option<String>,
}

/// Invoices each order once: POSTs it to the billing service keyed by the
/// order's generation, then records the invoice in the order.
#[derive(Default)]
struct Invoicer;

impl Controller for Invoicer {
    fn describe(&self) -> Description {
        Description::watching(["orders"])
    }

    fn reconcile(
        &self,
        ctx: &Context,
        kind: &str,
        name: &str,
    ) -> Result<leasehold_guest::Outcome, Error> {
        let Some(order) = ctx.api::<Order>(kind).get(name)? else {
            return Ok(leasehold_guest::Outcome::Done);
        };
        if order.value.invoice.is_some() {
            return Ok(leasehold_guest::Outcome::Done);
        }
        let key = IdempotencyKey::for_action(kind, name, order.generation, "invoice");
        let response = Request::post(BILLING)
            .json(&json!({ "order": name, "amount": order.value.amount }))?
            .idempotency_key(&key)
            .send()?;
        if response.status == 409 {
            return Err(Error::failed(format!(
                "billing answered 409 for {kind}/{name}: a newer tenure acted"
            )));
        }
        if !response.is_success() {
            return Err(Error::failed(format!(
                "billing answered {} for {kind}/{name}",
                response.status
            )));
        }
        let id: String = response.json::<serde_json::Value>()?["id"]
            .as_str()
            .ok_or_else(|| Error::failed("billing's reply has no id"))?
            .to_string();
        let invoiced = Order {
            invoice: Some(id),
            ..order.value.clone()
        };
        ctx.transaction().update(&order, &invoiced).commit()?;
        Ok(leasehold_guest::Outcome::Done)
    }
}

fn failed_message(reply: Reply) -> String {
    match reply {
        Reply::Failed { message, .. } => message,
        other => panic!("expected a failed reconcile, got {other:?}"),
    }
}

fn deliveries(host: &FakeHost) -> Vec<HttpRecord> {
    host.http_requests()
        .into_iter()
        .filter(|r| r.delivered)
        .collect()
}

fn billing_host() -> FakeHost {
    let host = FakeHost::new();
    host.seed("orders", "o1", &json!({ "amount": 5 }));
    host.allow_http(["http://billing.test/v1/"]);
    host.respond(BILLING, HttpReply::json(201, &json!({ "id": "inv-1" })));
    host
}

#[test]
fn requests_are_denied_until_allowed() {
    let host = FakeHost::new();
    host.seed("orders", "o1", &json!({ "amount": 5 }));
    host.respond(BILLING, HttpReply::json(201, &json!({ "id": "inv-1" })));

    let message = failed_message(host.reconcile(&Invoicer, "orders", "o1"));
    assert!(message.contains("denied"), "{message}");
    assert!(message.contains(BILLING), "{message}");
    assert!(host.http_requests().is_empty(), "nothing left the host");
    assert!(host.commits().is_empty());

    // Another origin, or a path outside the allowed prefix, stays denied.
    host.allow_http(["http://billing.test/v2/", "https://billing.test/v1/"]);
    assert!(matches!(
        host.reconcile(&Invoicer, "orders", "o1"),
        Reply::Failed { .. }
    ));
    assert!(host.http_requests().is_empty());

    host.allow_http(["http://billing.test/v1/"]);
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Done);
    assert_eq!(host.http_requests().len(), 1);
}

#[test]
fn an_allowed_request_gets_its_scripted_reply() {
    let host = billing_host();

    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Done);
    let order = host.object::<Order>("orders", "o1").unwrap();
    assert_eq!(order.value.invoice.as_deref(), Some("inv-1"));

    let sent = host.http_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].method, Method::Post);
    assert_eq!(sent[0].url, BILLING);
    assert_eq!(
        sent[0].body_json(),
        Some(json!({ "order": "o1", "amount": 5 }))
    );
    assert_eq!(sent[0].header("content-type"), Some("application/json"));
    assert_eq!(
        sent[0].header("content-length"),
        Some(sent[0].body.len().to_string().as_str())
    );
    assert_eq!(sent[0].status, Some(201));

    // Invoiced: reconciling again sends nothing.
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Done);
    assert_eq!(host.http_requests().len(), 1);
}

#[test]
fn the_fence_headers_are_the_hosts_not_the_guests() {
    let host = FakeHost::new();
    host.allow_http(["http://svc.test"]);
    let forged = || {
        Request::post("http://svc.test/apply")
            .header("Leasehold-Epoch", "999")
            .header("LEASEHOLD-LEASE", "other/lease")
            .header("leasehold-holder", "mallory")
            .header("X-Request", "r1")
            .send()
    };
    forged().unwrap();
    host.set_fence(Fence {
        cluster: "prod".into(),
        lease: "invoicer".into(),
        epoch: 41,
        holder: "replica-b".into(),
    });
    forged().unwrap();

    let sent = host.http_requests();
    for (record, (lease, epoch, holder)) in sent.iter().zip([
        ("test/controller", "1", "fake-host"),
        ("prod/invoicer", "41", "replica-b"),
    ]) {
        let fence_headers: Vec<(&str, &str)> = record
            .headers
            .iter()
            .filter(|(name, _)| name.starts_with("leasehold-"))
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            fence_headers,
            [
                ("leasehold-lease", lease),
                ("leasehold-epoch", epoch),
                ("leasehold-holder", holder),
            ],
            "exactly one of each, with the fence's values"
        );
        assert_eq!(record.header("x-request"), Some("r1"));
        assert_eq!(record.epoch.to_string(), epoch);
    }
}

#[test]
fn a_lost_reply_is_retried_with_the_same_key_and_applied_once_by_a_deduplicating_receiver() {
    let host = billing_host();
    // The receiver applies each idempotency key once and answers a repeat
    // with the stored result.
    let applied: Rc<RefCell<HashMap<String, String>>> = Rc::default();
    let receiver = applied.clone();
    host.respond_with(BILLING, move |request| {
        let key = request
            .header("idempotency-key")
            .expect("the invoicer sends a key")
            .to_string();
        let mut applied = receiver.borrow_mut();
        let next = format!("inv-{}", applied.len() + 1);
        let id = applied.entry(key).or_insert(next).clone();
        HttpReply::json(201, &json!({ "id": id }))
    });
    host.fail_next_http(HttpFault::ReplyLost);

    // The receiver applied it, but the guest cannot tell.
    let message = failed_message(host.reconcile(&Invoicer, "orders", "o1"));
    assert!(message.contains("connection"), "{message}");
    assert!(host.commits().is_empty());
    assert_eq!(applied.borrow().len(), 1);

    // The retry carries the same key: one effect, and the stored result.
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Done);
    let delivered = deliveries(&host);
    assert_eq!(delivered.len(), 2);
    let keys: Vec<Option<&str>> = delivered
        .iter()
        .map(|r| r.header("idempotency-key"))
        .collect();
    let version = host.object::<Order>("orders", "o1").unwrap().version;
    assert_eq!(keys[0], keys[1]);
    assert!(
        keys[0].is_some_and(|k| k.starts_with("orders/o1@") && k.ends_with("/invoice")),
        "{keys:?}"
    );
    assert_eq!(applied.borrow().len(), 1, "applied once");
    let order = host.object::<Order>("orders", "o1").unwrap();
    assert_eq!(order.value.invoice.as_deref(), Some("inv-1"));
    assert!(order.version == version && host.pending_faults() == 0);
}

#[test]
fn a_successor_re_running_the_decision_sends_the_same_key() {
    let host = billing_host();
    host.fail_next_http(HttpFault::ReplyTimedOut);
    let message = failed_message(host.reconcile(&Invoicer, "orders", "o1"));
    assert!(message.contains("timed out"), "{message}");

    // The leader changes before anyone learns the outcome.
    host.new_tenure();
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Done);

    let delivered = deliveries(&host);
    assert_eq!(delivered.len(), 2);
    assert_eq!(
        delivered[0].header("idempotency-key"),
        delivered[1].header("idempotency-key"),
        "the key names the decision, not the tenure"
    );
    assert_eq!(
        (delivered[0].epoch, delivered[1].epoch),
        (1, 2),
        "the epoch header tells the receiver who sent each"
    );
    assert_eq!(delivered[1].header("leasehold-epoch"), Some("2"));
}

#[test]
fn a_fenced_receiver_rejects_the_deposed_leaders_late_request() {
    let host = billing_host();
    let highest = Rc::new(RefCell::new(0u64));
    let seen = highest.clone();
    host.respond_with(BILLING, move |request| {
        let epoch: u64 = request
            .header("leasehold-epoch")
            .and_then(|e| e.parse().ok())
            .expect("the host stamps every request");
        let mut highest = seen.borrow_mut();
        if epoch < *highest {
            return HttpReply::text(409, format!("epoch {epoch} is older than {highest}"));
        }
        *highest = epoch;
        HttpReply::json(201, &json!({ "id": format!("inv-e{epoch}") }))
    });
    // The successor (epoch 2) acts first...
    host.new_tenure();
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Done);
    // ...then the deposed leader's request (epoch 1) arrives, on another
    // order: the receiver refuses it, and the controller does not record
    // an invoice it does not have.
    host.seed("orders", "o2", &json!({ "amount": 7 }));
    let old = host.fence();
    host.set_fence(Fence { epoch: 1, ..old });
    let message = failed_message(host.reconcile(&Invoicer, "orders", "o2"));
    assert!(message.contains("409"), "{message}");
    assert_eq!(
        host.object::<Order>("orders", "o2").unwrap().value.invoice,
        None
    );
    assert_eq!(*highest.borrow(), 2);
}

#[test]
fn a_fenced_request_ends_the_reconcile_as_fenced_and_sends_nothing() {
    let host = billing_host();
    host.fail_next_http(HttpFault::Fenced);
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Fenced);
    assert!(host.http_requests().is_empty());
    assert!(host.commits().is_empty());
    assert!(host.is_revoked(), "a tenure never comes back");
    assert_eq!(host.reconcile(&Invoicer, "orders", "o1"), Reply::Fenced);

    // A revoked lease refuses requests the same way, with the lease named.
    let host = billing_host();
    host.revoke();
    match Request::get(BILLING).send() {
        Err(HttpError::Fenced(why)) => {
            assert!(why.contains("test/controller"), "{why}");
            assert!(why.contains("nothing was sent"), "{why}");
        }
        other => panic!("expected fenced, got {other:?}"),
    }
    let error: Error = HttpError::Fenced("x".into()).into();
    assert!(error.is_fenced());
    assert!(host.http_requests().is_empty());
}

#[test]
fn requests_per_reconcile_are_bounded_and_the_budget_is_per_reconcile() {
    struct Chatty;
    impl Controller for Chatty {
        fn describe(&self) -> Description {
            Description::watching(["pings"])
        }
        fn reconcile(
            &self,
            _: &Context,
            _: &str,
            _: &str,
        ) -> Result<leasehold_guest::Outcome, Error> {
            for _ in 0..3 {
                Request::get("http://svc.test/ping").send()?;
            }
            Ok(leasehold_guest::Outcome::Done)
        }
    }
    let host = FakeHost::with_limits(Limits {
        http_requests_per_reconcile: 3,
        ..Limits::default()
    });
    host.allow_http(["http://svc.test"]);
    assert_eq!(host.reconcile(&Chatty, "pings", "a"), Reply::Done);
    assert_eq!(
        host.reconcile(&Chatty, "pings", "a"),
        Reply::Done,
        "fresh budget"
    );
    assert_eq!(host.http_requests().len(), 6);

    let host = FakeHost::with_limits(Limits {
        http_requests_per_reconcile: 2,
        ..Limits::default()
    });
    host.allow_http(["http://svc.test"]);
    let message = failed_message(host.reconcile(&Chatty, "pings", "a"));
    assert!(message.contains("host limit"), "{message}");
    assert!(
        message.contains("2 requests in this reconcile"),
        "{message}"
    );
    assert_eq!(host.http_requests().len(), 2, "the third was not sent");
}

#[test]
fn bodies_are_bounded_both_ways() {
    let host = FakeHost::with_limits(Limits {
        http_request_body_bytes: 8,
        http_response_body_bytes: 4,
        ..Limits::default()
    });
    host.allow_http(["http://svc.test"]);
    host.respond("http://svc.test/small", HttpReply::text(200, "1234"));
    host.respond("http://svc.test/big", HttpReply::text(200, "12345"));

    assert!(matches!(
        Request::post("http://svc.test/small")
            .body(vec![0; 9])
            .send(),
        Err(HttpError::BodyTooLarge(_))
    ));
    assert!(host.http_requests().is_empty(), "refused before sending");
    assert_eq!(
        Request::post("http://svc.test/small")
            .body(vec![0; 8])
            .send()
            .unwrap()
            .body,
        b"1234"
    );
    assert!(matches!(
        Request::get("http://svc.test/big").send(),
        Err(HttpError::BodyTooLarge(why)) if why.contains("HTTP-response-body-size")
    ));
    assert_eq!(host.http_requests().len(), 2);
    assert!(host.http_requests()[1].delivered, "the receiver answered");
}

#[test]
fn wire_faults_say_whether_the_receiver_got_the_request() {
    let host = FakeHost::new();
    host.allow_http(["http://svc.test"]);
    host.respond_once("http://svc.test/x", HttpReply::status(201));
    host.respond("http://svc.test/x", HttpReply::status(200));
    host.fail_http(1, HttpFault::Refused);
    host.fail_http(2, HttpFault::Timeout);
    host.fail_http(3, HttpFault::ReplyLost);
    let send = || Request::post("http://svc.test/x").send();

    assert!(
        matches!(send(), Err(HttpError::Connection(why)) if why.contains("connection-refused"))
    );
    assert!(matches!(send(), Err(HttpError::Timeout(why)) if why.contains("connection-timeout")));
    assert!(
        matches!(send(), Err(HttpError::Connection(why)) if why.contains("connection-terminated"))
    );
    // The one-shot 201 went to the request whose reply was lost.
    assert_eq!(send().unwrap().status, 200);

    let outcomes: Vec<(bool, Option<u16>)> = host
        .http_requests()
        .iter()
        .map(|r| (r.delivered, r.status))
        .collect();
    assert_eq!(
        outcomes,
        [
            (false, None),
            (false, None),
            (true, Some(201)),
            (true, Some(200))
        ]
    );
    assert_eq!(host.pending_faults(), 0);
}

#[test]
fn malformed_requests_are_refused_before_anything_is_sent() {
    let host = FakeHost::new();
    host.allow_http(["http://svc.test"]);
    for request in [
        Request::get("http://svc.test/").header("Host", "evil.test"),
        Request::get("http://svc.test/").header("Transfer-Encoding", "chunked"),
        Request::get("http://svc.test/").header("X-Bad", "a\r\nb"),
        Request::get("http://svc.test/").header("bad name", "v"),
        Request::get("ftp://svc.test/"),
        Request::get("http://user:pw@svc.test/"),
        Request::get("svc.test/"),
    ] {
        let shown = format!("{request:?}");
        match request.send() {
            Err(HttpError::InvalidRequest(why)) => {
                assert!(!why.contains("pw@"), "{why}");
            }
            other => panic!("{shown}: expected InvalidRequest, got {other:?}"),
        }
    }
    // The host's own refusal of a path that could escape a prefix.
    assert!(matches!(
        Request::get("http://svc.test/a/../b").send(),
        Err(HttpError::Denied { .. })
    ));
    assert!(host.http_requests().is_empty());
}

#[test]
fn allow_entries_match_as_the_hosts_do() {
    let host = FakeHost::new();
    host.allow_http([
        "http://svc.test:8080/hooks",
        "https://api.test/v1/",
        "http://[::1]:9000",
    ]);
    let allowed = |url: &str| !matches!(Request::get(url).send(), Err(HttpError::Denied { .. }));
    for (url, want) in [
        ("http://svc.test:8080/hooks", true),
        ("http://svc.test:8080/hooks/a?x=1", true),
        ("http://SVC.test:8080/hooks/a", true),
        ("http://svc.test:8080/hookshot", false),
        ("http://svc.test/hooks", false),
        ("https://svc.test:8080/hooks", false),
        ("https://api.test/v1/things", true),
        ("https://api.test:443/v1/", true),
        ("https://api.test/v1", false),
        ("https://api.test/v2/x", false),
        ("https://api.test/v1/%2e%2e/admin", false),
        ("https://api.test/v1/a%2Fb", false),
        ("http://[::1]:9000/anything", true),
        ("http://[::1]/anything", false),
    ] {
        assert_eq!(allowed(url), want, "{url}");
    }
}

#[test]
fn response_helpers_decode_and_report_decode_errors() {
    let host = FakeHost::new();
    host.allow_http(["http://svc.test"]);
    host.respond(
        "http://svc.test/doc",
        HttpReply::json(200, &json!({ "n": 1 })).header("ETag", "\"7\""),
    );
    host.respond(
        "http://svc.test/bin",
        HttpReply::status(200).body(vec![0xff, 0xfe]),
    );
    let doc = Request::get("http://svc.test/doc").send().unwrap();
    assert_eq!(doc.header("etag"), Some("\"7\""));
    assert_eq!(doc.json::<serde_json::Value>().unwrap()["n"], 1);
    assert!(matches!(doc.json::<Vec<u8>>(), Err(HttpError::Decode(_))));
    let bin = Request::get("http://svc.test/bin").send().unwrap();
    assert!(matches!(bin.text(), Err(HttpError::Decode(_))));
    // Nothing scripted: the fake's receiver answers 404 and says why.
    let missing = Request::get("http://svc.test/nothing").send().unwrap();
    assert_eq!(missing.status, 404);
    assert!(missing.text().unwrap().contains("no reply is scripted"));
}
