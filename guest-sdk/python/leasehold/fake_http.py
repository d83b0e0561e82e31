"""The fake host's outbound HTTP: the host's rules for what may leave, a
scripted receiver, faults on the wire, and a record of every request.

`leasehold.fake.FakeHost` uses this module; tests reach it through the
host's methods (`allow_http`, `respond`, `respond_once`, `respond_with`,
`fail_http`, `fail_next_http`, `http_requests`) and the classes here
(`HttpReply`, `HttpFault`, `HttpRecord`, also importable from
`leasehold.fake`). The rules are the host's, in its order: a header
`wasi:http` forbids, the lease, the allow list, the bounds. A request the
host refuses is refused here too, a guest's fence header never reaches
the receiver, and a request the receiver never saw is never recorded as
delivered.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Deque, Iterable, List, Optional, Tuple, Union

from .fence import Fence
from .http import (
    EPOCH_HEADER,
    FENCED_PREFIX,
    HOLDER_HEADER,
    LEASE_HEADER,
    LIMIT_PREFIX,
    ErrorCode,
    Method,
    WireBuildError,
    WireCodeError,
    WireRequest,
    WireResponse,
    _parse_url,
    _Target,
)


@dataclass(frozen=True)
class HttpReply:
    """What the fake's receiver answers: a status, headers and a body.

    `HttpReply(204)` is a bare status; `HttpReply.json(201, {...})` and
    `HttpReply.text(503, "...")` set a body and its `content-type`;
    `.header(name, value)` returns a copy with one more header. A `str`
    body is sent as UTF-8.
    """

    status: int
    headers: Tuple[Tuple[str, str], ...] = ()
    body: bytes = b""

    def __post_init__(self) -> None:
        if isinstance(self.body, str):
            object.__setattr__(self, "body", self.body.encode("utf-8"))
        object.__setattr__(self, "headers", tuple((n, v) for n, v in self.headers))

    @staticmethod
    def json(status: int, value: Any) -> "HttpReply":
        """A reply with `value` as a JSON body (`ValueError`/`TypeError` if it does not serialize:
        the test's script is wrong)."""
        body = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return HttpReply(status, (("content-type", "application/json"),), body.encode("utf-8"))

    @staticmethod
    def text(status: int, text: str) -> "HttpReply":
        """A reply with `text` as a plain-text body."""
        return HttpReply(status, (("content-type", "text/plain; charset=utf-8"),), text.encode("utf-8"))

    def header(self, name: str, value: str) -> "HttpReply":
        """A copy with the header `name: value` added."""
        return replace(self, headers=self.headers + ((name, value),))


class HttpFault(Enum):
    """A failure on the wire that `FakeHost.fail_http` injects into an
    outbound request. The host's own refusals (not in `http_allow`, a
    bound reached, the lease lost) need no fault: the fake applies them."""

    #: The receiver refuses the connection: nothing is delivered; the
    #: request raises `leasehold.http.Connection` (`connection-refused`).
    REFUSED = "refused"
    #: The connection is not open within the connect timeout: nothing is
    #: delivered; `leasehold.http.Timeout` (`connection-timeout`).
    TIMEOUT = "timeout"
    #: The receiver gets the request and applies it (its scripted reply is
    #: used up), then the connection drops before the answer arrives:
    #: `leasehold.http.Connection` (`connection-terminated`). The guest
    #: cannot tell the effect happened: what an idempotency key is for.
    REPLY_LOST = "reply-lost"
    #: As `REPLY_LOST`, but the answer does not come within the first-byte
    #: timeout: `leasehold.http.Timeout` (`connection-read-timeout`).
    REPLY_TIMED_OUT = "reply-timed-out"
    #: The lease is lost just before the request: `leasehold.http.Fenced`,
    #: nothing is sent, and every later call is fenced too (as `Fault.FENCED`).
    FENCED = "fenced"


@dataclass(frozen=True)
class HttpRecord:
    """A request that left the fake host, as the receiver saw it (or would
    have, for one that was never delivered)."""

    method: Method
    #: `scheme://authority/path?query` as sent (no fragment; an empty path is `/`).
    url: str
    #: As the receiver sees them: names lowercased, the guest's in order
    #: (with the SDK's `content-length`), then the host's `leasehold-lease`,
    #: `leasehold-epoch` and `leasehold-holder` (the guest's are gone).
    headers: Tuple[Tuple[str, str], ...]
    #: The body (empty if there was none).
    body: bytes
    #: The first-byte timeout the guest asked for, in milliseconds.
    timeout_ms: Optional[int]
    #: The epoch of the fence it was sent under.
    epoch: int
    #: Whether the receiver got it (and, for a scripted receiver, acted on
    #: it): false after `HttpFault.REFUSED` or `HttpFault.TIMEOUT`.
    delivered: bool
    #: What the receiver answered, whether or not the answer reached the
    #: guest; None if it never answered.
    status: Optional[int]

    def header(self, name: str) -> Optional[str]:
        """The first value of header `name`, compared case-insensitively; None if absent."""
        lowered = name.lower()
        for n, v in self.headers:
            if n == lowered:
                return v
        return None

    def body_json(self) -> Any:
        """The body parsed as JSON, for assertions; None if it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError:
            return None


#: What `FakeHost.respond_with` takes: the request as recorded, to the reply.
Responder = Callable[[HttpRecord], HttpReply]


@dataclass
class _Route:
    """The replies scripted for one URL pattern (exact, or a prefix ending in `*`)."""

    pattern: str
    once: Deque[HttpReply] = field(default_factory=deque)
    standing: Optional[Union[HttpReply, Responder]] = None

    def rank(self, url: str) -> Optional[int]:
        # Exact matches rank above every prefix, longer prefixes above shorter.
        if self.pattern.endswith("*"):
            prefix = self.pattern[:-1]
            return len(prefix) if url.startswith(prefix) else None
        return (1 << 62) if self.pattern == url else None

    def can_answer(self) -> bool:
        return bool(self.once) or self.standing is not None


def _has_dot_segment(path: str) -> bool:
    """Whether `path` has a `.` or `..` segment, raw or percent-encoded, or
    an encoded separator: a server may resolve `/hooks/../admin` to
    `/admin`, outside an allowed prefix, so the host refuses such paths."""
    lowered = path.lower().replace("%2e", ".")
    segments = lowered.replace("\\", "/").split("/")
    return any(s in (".", "..") for s in segments) or "%2f" in lowered or "%5c" in lowered


@dataclass(frozen=True)
class _AllowEntry:
    """One `http_allow` entry, parsed as the host parses it."""

    scheme: str
    host: str
    port: int
    #: None allows every path of the origin.
    path_prefix: Optional[str]

    @staticmethod
    def parse(text: str) -> "_AllowEntry":
        if "#" in text:
            raise ValueError("an entry has no fragment")
        target = _parse_url(text)
        if target.query is not None:
            raise ValueError("an entry is scheme://host[:port][/path-prefix], without a query")
        if target.path == "/":
            prefix = None
        elif _has_dot_segment(target.path):
            raise ValueError("an entry's path has a `.` or `..` segment")
        else:
            prefix = target.path
        return _AllowEntry(target.scheme, target.host, target.port, prefix)

    def allows(self, target: _Target) -> bool:
        # A prefix ending in `/` matches paths under it; one without matches
        # itself and paths under it (`/hooks`: `/hooks`, `/hooks/a`, not `/hookshot`).
        if (target.scheme, target.host, target.port) != (self.scheme, self.host, self.port):
            return False
        prefix = self.path_prefix
        if prefix is None:
            return True
        if prefix.endswith("/"):
            return target.path.startswith(prefix)
        return target.path == prefix or target.path.startswith(prefix + "/")


#: The headers `wasi:http` refuses from a guest (wasmtime's default list).
FORBIDDEN_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "host",
        "http2-settings",
    }
)


@dataclass(frozen=True)
class HttpLimits:
    """The outbound bounds the fake applies (the host's defaults unless given)."""

    #: Requests admitted per reconcile.
    requests_per_reconcile: int
    #: Largest request body in bytes.
    request_body_bytes: int
    #: Largest response body in bytes.
    response_body_bytes: int


class HttpState:
    """The fake host's outbound HTTP: allow list, scripted routes, faults
    and records. `FakeHost` owns one; its methods are the way in."""

    def __init__(self) -> None:
        self._allow: List[_AllowEntry] = []
        self._routes: List[_Route] = []
        # (request number it strikes, fault), numbers counting every send.
        self._faults: List[Tuple[int, HttpFault]] = []
        self._sent = 0
        self._this_reconcile = 0
        self._records: List[HttpRecord] = []

    def begin_reconcile(self) -> None:
        """A reconcile begins: its request budget is fresh."""
        self._this_reconcile = 0

    @property
    def pending_faults(self) -> int:
        """HTTP faults not met yet."""
        return len(self._faults)

    def allow(self, entries: Union[str, Iterable[str]]) -> None:
        """Add `http_allow` entries (`ValueError` naming a malformed one)."""
        if isinstance(entries, str):
            entries = [entries]
        parsed = []
        for entry in entries:
            try:
                parsed.append(_AllowEntry.parse(entry))
            except ValueError as e:
                raise ValueError(f"http_allow entry {json.dumps(entry)}: {e}") from None
        self._allow.extend(parsed)

    def route(self, pattern: str) -> _Route:
        """The route of `pattern`, created empty if new."""
        for route in self._routes:
            if route.pattern == pattern:
                return route
        route = _Route(pattern)
        self._routes.append(route)
        return route

    def fail(self, n: int, fault: HttpFault) -> None:
        """Aim `fault` at the n-th request from now (1: the next)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("positions count from 1 (the next request)")
        self._faults.append((self._sent + n, fault))

    def records(self) -> List[HttpRecord]:
        """Every request that left, in order."""
        return list(self._records)

    def _answer(self, url: str) -> Union[HttpReply, Responder]:
        """The scripted answer for `url`, using up a one-shot reply."""
        ranked = [(r.rank(url), r) for r in self._routes if r.can_answer()]
        matching = [(rank, r) for rank, r in ranked if rank is not None]
        if not matching:
            return HttpReply.text(404, f"FakeHost: no reply is scripted for {url}")
        route = max(matching, key=lambda pair: pair[0])[1]
        if route.once:
            return route.once.popleft()
        assert route.standing is not None
        return route.standing

    def send(
        self,
        request: WireRequest,
        fence: Fence,
        revoked: bool,
        revoke: Callable[[], None],
        limits: HttpLimits,
    ) -> WireResponse:
        """Serve one outbound request as the host would: admit it in the
        host's order, let the scripted receiver answer, apply the fault
        aimed at it, record it. Raises the `WireHttpError` the host would."""
        self._sent += 1
        fault = None
        for i, (at, f) in enumerate(self._faults):
            if at == self._sent:
                fault = f
                del self._faults[i]
                break
        # `wasi:http` refuses a forbidden header while the request is built.
        for name, _ in request.headers:
            if name.lower() in FORBIDDEN_HEADERS:
                raise WireBuildError(f"header {json.dumps(name)} is forbidden by wasi:http")
        if fault is HttpFault.FENCED:
            revoke()
            revoked = True
        if revoked:
            raise WireCodeError(
                ErrorCode(
                    "internal-error",
                    (
                        f"{FENCED_PREFIX}controller {fence.lease}: {fence}: the lease is lost; "
                        "nothing was sent",
                    ),
                )
            )
        url = request.url
        try:
            target = _parse_url(url)
        except ValueError as e:
            raise WireBuildError(str(e)) from None
        allowed = not _has_dot_segment(target.path) and any(
            entry.allows(target) for entry in self._allow
        )
        if not allowed:
            raise WireCodeError(ErrorCode("HTTP-request-denied"))
        if self._this_reconcile >= limits.requests_per_reconcile:
            raise WireCodeError(
                ErrorCode(
                    "internal-error",
                    (
                        f"{LIMIT_PREFIX}controller {fence.lease}: {fence}: "
                        f"{limits.requests_per_reconcile} requests in this reconcile already "
                        "(the limit); nothing was sent",
                    ),
                )
            )
        body = request.body or b""
        if len(body) > limits.request_body_bytes:
            raise WireCodeError(ErrorCode("HTTP-request-body-size", (len(body),)))
        self._this_reconcile += 1
        record = HttpRecord(
            request.method,
            url,
            _stamped(request.headers, fence),
            body,
            request.timeout_ms,
            fence.epoch,
            False,
            None,
        )
        # A receiver that never got the request never answered it, so its
        # script is left for the next one.
        reply: Optional[HttpReply] = None
        if fault not in (HttpFault.REFUSED, HttpFault.TIMEOUT):
            answer = self._answer(url)
            reply = answer if isinstance(answer, HttpReply) else answer(replace(record, delivered=True))
            if not isinstance(reply, HttpReply):
                raise TypeError(
                    f"a respond_with responder returned {type(reply).__name__}, not an HttpReply"
                )
        self._records.append(
            replace(record, delivered=reply is not None, status=None if reply is None else reply.status)
        )
        failure = {
            HttpFault.REFUSED: "connection-refused",
            HttpFault.TIMEOUT: "connection-timeout",
            HttpFault.REPLY_LOST: "connection-terminated",
            HttpFault.REPLY_TIMED_OUT: "connection-read-timeout",
        }.get(fault)  # type: ignore[arg-type]
        if failure is not None:
            raise WireCodeError(ErrorCode(failure))
        assert reply is not None
        if len(reply.body) > limits.response_body_bytes:
            raise WireCodeError(ErrorCode("HTTP-response-body-size", (limits.response_body_bytes,)))
        return WireResponse(
            reply.status,
            tuple((name, value.encode("utf-8")) for name, value in reply.headers),
            reply.body,
        )


def _stamped(headers: Iterable[Tuple[str, str]], fence: Fence) -> Tuple[Tuple[str, str], ...]:
    """The guest's headers as the receiver sees them, the fence's replacing
    whatever the guest set under its names."""
    fence_names = (LEASE_HEADER, EPOCH_HEADER, HOLDER_HEADER)
    stamped = [(n.lower(), v) for n, v in headers if n.lower() not in fence_names]
    stamped.append((LEASE_HEADER, f"{fence.cluster}/{fence.lease}"))
    stamped.append((EPOCH_HEADER, str(fence.epoch)))
    stamped.append((HOLDER_HEADER, fence.holder))
    return tuple(stamped)
