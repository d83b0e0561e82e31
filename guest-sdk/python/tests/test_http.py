"""`leasehold.http` itself: the request builder, what goes to the host,
responses, idempotency keys, and the one classification of the host's
`error-code`s (the same table as the Rust SDK's `HttpError::from_code`)."""

import pytest

from leasehold import Controller, Description, HttpError, IdempotencyKey, Reply, Retry
from leasehold.http import (
    EPOCH_HEADER,
    ERROR_CODE_CASES,
    FENCED_PREFIX,
    HOLDER_HEADER,
    IDEMPOTENCY_KEY_HEADER,
    LEASE_HEADER,
    LIMIT_PREFIX,
    BodyTooLarge,
    Connection,
    Decode,
    Denied,
    ErrorCode,
    Fenced,
    InvalidRequest,
    Limit,
    Method,
    Protocol,
    Request,
    Response,
    Timeout,
    WireBuildError,
    WireCodeError,
    WireResponse,
    WireStreamError,
    _from_wire,
    _parse_url,
    classify,
    error_code_from_host_text,
    shown_url,
)


class Recording:
    """A host that records what `Request.send` hands it and answers 200."""

    def __init__(self, answer=None):
        self.sent = []
        self.answer = answer or WireResponse(200, (), b"")

    def http_send(self, wire):
        self.sent.append(wire)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def wire_host(monkeypatch):
    from leasehold import _host

    host = Recording()
    _host.install(host)
    yield host


def header(wire, name):
    return [v for n, v in wire.headers if n.lower() == name]


def test_the_fence_header_names_and_prefixes_are_the_hosts():
    assert (LEASE_HEADER, EPOCH_HEADER, HOLDER_HEADER) == (
        "leasehold-lease",
        "leasehold-epoch",
        "leasehold-holder",
    )
    assert IDEMPOTENCY_KEY_HEADER == "idempotency-key"
    assert (FENCED_PREFIX, LIMIT_PREFIX) == ("leasehold-fenced: ", "leasehold-limit: ")


def test_each_constructor_sets_its_method():
    made = [
        Request.get("http://s.test/").method,
        Request.head("http://s.test/").method,
        Request.post("http://s.test/").method,
        Request.put("http://s.test/").method,
        Request.patch("http://s.test/").method,
        Request.delete("http://s.test/").method,
    ]
    assert made == [Method.GET, Method.HEAD, Method.POST, Method.PUT, Method.PATCH, Method.DELETE]
    assert [m.has_body for m in made] == [False, False, True, True, True, False]


def test_headers_replace_case_insensitively_and_json_sets_its_content_type():
    request = Request.post("http://s.test/").header("Accept", "text/plain").header("accept", "application/json")
    assert request.headers == [("accept", "application/json")]
    request.json({"n": 1, "s": "é"})
    assert request.body_bytes == '{"n":1,"s":"é"}'.encode()
    assert ("content-type", "application/json") in request.headers
    assert Request.put("http://s.test/").body("on").body_bytes == b"on"
    key = IdempotencyKey.for_action("tasks", "t1", 3, "notify")
    assert Request.post("http://s.test/").idempotency_key(key).headers == [
        ("idempotency-key", "tasks/t1@3/notify")
    ]
    assert Request.get("http://s.test/").timeout(500).timeout_ms == 500
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError):
            Request.get("http://s.test/").timeout(bad)


def test_content_length_is_always_stated_so_no_body_goes_chunked(wire_host):
    Request.post("http://s.test/a").send()
    Request.put("http://s.test/a").body("hello").header("Content-Length", "99").send()
    Request.patch("http://s.test/a").json([1, 2]).send()
    Request.delete("http://s.test/a").body(b"x" * 3).send()
    Request.get("http://s.test/a").send()
    Request.delete("http://s.test/a").send()
    sent = wire_host.sent
    assert [header(w, "content-length") for w in sent] == [["0"], ["5"], ["5"], ["3"], [], []]
    # A POST without a body still sends one, empty; a GET without one sends none.
    assert (sent[0].body, sent[4].body) == (b"", None)
    # The guest's own Content-Length, which could disagree with the bytes, is gone.
    assert "99" not in [v for n, v in sent[1].headers]


def test_the_url_is_taken_apart_as_wasi_http_wants_it(wire_host):
    Request.get("HTTPS://Api.Example.com:8443/v1/things?x=1&y=2#frag").timeout(1500).send()
    wire = wire_host.sent[0]
    assert (wire.scheme, wire.authority, wire.path_with_query, wire.timeout_ms) == (
        "https",
        "Api.Example.com:8443",
        "/v1/things?x=1&y=2",
        1500,
    )
    t = _parse_url("http://svc.test")
    assert (t.port, t.path_with_query) == (80, "/")
    assert _parse_url("http://svc.test?q").path_with_query == "/?q"
    t = _parse_url("http://[::1]:9000/hooks")
    assert (t.host, t.port) == ("[::1]", 9000)
    assert _parse_url("https://[fe80::1]").port == 443


@pytest.mark.parametrize(
    "url, needle",
    [
        ("", "empty"),
        ("svc.test/x", "no scheme"),
        ("ftp://svc.test/x", "only http and https"),
        ("http:///x", "no host"),
        ("http://svc.test:http/", "port is not a number"),
        ("http://svc.test:70000/", "between 1 and 65535"),
        ("http://svc.test:0/", "between 1 and 65535"),
        ("http://svc test/", "space"),
        ("http://svc.test/é", "non-ASCII"),
        ("http://svc.test/a|b", "percent-encode"),
        ("http://sv*c.test/", "host is not"),
        ("http://[::1/", "closing"),
        ("http://[::1]x/", "after its IPv6 host"),
        ("https://bob:hunter2@svc.test/?token=abc", "user information"),
    ],
)
def test_bad_urls_are_refused_before_sending_without_repeating_secrets(wire_host, url, needle):
    with pytest.raises(InvalidRequest) as caught:
        Request.get(url).send()
    assert needle in str(caught.value) and "nothing was sent" in str(caught.value)
    assert "hunter2" not in str(caught.value) and "token" not in str(caught.value)
    assert wire_host.sent == []


def test_bad_headers_are_refused_naming_the_header_not_its_value(wire_host):
    for name, value in [("", "v"), ("bad name", "v"), ("bad:name", "v"), ("Authorization", "Bearer s3cret\r\nX-Evil: 1")]:
        with pytest.raises(InvalidRequest) as caught:
            Request.get("http://s.test/").header(name, value).send()
        assert "s3cret" not in str(caught.value)
    assert "Authorization" in str(caught.value)
    Request.get("http://s.test/").header("X-Api-Key", "abc\tdef").send()
    assert len(wire_host.sent) == 1


def test_a_json_body_that_does_not_serialize_is_refused_at_send(wire_host):
    with pytest.raises(InvalidRequest) as caught:
        Request.post("http://s.test/").json({"x": object()}).send()
    assert "does not serialize" in str(caught.value)
    assert wire_host.sent == []


def test_shown_urls_drop_credentials_and_queries():
    assert shown_url("https://bob:hunter2@svc.test/a/b?token=abc#f") == "https://svc.test/a/b"
    assert shown_url("http://svc.test") == "http://svc.test"
    assert shown_url("not a url?secret") == "not a url"
    shown = repr(Request.post("https://svc.test/x?token=abc").header("Authorization", "Bearer s3cret").body("secret body"))
    assert "Authorization" in shown and "s3cret" not in shown and "token" not in shown and "secret body" not in shown
    response = Response(200, [("Set-Cookie", "session=s3cret")], b"s3cret")
    assert "s3cret" not in repr(response)


def test_responses_decode_their_bodies():
    response = Response(200, [("ETag", '"v7"'), ("etag", "second")], b'{"id": 7}')
    assert response.header("etag") == '"v7"' and response.header("age") is None
    assert response.json() == {"id": 7} and response.text() == '{"id": 7}'
    assert response.is_success and Response(204, [], b"").is_success
    assert not Response(409, [], b"").is_success and not Response(199, [], b"").is_success
    with pytest.raises(Decode):
        Response(200, [], b"not json").json()
    with pytest.raises(Decode):
        Response(200, [], b"\xff\xfe").text()


def test_the_answer_comes_back_as_a_response(wire_host):
    wire_host.answer = WireResponse(201, (("Content-Type", b"application/json"), ("X-Odd", b"\xff")), b'{"ok":true}')
    response = Request.post("http://s.test/").send()
    assert response.status == 201 and response.json() == {"ok": True}
    assert response.header("x-odd") == "\ufffd"


def test_idempotency_keys_are_the_rust_sdks_keys():
    # The Rust SDK's own fixed values (guest-sdk/src/http.rs): the form is
    # part of the contract, so a Python guest and a Rust guest send the
    # same key for the same decision.
    assert str(IdempotencyKey.for_action("tasks", "t1", 7, "notify")) == "tasks/t1@7/notify"
    assert (
        IdempotencyKey.for_action("k", "n@x", 2**64 - 1, "a b/ü%").as_str()
        == "k/n%40x@18446744073709551615/a%20b%2F%C3%BC%25"
    )
    assert IdempotencyKey.for_action("orders", "o-17", 42, "charge card").value == "orders/o-17@42/charge%20card"
    assert IdempotencyKey.for_action("a", "b/c", 1, "d").value == "a/b%2Fc@1/d"
    assert IdempotencyKey.for_action("x", "A.b_c~d", 0, "z").value == "x/A.b_c~d@0/z"
    assert IdempotencyKey.for_action("a@1", "b", 2, "c") != IdempotencyKey.for_action("a", "1@b", 2, "c")
    for bad in (-1, 2**64, True, 1.0, "1"):
        with pytest.raises(ValueError):
            IdempotencyKey.for_action("k", "n", bad, "a")


# The Rust SDK's classification, case by case (HttpError::from_code).
EXPECTED_CLASSES = {
    "DNS-timeout": Timeout,
    "DNS-error": Connection,
    "destination-not-found": Connection,
    "destination-unavailable": Connection,
    "destination-IP-prohibited": Connection,
    "destination-IP-unroutable": Connection,
    "connection-refused": Connection,
    "connection-terminated": Connection,
    "connection-timeout": Timeout,
    "connection-read-timeout": Timeout,
    "connection-write-timeout": Timeout,
    "connection-limit-reached": Connection,
    "TLS-protocol-error": Connection,
    "TLS-certificate-error": Connection,
    "TLS-alert-received": Connection,
    "HTTP-request-denied": Denied,
    "HTTP-request-length-required": InvalidRequest,
    "HTTP-request-body-size": BodyTooLarge,
    "HTTP-request-method-invalid": InvalidRequest,
    "HTTP-request-URI-invalid": InvalidRequest,
    "HTTP-request-URI-too-long": InvalidRequest,
    "HTTP-request-header-section-size": InvalidRequest,
    "HTTP-request-header-size": InvalidRequest,
    "HTTP-request-trailer-section-size": InvalidRequest,
    "HTTP-request-trailer-size": InvalidRequest,
    "HTTP-response-incomplete": Protocol,
    "HTTP-response-header-section-size": Protocol,
    "HTTP-response-header-size": Protocol,
    "HTTP-response-body-size": BodyTooLarge,
    "HTTP-response-trailer-section-size": Protocol,
    "HTTP-response-trailer-size": Protocol,
    "HTTP-response-transfer-coding": Protocol,
    "HTTP-response-content-coding": Protocol,
    "HTTP-response-timeout": Timeout,
    "HTTP-upgrade-failed": Protocol,
    "HTTP-protocol-error": Protocol,
    "loop-detected": Protocol,
    "configuration-error": Protocol,
    "internal-error": Protocol,
}


def test_every_error_code_is_classified_as_the_rust_sdk_does():
    at, url = "POST http://svc.test/x", "http://svc.test/x"
    assert set(EXPECTED_CLASSES) == set(ERROR_CODE_CASES)
    for case, expected in EXPECTED_CLASSES.items():
        error = classify(ErrorCode(case), at, url)
        assert type(error) is expected, case
        assert isinstance(error, HttpError) and not error.is_fenced, case
        if expected is not Denied:
            assert at in str(error), case
    assert classify(ErrorCode("HTTP-request-denied"), at, url).url == url


def test_the_hosts_own_refusals_come_as_internal_error_prefixes():
    at, url = "POST http://svc.test/x", "http://svc.test/x"
    fenced = classify(ErrorCode("internal-error", (f"{FENCED_PREFIX}lease lost",)), at, url)
    assert type(fenced) is Fenced and fenced.is_fenced and fenced.why == f"{at}: lease lost"
    assert str(fenced) == f"no longer the leader, stopping: {at}: lease lost"
    limit = classify(ErrorCode("internal-error", (f"{LIMIT_PREFIX}65 requests",)), at, url)
    assert type(limit) is Limit and not limit.is_fenced
    # Nothing else is ever taken for fenced.
    for text in ["leasehold-fenced without the space", "boom", None]:
        error = classify(ErrorCode("internal-error", (text,)), at, url)
        assert type(error) is Protocol and not error.is_fenced
    assert type(classify(ErrorCode("internal-error"), at, url)) is Protocol


def test_failures_on_the_guests_side_are_typed():
    at = "GET http://svc.test/"
    build = _from_wire(WireBuildError("forbidden header"), at, "")
    assert type(build) is InvalidRequest and "forbidden header" in str(build)
    stream = _from_wire(WireStreamError("reset"), at, "")
    assert type(stream) is Connection and "reset" in str(stream)
    assert type(_from_wire(WireCodeError(ErrorCode("connection-refused")), at, "")) is Connection


def test_error_codes_show_their_case_and_payload():
    assert str(ErrorCode("connection-refused")) == "connection-refused"
    assert str(ErrorCode("HTTP-request-body-size", (5,))) == "HTTP-request-body-size (5)"
    assert str(ErrorCode("DNS-error", ("NXDOMAIN", None))) == "DNS-error (NXDOMAIN)"
    assert ErrorCode("internal-error", ("x",)).message == "x"
    assert ErrorCode("connection-refused", ("x",)).message is None


def test_the_hosts_stream_error_texts_are_recognized():
    # wasmtime-wasi-http's texts, as the Rust SDK's test lists them.
    for text, code in [
        ("HTTP response body size exceeds limit: 65536 bytes", ErrorCode("HTTP-response-body-size", (65536,))),
        ("HTTP response body size exceeds limit", ErrorCode("HTTP-response-body-size", (None,))),
        ("HTTP request body size exceeds limit: 9 bytes", ErrorCode("HTTP-request-body-size", (9,))),
        (
            "internal error: leasehold-fenced: controller c: lost",
            ErrorCode("internal-error", ("leasehold-fenced: controller c: lost",)),
        ),
        ("internal error", ErrorCode("internal-error")),
        ("connection read timeout", ErrorCode("connection-read-timeout")),
        ("connection timeout", ErrorCode("connection-timeout")),
        ("connection terminated", ErrorCode("connection-terminated")),
        ("HTTP response timeout", ErrorCode("HTTP-response-timeout")),
        ("incomplete HTTP response", ErrorCode("HTTP-response-incomplete")),
        ("connection read timeout\n\nStack backtrace:\n   0: ...", ErrorCode("connection-read-timeout")),
    ]:
        assert error_code_from_host_text(text) == code, text
    for text in [
        "hyper error: connection closed before message completed",
        "HTTP response body size exceeds limit: many bytes",
        "connection read timeout, and more",
        "",
    ]:
        assert error_code_from_host_text(text) is None, text


class Calls(Controller):
    """Sends one request and lets what it raises go to the host."""

    def __init__(self, policy=None):
        self.policy = policy

    def describe(self):
        return Description.watching(["things"])

    def reconcile(self, ctx, kind, name):
        Request.post("http://svc.test/apply").send()
        raise AssertionError("unreachable in these tests")

    def error_policy(self, ctx, kind, name, error):
        return self.policy or super().error_policy(ctx, kind, name, error)


def test_a_fenced_request_ends_the_reconcile_as_fenced_whatever_the_policy(host):
    host.allow_http("http://svc.test")
    host.revoke()
    assert host.reconcile(Calls(Retry.after(5)), "things", "a") == Reply("fenced")


def test_other_http_errors_are_failures_the_policy_delays(host):
    reply = host.reconcile(Calls(Retry.after(5)), "things", "a")
    assert reply.is_failed and reply.delay_ms == 5 and "http_allow" in reply.message
