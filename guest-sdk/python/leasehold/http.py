"""Calling external services under the lease: outbound HTTP through the
standard `wasi:http/outgoing-handler`, fenced by the host.

A controller's effects outside the store (a webhook, a cloud API) are the
ones a deposed leader can still cause after its successor took over. The
host closes that window from its side, and the receiver closes the rest:

- **Deny by default.** A request reaches the network only if its URL is in
  the controller's `http_allow` list; anything else raises `Denied` and
  nothing is sent.
- **Three fence headers.** The host sets `Leasehold-Lease:
  <cluster>/<lease>`, `Leasehold-Epoch: <epoch>` and `Leasehold-Holder:
  <holder>` on every request that leaves it (`LEASE_HEADER`,
  `EPOCH_HEADER`, `HOLDER_HEADER`), replacing whatever the guest set under
  those names.
- **Refusal after loss.** Once the lease is lost the host sends nothing
  more: a request raises `Fenced` (its `is_fenced` is true). Let it
  propagate: the reconcile ends as *fenced*, exactly as after a fenced
  commit.
- **Bounds.** Timeouts (`Timeout`; `Request.timeout` may ask for a shorter
  first-byte timeout), body sizes (`BodyTooLarge`), requests per reconcile
  and in flight (`Limit`).

A receiver of effects that must happen once follows the **fenced-receiver
rule**: it refuses an epoch lower than the highest it accepted (409) and
applies each `Idempotency-Key` once. The guest's half is the key:
`IdempotencyKey.for_action(kind, name, number, action)` names the
decision, never the tenure, so a retry and a successor's re-run send the
same key. For an effect driven by the object's spec, pass its
**generation** (a status write changes the version, not the generation).

    from leasehold.http import IdempotencyKey, Request

    key = IdempotencyKey.for_action("orders", order.name, order.generation, "invoice")
    response = (
        Request.post("https://billing.example.com/v1/invoices")
        .json(order.value)
        .idempotency_key(key)
        .timeout(2000)
        .send()
    )
    if response.is_success:
        invoice = response.json()["id"]

Natively, requests go to `leasehold.fake.FakeHost`, which applies the
host's rules (deny by default, fence headers, refusal after loss, limits)
and answers from a script; inside a component they go through the world's
`wasi:http/outgoing-handler@0.2.12` import. Both come back through the
one classification of the host's `error-code`s (`classify`). Nothing here
ever reports a failure as fenced that the host did not, puts the epoch
into an idempotency key, or shows a URL's user information or query in an
error (either may carry a secret).
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass
from enum import Enum
from typing import Any, List, Optional, Tuple, Union

from . import _host
from .errors import LeaseholdError
from .fence import IdempotencyKey

__all__ = [
    "BodyTooLarge", "Connection", "Decode", "Denied", "EPOCH_HEADER", "ERROR_CODE_CASES", "ErrorCode",
    "FENCED_PREFIX", "Fenced", "HOLDER_HEADER", "HttpError", "IDEMPOTENCY_KEY_HEADER",
    "IdempotencyKey", "InvalidRequest", "LEASE_HEADER", "LIMIT_PREFIX", "Limit", "Method",
    "Protocol", "Request", "Response", "Timeout", "WireBuildError", "WireCodeError",
    "WireHttpError", "WireRequest", "WireResponse", "WireStreamError", "classify",
    "error_code_from_host_text", "shown_url",
]

#: The header naming the lease a request was sent under, `<cluster>/<lease>`.
LEASE_HEADER = "leasehold-lease"
#: The header carrying the sending tenure's fencing epoch, in decimal.
EPOCH_HEADER = "leasehold-epoch"
#: The header naming the replica that holds the lease.
HOLDER_HEADER = "leasehold-holder"
#: The header `Request.idempotency_key` sets.
IDEMPOTENCY_KEY_HEADER = "idempotency-key"
#: How the host's `internal-error` begins when the lease is lost (stable).
FENCED_PREFIX = "leasehold-fenced: "
#: How the host's `internal-error` begins when a host bound refused a request (stable).
LIMIT_PREFIX = "leasehold-limit: "


class Method(Enum):
    """The methods an outbound request may use."""

    #: `GET`.
    GET = "GET"
    #: `HEAD`.
    HEAD = "HEAD"
    #: `POST`.
    POST = "POST"
    #: `PUT`.
    PUT = "PUT"
    #: `PATCH`.
    PATCH = "PATCH"
    #: `DELETE`.
    DELETE = "DELETE"

    @property
    def has_body(self) -> bool:
        """True for the methods that always carry a body (and so a
        `Content-Length`, 0 if nothing was set): `POST`, `PUT`, `PATCH`."""
        return self in (Method.POST, Method.PUT, Method.PATCH)

    def __str__(self) -> str:
        return self.value


# ----- the host's error-code ---------------------------------------------------


@dataclass(frozen=True)
class ErrorCode:
    """A `wasi:http` `error-code` as the host gave it.

    `case` is the WIT case's name (`connection-refused`,
    `HTTP-request-denied`, `internal-error`, ...); `details` its payload's
    parts, already as text or numbers (None where the host gave none).
    Shown as the case followed by each given detail in parentheses, as the
    Rust SDK shows it.
    """

    case: str
    details: Tuple[Any, ...] = ()

    @property
    def message(self) -> Optional[str]:
        """The text of an `internal-error` (None for other cases, or none given)."""
        if self.case != "internal-error" or not self.details:
            return None
        return self.details[0]

    def __str__(self) -> str:
        return self.case + "".join(f" ({d})" for d in self.details if d is not None)


#: Every case of `wasi:http/types.error-code` (0.2), in WIT order.
ERROR_CODE_CASES = (
    "DNS-timeout",
    "DNS-error",
    "destination-not-found",
    "destination-unavailable",
    "destination-IP-prohibited",
    "destination-IP-unroutable",
    "connection-refused",
    "connection-terminated",
    "connection-timeout",
    "connection-read-timeout",
    "connection-write-timeout",
    "connection-limit-reached",
    "TLS-protocol-error",
    "TLS-certificate-error",
    "TLS-alert-received",
    "HTTP-request-denied",
    "HTTP-request-length-required",
    "HTTP-request-body-size",
    "HTTP-request-method-invalid",
    "HTTP-request-URI-invalid",
    "HTTP-request-URI-too-long",
    "HTTP-request-header-section-size",
    "HTTP-request-header-size",
    "HTTP-request-trailer-section-size",
    "HTTP-request-trailer-size",
    "HTTP-response-incomplete",
    "HTTP-response-header-section-size",
    "HTTP-response-header-size",
    "HTTP-response-body-size",
    "HTTP-response-trailer-section-size",
    "HTTP-response-trailer-size",
    "HTTP-response-transfer-coding",
    "HTTP-response-content-coding",
    "HTTP-response-timeout",
    "HTTP-upgrade-failed",
    "HTTP-protocol-error",
    "loop-detected",
    "configuration-error",
    "internal-error",
)


def error_code_from_host_text(text: str) -> Optional[ErrorCode]:
    """The `error-code` that the text of a body stream's I/O error names,
    if it is one the host (wasmtime-wasi-http) writes; None otherwise.

    A response body's failure (over the host's bound, a between-bytes
    timeout, a connection dropped on lease loss) may reach the guest only
    as the text of a stream error. Only its first line is read (a host with
    backtraces appends them); anything else stays unrecognized.
    """
    line = text.splitlines()[0].strip() if text else ""
    for prefix, case in (
        ("HTTP response body size exceeds limit", "HTTP-response-body-size"),
        ("HTTP request body size exceeds limit", "HTTP-request-body-size"),
    ):
        if line.startswith(prefix):
            rest = line[len(prefix):]
            if not rest:
                return ErrorCode(case, (None,))
            if rest.startswith(": ") and rest.endswith(" bytes") and rest[2:-6].isdigit():
                return ErrorCode(case, (int(rest[2:-6]),))
            return None
    if line.startswith("internal error: "):
        return ErrorCode("internal-error", (line[len("internal error: "):],))
    case = {
        "internal error": "internal-error",
        "connection refused": "connection-refused",
        "connection terminated": "connection-terminated",
        "connection timeout": "connection-timeout",
        "connection read timeout": "connection-read-timeout",
        "connection write timeout": "connection-write-timeout",
        "HTTP response timeout": "HTTP-response-timeout",
        "incomplete HTTP response": "HTTP-response-incomplete",
        "HTTP protocol error": "HTTP-protocol-error",
    }.get(line)
    return None if case is None else ErrorCode(case)


_TIMEOUTS = frozenset(
    {
        "DNS-timeout",
        "connection-timeout",
        "connection-read-timeout",
        "connection-write-timeout",
        "HTTP-response-timeout",
    }
)
_CONNECTION = frozenset(
    {
        "DNS-error",
        "destination-not-found",
        "destination-unavailable",
        "destination-IP-prohibited",
        "destination-IP-unroutable",
        "connection-refused",
        "connection-terminated",
        "connection-limit-reached",
        "TLS-protocol-error",
        "TLS-certificate-error",
        "TLS-alert-received",
    }
)
# The request as the guest built it is what is wrong: sending it again
# fails the same way.
_INVALID = frozenset(
    {
        "HTTP-request-length-required",
        "HTTP-request-method-invalid",
        "HTTP-request-URI-invalid",
        "HTTP-request-URI-too-long",
        "HTTP-request-header-section-size",
        "HTTP-request-header-size",
        "HTTP-request-trailer-section-size",
        "HTTP-request-trailer-size",
    }
)
_BODY_SIZES = frozenset({"HTTP-request-body-size", "HTTP-response-body-size"})


# ----- errors -----------------------------------------------------------------


class HttpError(LeaseholdError):
    """Why an outbound request failed: the base of the classes below.

    `Fenced` means stop: let it propagate (the reconcile ends as fenced).
    For the others, whether the receiver applied the request tells what a
    retry needs: nothing was sent for `Denied`, `Limit` and
    `InvalidRequest`; after `Timeout`, `Connection` or `Protocol` it may
    have been applied, so retry only with the same `IdempotencyKey`.
    Every subclass but `Denied` keeps the detail in `why`.
    """

    def __init__(self, why: str, shown: str) -> None:
        super().__init__(shown)
        #: What happened, naming the request (method and URL without query).
        self.why = why


class Denied(HttpError):
    """The URL is not in the controller's `http_allow` list (or not one the
    host sends to at all). Nothing was sent."""

    def __init__(self, url: str) -> None:
        super().__init__(
            url,
            f"request to {url} denied: not in this controller's http_allow; nothing was sent",
        )
        #: The request's URL, without its query.
        self.url = url


class Fenced(HttpError):
    """The lease this guest runs under is lost: nothing was sent, or the
    request in flight had its connection dropped. Let it propagate: the
    reconcile ends as fenced, as after a fenced commit."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"no longer the leader, stopping: {why}")

    @property
    def is_fenced(self) -> bool:
        """Always true."""
        return True


class Limit(HttpError):
    """A host bound refused the request (requests in flight, requests per
    reconcile). Nothing was sent."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"outbound request refused by a host limit: {why}")


class BodyTooLarge(HttpError):
    """The request's body, or the response's, is over the host's bound."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"body over the host's bound: {why}")


class Timeout(HttpError):
    """Connecting, waiting for the response, or reading its body took too
    long. The receiver may have applied the request."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"outbound request timed out: {why}; it may have been applied")


class Connection(HttpError):
    """The connection failed: refused, reset, DNS, TLS. After a reset the
    receiver may have applied the request."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"outbound connection failed: {why}")


class Protocol(HttpError):
    """Anything else that went wrong on the wire."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"outbound request failed: {why}")


class InvalidRequest(HttpError):
    """The request is malformed (its URL, a header, the body's
    serialization); retrying it fails the same way. Nothing was sent."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"invalid outbound request: {why}")


class Decode(HttpError):
    """A response body did not decode as asked (`Response.json`, `Response.text`)."""

    def __init__(self, why: str) -> None:
        super().__init__(why, f"response body does not decode: {why}")


def classify(code: ErrorCode, at: str, url: str) -> HttpError:
    """The `HttpError` the host's `error-code` means.

    `at` names the request (`PUT http://svc.test/x`), `url` is its URL
    without query. The host's own refusals come as `HTTP-request-denied`
    and as `internal-error` texts beginning with `FENCED_PREFIX` or
    `LIMIT_PREFIX`; any other `internal-error` is a `Protocol` failure,
    never a fenced one.
    """
    case = code.case
    why = f"{at}: {code}"
    if case == "HTTP-request-denied":
        return Denied(url)
    if case == "internal-error":
        message = code.message
        if message is not None and message.startswith(FENCED_PREFIX):
            return Fenced(f"{at}: {message[len(FENCED_PREFIX):]}")
        if message is not None and message.startswith(LIMIT_PREFIX):
            return Limit(f"{at}: {message[len(LIMIT_PREFIX):]}")
        return Protocol(why)
    if case in _BODY_SIZES:
        return BodyTooLarge(why)
    if case in _TIMEOUTS:
        return Timeout(why)
    if case in _CONNECTION:
        return Connection(why)
    if case in _INVALID:
        return InvalidRequest(why)
    return Protocol(why)


# ----- what goes to the host and comes back -----------------------------------


@dataclass(frozen=True)
class WireRequest:
    """A request as the SDK hands it to the host: checked, its URL taken
    apart as `wasi:http` takes it, `content-length` set."""

    method: Method
    #: `http` or `https`.
    scheme: str
    #: `host[:port]` as written in the URL.
    authority: str
    #: Starts with `/`; the query follows a `?`.
    path_with_query: str
    headers: Tuple[Tuple[str, str], ...]
    #: None: no body at all (a `GET` without one).
    body: Optional[bytes]
    #: The first-byte timeout asked for, in milliseconds.
    timeout_ms: Optional[int]

    @property
    def url(self) -> str:
        """`scheme://authority/path?query`, as sent."""
        return f"{self.scheme}://{self.authority}{self.path_with_query}"


@dataclass(frozen=True)
class WireResponse:
    """A response as the host hands it back, read to its end."""

    status: int
    headers: Tuple[Tuple[str, bytes], ...]
    body: bytes


class WireHttpError(Exception):
    """A failure below the SDK's classification: what a host's `http_send` raises."""


class WireCodeError(WireHttpError):
    """The host answered with an `error-code`."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(str(code))
        #: The host's `error-code`.
        self.code = code


class WireBuildError(WireHttpError):
    """`wasi:http` refused to build the request (a forbidden header, say). Nothing was sent."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        #: What was refused.
        self.why = why


class WireStreamError(WireHttpError):
    """A body stream failed without an `error-code`."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        #: The stream's description of the failure.
        self.why = why


def _from_wire(error: WireHttpError, at: str, url: str) -> HttpError:
    if isinstance(error, WireCodeError):
        return classify(error.code, at, url)
    if isinstance(error, WireBuildError):
        return InvalidRequest(f"{at}: {error.why}; nothing was sent")
    if isinstance(error, WireStreamError):
        return Connection(f"{at}: the body stream failed: {error.why}")
    return Protocol(f"{at}: {error}")


# ----- URLs and headers -------------------------------------------------------


def shown_url(url: str) -> str:
    """`url` for messages: cut before its query or fragment, without user
    information (either may carry a secret)."""
    for stop in "?#":
        url = url.split(stop, 1)[0]
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    host = authority.rpartition("@")[2]
    return f"{scheme}://{host}{slash}{path}"


# Characters RFC 3986 never allows unescaped in a URL.
_NOT_IN_URLS = '"<>\\^`{|}'
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class _Target:
    scheme: str
    authority: str
    host: str
    port: int
    path: str
    query: Optional[str]

    @property
    def path_with_query(self) -> str:
        return self.path if self.query is None else f"{self.path}?{self.query}"

    @property
    def shown(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"


def _parse_url(url: str) -> _Target:
    """Take `url` apart; `ValueError` says what is wrong without repeating it."""
    if not url:
        raise ValueError("the URL is empty")
    if not all(33 <= ord(c) <= 126 for c in url):
        raise ValueError(
            "the URL has a space, a control or a non-ASCII character; percent-encode it"
        )
    scheme_text, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("the URL has no scheme; write http://… or https://…")
    scheme = scheme_text.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"only http and https URLs can be sent, not {_json.dumps(scheme_text)}")
    rest = rest.split("#", 1)[0]
    end = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
    authority, path_and_query = rest[:end], rest[end:]
    if "@" in authority:
        raise ValueError(
            "the URL carries user information (user:password@); send credentials in a header "
            "instead"
        )
    host, port_text = _split_authority(authority)
    port = _DEFAULT_PORTS[scheme] if not port_text else _parse_port(port_text)
    path, qsep, query = path_and_query.partition("?")
    path = path or "/"
    if any(c in _NOT_IN_URLS for c in path) or (qsep and any(c in _NOT_IN_URLS for c in query)):
        raise ValueError(
            f"the URL's path or query has one of {_NOT_IN_URLS} unescaped; percent-encode it"
        )
    return _Target(scheme, authority, host.lower(), port, path, query if qsep else None)


def _split_authority(authority: str) -> Tuple[str, Optional[str]]:
    if not authority:
        raise ValueError("the URL has no host")
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise ValueError("the URL's IPv6 host has no closing `]`")
        address = authority[1:close]
        if not address or not all(c in "0123456789abcdefABCDEF:." for c in address):
            raise ValueError("the URL's IPv6 host is not an address")
        after = authority[close + 1:]
        if after and not after.startswith(":"):
            raise ValueError("the URL has text after its IPv6 host")
        return authority[: close + 1], (after[1:] if after else None)
    host, sep, port = authority.partition(":")
    if not host or not all((c.isascii() and c.isalnum()) or c in "-._" for c in host):
        raise ValueError("the URL's host is not a name or an address")
    return host, (port if sep else None)


def _parse_port(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise ValueError("the URL's port is not a number")
    port = int(text)
    if not 0 < port <= 65535:
        raise ValueError("the URL's port is not between 1 and 65535")
    return port


_TOKEN = frozenset("!#$%&'*+-.^_`|~")


def _check_header(name: str, value: str) -> None:
    """Check a header as `wasi:http` will; the error names the header, never its value."""
    if not name or not all((c.isascii() and c.isalnum()) or c in _TOKEN for c in name):
        raise ValueError(f"{_json.dumps(name)} is not a valid header name")
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value):
        raise ValueError(
            f"the value of header {_json.dumps(name)} has a control character (CR, LF, NUL, ...)"
        )


# ----- requests and responses --------------------------------------------------


class Request:
    """An outbound request, built by chaining and then `send()`.

    The URL is `http://` or `https://`, ASCII, percent-encoded, without
    user information (send credentials in a header). Problems with it or
    with a header raise `InvalidRequest` from `send`, before anything is
    sent. The SDK sets `Content-Length` from the body (replacing one the
    guest set): a request with a body, or any `POST`, `PUT` or `PATCH`,
    carries one, so no body goes out chunked. The host sets the three
    fence headers.
    """

    def __init__(self, method: Method, url: str) -> None:
        self._method = method
        self._url = url
        self._headers: List[Tuple[str, str]] = []
        self._body: Optional[bytes] = None
        self._timeout_ms: Optional[int] = None
        self._refused: Optional[str] = None

    def __repr__(self) -> str:
        # Header values, the query and the body may carry credentials.
        names = [name for name, _ in self._headers]
        size = None if self._body is None else len(self._body)
        return (
            f"Request({self._method.value} {shown_url(self._url)}, headers={names}, "
            f"body_len={size}, timeout_ms={self._timeout_ms})"
        )

    @staticmethod
    def get(url: str) -> "Request":
        """A `GET` request."""
        return Request(Method.GET, url)

    @staticmethod
    def head(url: str) -> "Request":
        """A `HEAD` request."""
        return Request(Method.HEAD, url)

    @staticmethod
    def post(url: str) -> "Request":
        """A `POST` request."""
        return Request(Method.POST, url)

    @staticmethod
    def put(url: str) -> "Request":
        """A `PUT` request."""
        return Request(Method.PUT, url)

    @staticmethod
    def patch(url: str) -> "Request":
        """A `PATCH` request."""
        return Request(Method.PATCH, url)

    @staticmethod
    def delete(url: str) -> "Request":
        """A `DELETE` request."""
        return Request(Method.DELETE, url)

    def header(self, name: str, value: str) -> "Request":
        """Set header `name` to `value`, replacing what was set under that
        name before (names are case-insensitive). The fence headers may be
        set but the host replaces them; `Content-Length` is the SDK's.
        `Host`, `Connection`, `Transfer-Encoding` and the other headers
        `wasi:http` forbids make `send` raise `InvalidRequest`."""
        lowered = name.lower()
        self._headers = [(n, v) for n, v in self._headers if n.lower() != lowered]
        self._headers.append((name, value))
        return self

    def body(self, data: Union[bytes, bytearray, str]) -> "Request":
        """Set the body: bytes, or text sent as UTF-8."""
        self._body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return self

    def json(self, value: Any) -> "Request":
        """Set the body to `value` as compact JSON and `Content-Type` to
        `application/json`. A value that does not serialize makes `send`
        raise `InvalidRequest`."""
        try:
            text = _json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            if self._refused is None:
                self._refused = f"the JSON body does not serialize: {type(e).__name__}: {e}"
            return self
        return self.header("content-type", "application/json").body(text)

    def idempotency_key(self, key: Union[IdempotencyKey, str]) -> "Request":
        """Set the `Idempotency-Key` header: the receiver applies requests
        with the same key once."""
        return self.header(IDEMPOTENCY_KEY_HEADER, str(key))

    def timeout(self, ms: int) -> "Request":
        """Ask for a first-byte timeout of `ms` milliseconds: how long to
        wait for the response's head once the request is sent. The host
        caps it at its own bound (10 s by default); past it `send` raises
        `Timeout`."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError(f"a timeout is a whole number of milliseconds, not {ms!r}")
        self._timeout_ms = ms
        return self

    @property
    def method(self) -> Method:
        """The method."""
        return self._method

    @property
    def url(self) -> str:
        """The URL as given."""
        return self._url

    @property
    def headers(self) -> List[Tuple[str, str]]:
        """The headers set so far, in order, as given (the SDK's
        `Content-Length` and the host's fence headers are added when sent)."""
        return list(self._headers)

    @property
    def body_bytes(self) -> Optional[bytes]:
        """The body, if one was set."""
        return self._body

    @property
    def timeout_ms(self) -> Optional[int]:
        """The first-byte timeout asked for, in milliseconds, if any."""
        return self._timeout_ms

    def _wire(self) -> Tuple[WireRequest, _Target]:
        """The request as it goes to the host (checked, `content-length`
        set from the body) and its URL taken apart; `InvalidRequest` if it
        cannot be sent."""
        at = f"{self._method.value} {shown_url(self._url)}"
        if self._refused is not None:
            raise InvalidRequest(f"{at}: {self._refused}; nothing was sent")
        try:
            target = _parse_url(self._url)
        except ValueError as e:
            raise InvalidRequest(f"{at}: {e}; nothing was sent") from None
        headers: List[Tuple[str, str]] = []
        for name, value in self._headers:
            try:
                _check_header(name, value)
            except ValueError as e:
                raise InvalidRequest(f"{at}: {e}; nothing was sent") from None
            # The body's length is the SDK's to state: a guest's own value
            # could disagree with the bytes written.
            if name.lower() != "content-length":
                headers.append((name, value))
        body = self._body
        if body is None and self._method.has_body:
            body = b""
        if body is not None:
            headers.append(("content-length", str(len(body))))
        wire = WireRequest(
            self._method,
            target.scheme,
            target.authority,
            target.path_with_query,
            tuple(headers),
            body,
            self._timeout_ms,
        )
        return wire, target

    def send(self) -> "Response":
        """Send the request through the host and read the whole response.

        Blocks the reconcile until the response's body has been read to
        its end, or the request failed. A response of any status is
        returned: check `is_success` (a fenced receiver answers `409` to a
        request from an older epoch). Raises an `HttpError` subclass that
        says whether anything was sent.
        """
        wire, target = self._wire()
        at = f"{self._method.value} {target.shown}"
        try:
            answer = _host.current().http_send(wire)
        except WireHttpError as e:
            raise _from_wire(e, at, target.shown) from None
        return Response(
            answer.status,
            [(name, value.decode("utf-8", errors="replace")) for name, value in answer.headers],
            answer.body,
        )


@dataclass
class Response:
    """A response, read to its end: status, headers (in the order
    received, values decoded as UTF-8, lossily) and the whole body."""

    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def __repr__(self) -> str:
        # Header values (cookies, tokens) and the body may carry secrets.
        names = [name for name, _ in self.headers]
        return f"Response(status={self.status}, headers={names}, body_len={len(self.body)})"

    def header(self, name: str) -> Optional[str]:
        """The first value of header `name`, compared case-insensitively; None if absent."""
        lowered = name.lower()
        for n, v in self.headers:
            if n.lower() == lowered:
                return v
        return None

    def json(self) -> Any:
        """The body decoded as JSON; `Decode` if it is not JSON."""
        try:
            return _json.loads(self.text())
        except ValueError as e:
            # The decoder's message says where, not what: no body text.
            raise Decode(f"a {self.status} response's body is not JSON: {e}") from None

    def text(self) -> str:
        """The body as UTF-8 text; `Decode` if it is not UTF-8."""
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Decode(f"a {self.status} response's body is not UTF-8: {e.reason}") from None

    @property
    def is_success(self) -> bool:
        """True if the status is 2xx."""
        return 200 <= self.status < 300
