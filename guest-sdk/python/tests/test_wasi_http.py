"""The component's outbound HTTP (`leasehold._wasi_http`) run natively: the
bindings componentize-py generates from wit/controller.wit, with a small
`wasi:http` of this test's own behind them (fields, requests, bodies,
streams, futures and pollables that are not ready at first), so the
request that goes out, the poll loop, the order resources are released
in and the classification of the host's error codes are all checked
without a host."""

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leasehold import Controller, Description, Outcome
from leasehold import _host
from leasehold.http import (
    BodyTooLarge,
    Connection,
    Denied,
    Fenced,
    InvalidRequest,
    Limit,
    Request,
    Timeout,
)

WIT = Path(__file__).resolve().parents[3] / "wit"
WORLD = "leasehold:controller/controller@0.4.0"


def componentize_py() -> str:
    beside = Path(sys.executable).parent / "componentize-py"
    found = str(beside) if beside.exists() else shutil.which("componentize-py")
    if found is None:
        pytest.skip("componentize-py is not installed (cargo xtask installs it)")
    return found


@pytest.fixture(scope="module")
def bindings(tmp_path_factory):
    out = tmp_path_factory.mktemp("bindings")
    subprocess.run(
        [componentize_py(), "-d", str(WIT), "-w", WORLD, "bindings", str(out)],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(out))
    # Modules another test imported against its own bindings go first.
    for name in ("leasehold.component", "leasehold._wasi_http"):
        sys.modules.pop(name, None)
    try:
        from componentize_py_types import Err, Ok
        from wit_world.imports import streams
        from wit_world.imports import wasi_http_types as http

        yield type(
            "Bindings",
            (),
            dict(
                wasi=importlib.import_module("leasehold._wasi_http"),
                component=importlib.import_module("leasehold.component"),
                http=http,
                streams=streams,
                Err=Err,
                Ok=Ok,
            ),
        )
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith(("wit_world", "componentize_py"))]:
            del sys.modules[name]
        sys.modules.pop("leasehold.component", None)
        sys.modules.pop("leasehold._wasi_http", None)


class World:
    """This test's `wasi:http`: every resource logs what happens to it.

    `permits` are what successive `check-write`s allow (0: not ready
    until polled), `pending` how many `get`s of the response future find
    nothing yet, `chunks` what successive body reads return (b"": nothing
    yet; an exception instance: the read fails with it), `answer` what the
    future resolves to once ready (a response, or an `ErrorCode_*` value).
    """

    def __init__(self, b, permits=(4096,), pending=0, chunks=(b"",), status=200, headers=(), answer=None, refuse=None):
        self.b = b
        self.log = []
        self.permits = list(permits)
        self.pending = pending
        self.chunks = list(chunks)
        self.status = status
        self.headers = list(headers)
        self.answer = answer
        self.refuse = refuse
        self.sent = None
        self.options = None
        self.written = b""
        self.finished = 0
        self.polls = 0

    def install(self, monkeypatch):
        w, b = self, self.b
        http = b.http
        Err, Ok = b.Err, b.Ok

        class Pollable:
            def __init__(self, what):
                self.what = what
                self.is_ready = False

            def ready(self):
                return self.is_ready

            def __exit__(self, *a):
                w.log.append(f"drop pollable {self.what}")

        def poll(pollables):
            w.polls += 1
            for p in pollables:
                p.is_ready = True
            return [0]

        class Fields:
            def __init__(self, entries=None):
                self.items = list(entries or [])

            def append(self, name, value):
                if name.lower() in ("host", "connection"):
                    raise Err(http.HeaderError_Forbidden())
                self.items.append((name, value))

            def entries(self):
                return list(self.items)

            def __exit__(self, *a):
                w.log.append("drop fields")

        class OutputStream:
            def __init__(self):
                self.flushing = False

            def check_write(self):
                if self.flushing:
                    self.flushing = False
                    return 0
                return w.permits.pop(0) if len(w.permits) > 1 else w.permits[0]

            def write(self, data):
                assert isinstance(data, bytes) and len(data) <= 4096
                w.written += data
                w.log.append("write")

            def flush(self):
                w.log.append("flush")
                self.flushing = True

            def subscribe(self):
                return Pollable("output")

            def __exit__(self, *a):
                w.log.append("drop output-stream")

        class OutgoingBody:
            taken = False

            def write(self):
                if self.taken:
                    raise Err(None)
                self.taken = True
                return OutputStream()

            @classmethod
            def finish(cls, this, trailers):
                assert "drop output-stream" in w.log, "the stream must go before the body is finished"
                assert trailers is None
                w.finished += 1
                w.log.append("finish body")

            def __exit__(self, *a):
                w.log.append("drop outgoing-body")

        class OutgoingRequest:
            def __init__(self, headers):
                self.headers = headers
                self.parts = {}
                self.outgoing_body = None

            def set_method(self, m):
                self.parts["method"] = type(m).__name__

            def set_scheme(self, s):
                self.parts["scheme"] = type(s).__name__

            def set_authority(self, a):
                self.parts["authority"] = a

            def set_path_with_query(self, p):
                self.parts["path"] = p

            def body(self):
                self.outgoing_body = OutgoingBody()
                return self.outgoing_body

            def __exit__(self, *a):
                w.log.append("drop outgoing-request")

        class RequestOptions:
            def __init__(self):
                self.first_byte = None

            def set_first_byte_timeout(self, ns):
                self.first_byte = ns

        class InputStream:
            def read(self, n):
                assert n > 0
                if not w.chunks:
                    raise Err(b.streams.StreamError_Closed())
                chunk = w.chunks.pop(0)
                if isinstance(chunk, BaseException):
                    raise chunk
                return chunk

            def subscribe(self):
                return Pollable("input")

            def __exit__(self, *a):
                w.log.append("drop input-stream")

        class IncomingBody:
            def stream(self):
                return InputStream()

            def __exit__(self, *a):
                w.log.append("drop incoming-body")

        class IncomingResponse:
            def status(self):
                return w.status

            def headers(self):
                return Fields(w.headers)

            def consume(self):
                return IncomingBody()

            def __exit__(self, *a):
                w.log.append("drop incoming-response")

        class Future:
            def get(self):
                if w.pending > 0:
                    w.pending -= 1
                    return None
                if w.answer is not None:
                    return Ok(Err(w.answer))
                return Ok(Ok(IncomingResponse()))

            def subscribe(self):
                return Pollable("future")

            def __exit__(self, *a):
                w.log.append("drop future")

        def handle(request, options):
            if w.refuse is not None:
                raise Err(w.refuse)
            w.sent = request
            w.options = options
            w.log.append("handle")
            return Future()

        wasi = b.wasi
        monkeypatch.setattr(wasi._http, "Fields", Fields)
        monkeypatch.setattr(wasi._http, "OutgoingRequest", OutgoingRequest)
        monkeypatch.setattr(wasi._http, "OutgoingBody", OutgoingBody)
        monkeypatch.setattr(wasi._http, "RequestOptions", RequestOptions)
        monkeypatch.setattr(wasi._handler, "handle", handle)
        monkeypatch.setattr(wasi._poll, "poll", poll)
        _host.install(b.component.WitHost())
        return self


def io_error(b, text, code=None):
    """A stream's `last-operation-failed`, with the host's text and code behind it."""

    class IoError:
        def to_debug_string(self):
            return text

        def __exit__(self, *a):
            pass

    error = IoError()
    error.code = code
    return b.Err(b.streams.StreamError_LastOperationFailed(error))


@pytest.fixture
def world(bindings, monkeypatch):
    def make(**script):
        w = World(bindings, **script).install(monkeypatch)
        monkeypatch.setattr(bindings.wasi._http, "http_error_code", lambda e: e.code)
        return w

    return make


def test_a_put_goes_out_whole_with_its_length_after_the_pollables_are_ready(world, bindings):
    data = bytes(range(256)) * 40  # 10 240 bytes: three chunks of at most 4096
    w = world(
        permits=(0, 4096),
        pending=2,
        chunks=(b"", b'{"ok":', b"", b"true}"),
        status=201,
        headers=[("Content-Type", b"application/json")],
    )
    response = (
        Request.put("http://cloud.test:9000/buckets/b?x=1")
        .header("Idempotency-Key", "buckets/b@2/put")
        .body(data)
        .timeout(1500)
        .send()
    )
    assert (response.status, response.json()) == (201, {"ok": True})
    assert response.header("content-type") == "application/json"
    sent = w.sent
    assert sent.parts == {
        "method": "Method_Put",
        "scheme": "Scheme_Http",
        "authority": "cloud.test:9000",
        "path": "/buckets/b?x=1",
    }
    assert ("content-length", b"10240") in sent.headers.items
    assert ("Idempotency-Key", b"buckets/b@2/put") in sent.headers.items
    assert w.options.first_byte == 1_500_000_000
    # The body went out whole and finished: never dropped unfinished, never chunked.
    assert w.written == data and w.finished == 1
    assert "drop outgoing-body" not in w.log
    assert w.log.index("handle") < w.log.index("write")
    # The loop waited on the stream, the flush, the future and the body.
    assert w.polls >= 4
    for what in ("output", "future", "input"):
        assert f"drop pollable {what}" in w.log
    # Children before parents.
    order = [e for e in w.log if e.startswith("drop") and "pollable" not in e]
    assert order == [
        "drop output-stream",
        "drop future",
        "drop fields",
        "drop input-stream",
        "drop incoming-body",
        "drop incoming-response",
    ]


def test_a_get_sends_no_body_and_no_length(world):
    w = world(chunks=(b"pong",))
    assert Request.get("https://svc.test/ping").send().text() == "pong"
    assert w.sent.outgoing_body is None and w.finished == 0
    assert not [n for n, _ in w.sent.headers.items if n == "content-length"]
    assert w.sent.parts["scheme"] == "Scheme_Https" and w.options is None


def test_an_empty_post_states_a_zero_length_and_finishes_its_body(world):
    w = world()
    Request.post("http://svc.test/x").send()
    assert ("content-length", b"0") in w.sent.headers.items
    assert w.finished == 1 and w.written == b""


def test_the_futures_error_codes_are_classified(world, bindings):
    http = bindings.http
    for answer, expected, needle in [
        (http.ErrorCode_InternalError("leasehold-fenced: controller c: lost"), Fenced, "controller c: lost"),
        (http.ErrorCode_InternalError("leasehold-limit: 65 requests"), Limit, "65 requests"),
        (http.ErrorCode_ConnectionReadTimeout(), Timeout, "connection-read-timeout"),
        (http.ErrorCode_DnsError(http.DnsErrorPayload("NXDOMAIN", None)), Connection, "DNS-error (NXDOMAIN)"),
        (http.ErrorCode_HttpResponseBodySize(64), BodyTooLarge, "HTTP-response-body-size (64)"),
        (
            http.ErrorCode_HttpRequestHeaderSize(http.FieldSizePayload("x-big", 9000)),
            InvalidRequest,
            "x-big: 9000 bytes",
        ),
    ]:
        w = world(answer=answer)
        with pytest.raises(expected) as caught:
            Request.post("http://svc.test/x").body("{}").send()
        assert needle in str(caught.value), str(caught.value)
        assert "drop future" in w.log
    w = world(answer=http.ErrorCode_InternalError("leasehold-fenced: lost"))
    with pytest.raises(Fenced) as caught:
        Request.get("http://svc.test/x").send()
    assert caught.value.is_fenced


def test_a_refusal_by_handle_is_classified_and_the_body_released(world, bindings):
    w = world(refuse=bindings.http.ErrorCode_HttpRequestDenied())
    with pytest.raises(Denied) as caught:
        Request.post("http://svc.test/x?token=s3cret").body("x").send()
    assert caught.value.url == "http://svc.test/x"
    assert "drop outgoing-body" in w.log and w.finished == 0


def test_a_header_wasi_http_forbids_is_refused_before_anything_is_sent(world):
    w = world()
    with pytest.raises(InvalidRequest) as caught:
        Request.get("http://svc.test/").header("Host", "elsewhere").send()
    assert "forbidden by wasi:http" in str(caught.value)
    assert w.sent is None and "drop fields" in w.log


def test_a_body_stream_failure_is_classified_from_its_code_or_its_text(world, bindings):
    http = bindings.http
    for error, expected, needle in [
        (io_error(bindings, "ignored", http.ErrorCode_HttpResponseBodySize(5)), BodyTooLarge, "(5)"),
        (io_error(bindings, "internal error: leasehold-fenced: dropped on loss"), Fenced, "dropped on loss"),
        (io_error(bindings, "connection read timeout\nStack backtrace: ..."), Timeout, "connection-read-timeout"),
        (io_error(bindings, "hyper error: reset\nmore"), Connection, "hyper error: reset"),
    ]:
        world(chunks=(b"partial", error))
        with pytest.raises(expected) as caught:
            Request.get("http://svc.test/").send()
        assert needle in str(caught.value), str(caught.value)
        assert "more" not in str(caught.value) and "Stack" not in str(caught.value)


def test_every_error_code_of_the_bindings_has_its_wit_case(bindings):
    names = [n for n in dir(bindings.http) if n.startswith("ErrorCode_")]
    assert len(names) == 39
    for name in names:
        assert name.partition("_")[2] in bindings.wasi._CASES, name


class SendsOnce(Controller):
    """Sends one request in each reconcile."""

    def describe(self):
        return Description.watching(["things"])

    def reconcile(self, ctx, kind, name):
        Request.post("http://svc.test/apply").body("x").send()
        return Outcome.done()


def test_a_fenced_request_ends_the_components_reconcile_as_fenced(world, bindings, monkeypatch):
    from wit_world.exports import reconciler as rec

    w = world(answer=bindings.http.ErrorCode_InternalError("leasehold-fenced: lease lost"))
    reconciler = bindings.component.export(SendsOnce)
    monkeypatch.setattr(reconciler, "_controller", None)
    instance = reconciler()
    with pytest.raises(bindings.Err) as caught:
        instance.reconcile("things", "a", rec.ReconcileReason_Change())
    assert isinstance(caught.value.value, rec.ReconcileError_Fenced)
    assert "handle" in w.log
