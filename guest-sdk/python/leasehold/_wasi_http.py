"""The component's side of outbound HTTP: a `leasehold.http.WireRequest`
sent through the world's `wasi:http/outgoing-handler@0.2.12` import.

Only a component imports this module (through `WitHost.http_send`): it
needs the `wit_world` bindings componentize-py generates from
`wit/controller.wit`, where the `wasi:http/types` interface is
`wasi_http_types` (the world's own `types` interface took the plain
name). It waits on `wasi:io` pollables with its own small loop, so no
asyncio event loop (and no `poll_loop.py`) is involved.

The order is the Rust SDK's: build the request (headers, method, scheme,
authority, path), take its body, hand it to the host, write the body in
chunks the stream accepts and finish it, wait for the response's head,
then read its body to the end. Child resources are released before their
parents (a body's stream before the body, a response's headers and body
before the response), as `wasi:http` requires.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from componentize_py_types import Err
from wit_world.imports import outgoing_handler as _handler
from wit_world.imports import poll as _poll
from wit_world.imports import streams as _streams
from wit_world.imports import wasi_http_types as _http

from .http import (
    ERROR_CODE_CASES,
    ErrorCode,
    Method,
    WireBuildError,
    WireCodeError,
    WireHttpError,
    WireRequest,
    WireResponse,
    WireStreamError,
    error_code_from_host_text,
)

#: Most bytes handed to the body stream at once.
WRITE_CHUNK = 4096
#: Most bytes asked of the response body stream at once.
READ_CHUNK = 64 * 1024

_METHODS = {
    Method.GET: _http.Method_Get,
    Method.HEAD: _http.Method_Head,
    Method.POST: _http.Method_Post,
    Method.PUT: _http.Method_Put,
    Method.PATCH: _http.Method_Patch,
    Method.DELETE: _http.Method_Delete,
}

_SCHEMES = {"http": _http.Scheme_Http, "https": _http.Scheme_Https}


def _binding_name(case: str) -> str:
    # `destination-IP-prohibited` is generated as `DestinationIpProhibited`.
    return "".join(part[:1].upper() + part[1:].lower() for part in case.split("-"))


#: The binding's class-name tail (`ConnectionRefused`) to the WIT case.
_CASES = {_binding_name(case): case for case in ERROR_CODE_CASES}


def _release(resource: Any) -> None:
    """Drop a resource handle now (children go before their parents)."""
    resource.__exit__(None, None, None)


def _wait_ready(pollable: Any) -> None:
    """Wait with `wasi:io/poll` until `pollable` is ready, then release it."""
    try:
        while not pollable.ready():
            _poll.poll([pollable])
    finally:
        _release(pollable)


def _field_size(payload: Any) -> str:
    name, size = payload.field_name, payload.field_size
    if name is not None and size is not None:
        return f"{name}: {size} bytes"
    if name is not None:
        return name
    if size is not None:
        return f"{size} bytes"
    return "unknown field"


def error_code(code: Any) -> ErrorCode:
    """The binding's `error-code` value as the SDK's `ErrorCode`."""
    tail = type(code).__name__.rpartition("_")[2]
    case = _CASES.get(tail, tail)
    if not hasattr(code, "value"):
        return ErrorCode(case)
    value = code.value
    if isinstance(value, _http.DnsErrorPayload):
        return ErrorCode(case, (value.rcode, value.info_code))
    if isinstance(value, _http.TlsAlertReceivedPayload):
        return ErrorCode(case, (value.alert_id, value.alert_message))
    if isinstance(value, _http.FieldSizePayload):
        return ErrorCode(case, (_field_size(value),))
    return ErrorCode(case, (value,))


def _stream_error(error: Any) -> WireHttpError:
    """A stream's failure: the `error-code` behind it when the host gives
    one (through `http-error-code`, or the error's text where that is
    empty), otherwise the I/O error's description."""
    if isinstance(error, _streams.StreamError_Closed):
        return WireStreamError("the stream was closed")
    io_error = error.value
    try:
        code = _http.http_error_code(io_error)
        if code is not None:
            return WireCodeError(error_code(code))
        text = io_error.to_debug_string()
    finally:
        _release(io_error)
    known = error_code_from_host_text(text)
    if known is not None:
        return WireCodeError(known)
    return WireStreamError(text.splitlines()[0].strip() if text else "an I/O error")


def _header_error(error: Any) -> str:
    if isinstance(error, _http.HeaderError_Forbidden):
        return "forbidden by wasi:http"
    if isinstance(error, _http.HeaderError_Immutable):
        return "the headers are immutable"
    return "invalid syntax"


def _build(request: WireRequest) -> Any:
    headers = _http.Fields()
    for name, value in request.headers:
        try:
            headers.append(name, value.encode("utf-8"))
        except Err as e:
            _release(headers)
            raise WireBuildError(f"header {name!r}: {_header_error(e.value)}") from None
    outgoing = _http.OutgoingRequest(headers)
    steps = (
        (lambda: outgoing.set_method(_METHODS[request.method]()), f"the method {request.method} was refused"),
        (lambda: outgoing.set_scheme(_SCHEMES[request.scheme]()), "the scheme was refused"),
        (lambda: outgoing.set_authority(request.authority), "the URL's host and port were refused"),
        (
            lambda: outgoing.set_path_with_query(request.path_with_query),
            "the URL's path or query was refused",
        ),
    )
    for step, why in steps:
        try:
            step()
        except Err:
            _release(outgoing)
            raise WireBuildError(why) from None
    return outgoing


def _options(request: WireRequest) -> Optional[Any]:
    """The asked first-byte timeout, if any. A host that cannot honour it
    refuses to set it; its own bound then applies."""
    if request.timeout_ms is None:
        return None
    options = _http.RequestOptions()
    try:
        options.set_first_byte_timeout(request.timeout_ms * 1_000_000)
    except Err:
        pass
    return options


def _write_all(stream: Any, data: bytes) -> None:
    """Write `data` in chunks the stream permits, then flush and wait for the flush."""
    offset = 0
    try:
        while offset < len(data):
            permit = stream.check_write()
            if permit == 0:
                _wait_ready(stream.subscribe())
                continue
            n = min(permit, WRITE_CHUNK, len(data) - offset)
            stream.write(data[offset : offset + n])
            offset += n
        stream.flush()
        while stream.check_write() == 0:
            _wait_ready(stream.subscribe())
    except Err as e:
        raise _stream_error(e.value) from None


def _send_body(body: Any, data: bytes) -> None:
    """Write the whole body and finish it. A body that could not be
    written whole is dropped unfinished, so the host never sends it as if
    it were complete."""
    try:
        stream = body.write()
    except Err:
        _release(body)
        raise WireBuildError("the request's body stream was already taken") from None
    try:
        _write_all(stream, data)
    except WireHttpError:
        _release(stream)
        _release(body)
        raise
    # The stream is the body's child: it goes before the body is finished.
    _release(stream)
    try:
        _http.OutgoingBody.finish(body, None)
    except Err as e:
        raise WireCodeError(error_code(e.value)) from None


def _wait(future: Any) -> Any:
    """Wait until the response's head arrived, or the request failed."""
    while True:
        got = future.get()
        if got is None:
            _wait_ready(future.subscribe())
            continue
        if isinstance(got, Err):
            raise WireStreamError("the response was already taken")
        answer = got.value
        if isinstance(answer, Err):
            raise WireCodeError(error_code(answer.value))
        return answer.value


def _read_all(stream: Any) -> bytes:
    chunks: List[bytes] = []
    while True:
        try:
            chunk = stream.read(READ_CHUNK)
        except Err as e:
            if isinstance(e.value, _streams.StreamError_Closed):
                return b"".join(chunks)
            raise _stream_error(e.value) from None
        if chunk:
            chunks.append(chunk)
        else:
            _wait_ready(stream.subscribe())


def _read_response(response: Any) -> WireResponse:
    try:
        status = response.status()
        fields = response.headers()
        try:
            headers: Tuple[Tuple[str, bytes], ...] = tuple(
                (name, bytes(value)) for name, value in fields.entries()
            )
        finally:
            _release(fields)
        try:
            body = response.consume()
        except Err:
            raise WireStreamError("the response body was already taken") from None
        try:
            try:
                stream = body.stream()
            except Err:
                raise WireStreamError("the response body stream was already taken") from None
            try:
                data = _read_all(stream)
            finally:
                _release(stream)
        finally:
            _release(body)
    finally:
        _release(response)
    return WireResponse(status, headers, data)


def send(request: WireRequest) -> WireResponse:
    """Send `request` through `wasi:http/outgoing-handler` and read the
    whole response; raises the `WireHttpError` the failure is."""
    outgoing = _build(request)
    body = None
    if request.body is not None:
        try:
            body = outgoing.body()
        except Err:
            _release(outgoing)
            raise WireBuildError("the request's body was already taken") from None
    options = _options(request)
    try:
        future = _handler.handle(outgoing, options)
    except Err as e:
        if body is not None:
            _release(body)
        raise WireCodeError(error_code(e.value)) from None
    try:
        if body is not None:
            # A body that cannot be written whole is not the final word: the
            # host may have refused the request (and closed the stream), or
            # the server answered before reading it all. The response
            # future says which.
            try:
                _send_body(body, request.body or b"")
            except WireHttpError:
                pass
        response = _wait(future)
    finally:
        _release(future)
    return _read_response(response)
