"""The fake host's outbound HTTP: the host's rules (deny by default, fence
headers, refusal after loss, bounds), the scripted receiver, and the
faults on the wire, as the Rust fake (guest-sdk/src/fake/http.rs) has them."""

import pytest

from leasehold import Api, Controller, Description, IdempotencyKey, Outcome, Reply
from leasehold.fake import FakeHost, HttpFault, HttpRecord, HttpReply, Limits
from leasehold.http import (
    BodyTooLarge,
    Connection,
    Denied,
    Fenced,
    InvalidRequest,
    Limit,
    Method,
    Request,
    Timeout,
)

SVC = "http://svc.test"


def test_nothing_is_reachable_until_allowed_and_denied_requests_never_leave(host):
    with pytest.raises(Denied) as caught:
        Request.post("http://billing.test/v1/invoices?token=s3cret").send()
    assert caught.value.url == "http://billing.test/v1/invoices"
    assert "s3cret" not in str(caught.value)
    assert host.http_requests() == []


def test_allow_entries_follow_the_hosts_prefix_rules(host):
    host.allow_http(["http://svc.test/hooks/", "https://api.example.com:8443", "http://svc.test/exact"])
    allowed = [
        "http://svc.test/hooks/a",
        "https://API.example.com:8443/x",
        "http://svc.test/exact",
        "http://svc.test/exact/below",
    ]
    denied = [
        "http://svc.test/other",
        "https://api.example.com/x",
        "http://svc.test/exactly",
        "http://svc.test/hooks/../admin",
        "http://svc.test/hooks/%2e%2e/admin",
        "http://svc.test/hooks/a%2fb",
        "https://svc.test/hooks/a",
    ]
    for url in allowed:
        Request.get(url).send()
    for url in denied:
        with pytest.raises(Denied):
            Request.get(url).send()
    assert [r.url for r in host.http_requests()] == [
        "http://svc.test/hooks/a",
        "https://API.example.com:8443/x",
        "http://svc.test/exact",
        "http://svc.test/exact/below",
    ]
    for bad in ["http://svc.test/#f", "http://svc.test/?q=1", "http://svc.test/a/../b", "ftp://x"]:
        with pytest.raises(ValueError):
            host.allow_http(bad)


def test_the_host_stamps_the_fence_and_replaces_what_the_guest_set(host):
    host.allow_http(SVC)
    key = IdempotencyKey.for_action("orders", "o1", 42, "invoice")
    Request.post(f"{SVC}/v1/invoices").json({"order": "o1"}).idempotency_key(key).header(
        "Leasehold-Epoch", "999"
    ).header("X-Trace", "t1").timeout(2000).send()
    sent = host.http_requests()[0]
    assert sent.header("leasehold-epoch") == "1" and sent.epoch == 1
    assert sent.header("Leasehold-Lease") == "test/controller"
    assert sent.header("leasehold-holder") == "fake-host"
    assert [v for n, v in sent.headers if n == "leasehold-epoch"] == ["1"]
    assert sent.header("idempotency-key") == "orders/o1@42/invoice"
    assert sent.header("x-trace") == "t1"
    assert sent.header("content-length") == "14"
    assert all(n == n.lower() for n, _ in sent.headers)
    assert (sent.method, sent.timeout_ms, sent.body_json()) == (Method.POST, 2000, {"order": "o1"})
    host.new_tenure()
    Request.get(f"{SVC}/").send()
    assert host.http_requests()[1].header("leasehold-epoch") == "2"


def test_after_the_lease_is_lost_nothing_more_is_sent(host):
    host.allow_http(SVC)
    Request.get(f"{SVC}/").send()
    host.revoke()
    with pytest.raises(Fenced) as caught:
        Request.post(f"{SVC}/apply").send()
    assert caught.value.is_fenced and "lease is lost" in str(caught.value)
    assert len(host.http_requests()) == 1


def test_scripted_replies_rank_exact_over_prefix_and_queue_one_shots(host):
    host.allow_http(SVC)
    host.respond(f"{SVC}/*", HttpReply(202))
    host.respond(f"{SVC}/health", HttpReply.text(200, "ok"))
    host.respond(f"{SVC}/jobs/*", HttpReply(203))
    assert Request.get(f"{SVC}/health").send().text() == "ok"
    assert Request.post(f"{SVC}/other").send().status == 202
    assert Request.post(f"{SVC}/jobs/1").send().status == 203
    host.respond_once(f"{SVC}/jobs", HttpReply(503))
    host.respond_once(f"{SVC}/jobs", HttpReply.json(201, {"id": 1}).header("ETag", '"7"'))
    host.respond(f"{SVC}/jobs", HttpReply(200))
    answers = [Request.post(f"{SVC}/jobs").send() for _ in range(3)]
    assert [a.status for a in answers] == [503, 201, 200]
    assert answers[1].json() == {"id": 1} and answers[1].header("etag") == '"7"'


def test_an_unscripted_url_is_answered_404(host):
    host.allow_http(SVC)
    response = Request.put(f"{SVC}/things/a?dry=1").body("x").send()
    assert response.status == 404 and "no reply is scripted" in response.text()
    sent = host.http_requests()[0]
    assert (sent.url, sent.body, sent.status, sent.delivered) == (f"{SVC}/things/a?dry=1", b"x", 404, True)


def test_a_responder_is_a_receiver_with_state(host):
    host.allow_http(SVC)
    applied = {}
    highest = [0]

    def receiver(request: HttpRecord) -> HttpReply:
        assert request.delivered
        epoch = int(request.header("leasehold-epoch"))
        if epoch < highest[0]:
            return HttpReply.json(409, {"error": "stale epoch"})
        highest[0] = epoch
        key = request.header("idempotency-key")
        applied.setdefault(key, 201)
        return HttpReply(applied[key])

    host.respond_with(f"{SVC}/apply", receiver)
    key = IdempotencyKey.for_action("jobs", "j1", 5, "apply")
    assert Request.post(f"{SVC}/apply").idempotency_key(key).send().status == 201
    host.new_tenure()
    assert Request.post(f"{SVC}/apply").idempotency_key(key).send().status == 201
    assert list(applied) == ["jobs/j1@5/apply"]


def test_refused_and_timed_out_connections_deliver_nothing_and_keep_the_script(host):
    host.allow_http(SVC)
    host.respond_once(f"{SVC}/x", HttpReply(201))
    host.fail_next_http(HttpFault.REFUSED)
    with pytest.raises(Connection) as caught:
        Request.get(f"{SVC}/x").send()
    assert "connection-refused" in str(caught.value)
    host.fail_next_http(HttpFault.TIMEOUT)
    with pytest.raises(Timeout) as timed_out:
        Request.get(f"{SVC}/x").send()
    assert "connection-timeout" in str(timed_out.value)
    # The receiver never saw either: its one-shot reply is still there.
    assert Request.get(f"{SVC}/x").send().status == 201
    assert [(r.delivered, r.status) for r in host.http_requests()] == [(False, None), (False, None), (True, 201)]


def test_a_lost_reply_was_delivered_and_applied(host):
    host.allow_http(SVC)
    seen = []
    host.respond_with(f"{SVC}/apply", lambda r: seen.append(r) or HttpReply(201))
    host.fail_next_http(HttpFault.REPLY_LOST)
    with pytest.raises(Connection) as caught:
        Request.post(f"{SVC}/apply").send()
    assert "connection-terminated" in str(caught.value)
    host.fail_next_http(HttpFault.REPLY_TIMED_OUT)
    with pytest.raises(Timeout) as timed_out:
        Request.post(f"{SVC}/apply").send()
    assert "connection-read-timeout" in str(timed_out.value)
    assert len(seen) == 2
    assert [(r.delivered, r.status) for r in host.http_requests()] == [(True, 201), (True, 201)]


def test_a_fenced_fault_loses_the_lease_before_sending(host):
    host.allow_http(SVC)
    host.seed("things", "a", 1)
    host.fail_next_http(HttpFault.FENCED)
    with pytest.raises(Fenced):
        Request.get(f"{SVC}/").send()
    assert host.http_requests() == [] and host.is_revoked
    from leasehold import Fenced as StoreFenced

    with pytest.raises(StoreFenced):
        Api("things").get("a")


def test_faults_are_aimed_by_request_number(host):
    host.allow_http(SVC)
    host.fail_http(2, HttpFault.TIMEOUT)
    assert host.pending_faults == 1
    Request.get(f"{SVC}/").send()
    with pytest.raises(Timeout):
        Request.get(f"{SVC}/").send()
    assert not host.http_requests()[1].delivered and host.pending_faults == 0
    # A fault aimed at a request the host refuses anyway is used up.
    host.fail_next_http(HttpFault.REPLY_LOST)
    with pytest.raises(Denied):
        Request.get("http://elsewhere.test/").send()
    Request.get(f"{SVC}/").send()
    assert host.pending_faults == 0
    with pytest.raises(ValueError):
        host.fail_http(0, HttpFault.TIMEOUT)


def test_forbidden_headers_are_refused_as_wasi_http_does(host):
    host.allow_http(SVC)
    for name in ["Host", "connection", "Transfer-Encoding"]:
        with pytest.raises(InvalidRequest) as caught:
            Request.get(f"{SVC}/").header(name, "x").send()
        assert "forbidden" in str(caught.value)
    assert host.http_requests() == []


def test_bodies_over_the_bounds_are_refused():
    host = FakeHost(Limits(http_request_body_bytes=4, http_response_body_bytes=3))
    host.allow_http(SVC)
    with pytest.raises(BodyTooLarge):
        Request.post(f"{SVC}/").body(b"12345").send()
    assert host.http_requests() == []
    host.respond(f"{SVC}/big", HttpReply(200, body=b"1234"))
    with pytest.raises(BodyTooLarge):
        Request.get(f"{SVC}/big").send()
    assert host.http_requests()[0].delivered


class Sends(Controller):
    """Sends `n` requests in each reconcile."""

    def __init__(self, n):
        self.n = n

    def describe(self):
        return Description.watching(["things"])

    def reconcile(self, ctx, kind, name):
        for _ in range(self.n):
            Request.get(f"{SVC}/").send()
        return Outcome.done()


def test_each_reconcile_has_its_own_request_budget():
    host = FakeHost(Limits(http_requests_per_reconcile=2))
    host.allow_http(SVC)
    host.seed("things", "a", 1)
    assert host.reconcile(Sends(2), "things", "a") == Reply("done")
    assert host.reconcile(Sends(2), "things", "a") == Reply("done")
    reply = host.reconcile(Sends(3), "things", "a")
    assert reply.is_failed and "host limit" in reply.message and "2 requests" in reply.message
    assert host.resync(Sends(2))[0][1] == Reply("done")
    assert len(host.http_requests()) == 8
    with pytest.raises(Limit):
        # Outside a reconcile the budget left by the last one applies.
        Request.get(f"{SVC}/").send()
