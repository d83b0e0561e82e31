//! `wasm32`: bindings generated from the WIT package (the only definition
//! of the contract) and the conversions between the imports and the wire
//! types; and one outbound request driven through
//! `wasi:http/outgoing-handler` (`http_send`).
//!
//! The bindings are generated once, here. Their export macro is public so
//! that [`crate::export_controller!`], expanded in the controller's crate,
//! can emit the component exports there; the export glue that calls a
//! `Controller` lives above this layer, in `export.rs`.

use super::{
    Committed, ErrorCode, Fence, FieldSize, Level, Metadata, Method, NewEvent, ObjectKey, Op,
    RawObject, RawPage, Scheme, Selector, Shard, WireError, WireHttpError, WireRequest,
    WireResponse,
};

/// Generated bindings for the `leasehold:controller/controller@0.4.0` world.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        // The current version of the contract; the host runs components
        // of older versions too, but this SDK builds for this one.
        world: "leasehold:controller/controller@0.4.0",
        // The export macro is used from controller crates, through
        // `export_controller!`, so it must be exported from this one.
        pub_export_macro: true,
        export_macro_name: "__export",
        default_bindings_module: "leasehold_guest::__private::bindings",
        // The world imports `wasi:clocks/wall-clock` and
        // `wasi:http/outgoing-handler` and, through it, `wasi:http/types`,
        // `wasi:io` and the rest of `wasi:clocks`: generate those here too,
        // so the SDK depends on no other bindings crate. Only what a guest
        // calls ends up imported by its component.
        generate_all,
    });
}

use bindings::exports::leasehold::controller::reconciler as wit_reconciler;
use bindings::leasehold::controller::{logging, settings as wit_settings, store, tenure, types};
use bindings::wasi::clocks::wall_clock;
use bindings::wasi::http::{outgoing_handler, types as http};
use bindings::wasi::io::streams::{InputStream, OutputStream, StreamError};

// The export side's types, for the glue in `export.rs`.
pub use wit_reconciler::{
    Description as WitDescription, Failure as WitFailure, Guest, LabelMap as WitLabelMap,
    Outcome as WitOutcome, ReconcileError as WitReconcileError,
    ReconcileReason as WitReconcileReason, RelatedMap as WitRelatedMap,
    RelatedWatch as WitRelatedWatch,
};

fn key_from_wit(key: types::ObjectKey) -> ObjectKey {
    ObjectKey::new(key.kind, key.name)
}

fn error_from_wit(error: store::StoreError) -> WireError {
    match error {
        store::StoreError::Fenced(why) => WireError::Fenced(why),
        store::StoreError::Conflict(key) => WireError::Conflict(key_from_wit(key)),
        store::StoreError::NotFound(key) => WireError::NotFound(key_from_wit(key)),
        store::StoreError::Invalid(why) => WireError::Invalid(why),
        store::StoreError::Unavailable(why) => WireError::Unavailable(why),
    }
}

fn object_from_wit(object: types::Object) -> RawObject {
    RawObject {
        kind: object.kind,
        name: object.name,
        version: object.version,
        value: object.value,
        meta: metadata_from_wit(object.metadata),
        status: object.status,
        generation: object.generation,
        deleting_since_ms: object.deleting_since,
    }
}

fn metadata_from_wit(meta: types::Metadata) -> Metadata {
    Metadata {
        labels: meta.labels.into_iter().collect(),
        owner: meta.owner.map(key_from_wit),
        finalizers: meta.finalizers,
    }
}

fn metadata_to_wit(meta: &Metadata) -> types::Metadata {
    types::Metadata {
        labels: meta
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        owner: meta.owner.as_ref().map(|o| types::ObjectKey {
            kind: o.kind.clone(),
            name: o.name.clone(),
        }),
        finalizers: meta.finalizers.clone(),
    }
}

fn op_to_wit(op: &Op) -> store::Op {
    match op {
        Op::Create { key, value } => store::Op::Create(store::CreateOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            value: value.clone(),
        }),
        Op::Update {
            key,
            expected_version,
            value,
        } => store::Op::Update(store::UpdateOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_version: *expected_version,
            value: value.clone(),
        }),
        Op::Delete {
            key,
            expected_version,
        } => store::Op::Delete(store::DeleteOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_version: *expected_version,
        }),
        Op::CreateWith { key, value, meta } => store::Op::CreateWith(store::CreateWithOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            value: value.clone(),
            metadata: metadata_to_wit(meta),
        }),
        Op::Replace {
            key,
            expected_version,
            value,
            meta,
        } => store::Op::Replace(store::ReplaceOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_version: *expected_version,
            value: value.clone(),
            metadata: meta.as_ref().map(metadata_to_wit),
        }),
        Op::Status {
            key,
            expected_generation,
            status,
        } => store::Op::Status(store::StatusOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_generation: *expected_generation,
            status: status.clone(),
        }),
        Op::Check {
            key,
            expected_version,
        } => store::Op::Check(store::CheckOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_version: *expected_version,
        }),
    }
}

fn event_to_wit(event: &NewEvent) -> store::NewEvent {
    store::NewEvent {
        kind: event.key.kind.clone(),
        name: event.key.name.clone(),
        reason: event.reason.clone(),
        message: event.message.clone(),
    }
}

pub(crate) fn get(kind: &str, name: &str) -> Result<Option<RawObject>, WireError> {
    store::get(kind, name)
        .map(|object| object.map(object_from_wit))
        .map_err(error_from_wit)
}

pub(crate) fn list(kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, WireError> {
    let page = store::list(kind, after, limit).map_err(error_from_wit)?;
    Ok(RawPage {
        objects: page.objects.into_iter().map(object_from_wit).collect(),
        next: page.next,
    })
}

pub(crate) fn list_selected(
    kind: &str,
    selector: &Selector,
    after: Option<&str>,
    limit: u32,
) -> Result<RawPage, WireError> {
    let selector = store::Selector {
        labels: selector
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        contains: selector.contains.as_ref().map(ToString::to_string),
    };
    let page = store::list_selected(kind, &selector, after, limit).map_err(error_from_wit)?;
    Ok(RawPage {
        objects: page.objects.into_iter().map(object_from_wit).collect(),
        next: page.next,
    })
}

pub(crate) fn commit(ops: &[Op], events: &[NewEvent]) -> Result<Committed, WireError> {
    let ops: Vec<store::Op> = ops.iter().map(op_to_wit).collect();
    let events: Vec<store::NewEvent> = events.iter().map(event_to_wit).collect();
    let committed = store::commit(&ops, &events).map_err(error_from_wit)?;
    Ok(Committed {
        revision: committed.revision,
        event_seqs: committed.event_seqs,
    })
}

pub(crate) fn fence() -> Fence {
    let fence = tenure::current();
    Fence {
        cluster: fence.cluster,
        lease: fence.lease,
        epoch: fence.epoch,
        holder: fence.holder,
    }
}

pub(crate) fn shard() -> Shard {
    let shard = tenure::shard();
    Shard {
        index: shard.index,
        count: shard.count,
    }
}

pub(crate) fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => logging::Level::Trace,
        Level::Debug => logging::Level::Debug,
        Level::Info => logging::Level::Info,
        Level::Warn => logging::Level::Warn,
        Level::Error => logging::Level::Error,
    };
    logging::log(level, message);
}

pub(crate) fn settings() -> String {
    wit_settings::get()
}

pub(crate) fn now() -> std::time::SystemTime {
    let now = wall_clock::now();
    std::time::UNIX_EPOCH + std::time::Duration::new(now.seconds, now.nanoseconds)
}

/// The most `blocking-write-and-flush` takes at once (`wasi:io/streams`).
const WRITE_CHUNK: usize = 4096;

/// The most asked of one `blocking-read`; the host may return less.
const READ_CHUNK: u64 = 64 * 1024;

/// Send `request` through `wasi:http/outgoing-handler` and read the
/// response to its end.
///
/// The order matters: `handle` is called before the body is written,
/// because the host's body channel holds only a chunk or two and is
/// drained only once the request is on its way; writing a larger body
/// first would wait forever.
pub(crate) fn http_send(request: &WireRequest) -> Result<WireResponse, WireHttpError> {
    let outgoing = build_request(request)?;
    let body = match request.body {
        Some(_) => Some(
            outgoing
                .body()
                .map_err(|()| build_error("the request's body was already taken"))?,
        ),
        None => None,
    };
    let options = request_options(request);
    let future = outgoing_handler::handle(outgoing, options).map_err(code)?;
    if let (Some(body), Some(bytes)) = (body, &request.body) {
        // A body that cannot be written whole is not the final word, so
        // its failure is not returned: the host may have refused the
        // request (it then drops the body, which closes the stream), or
        // the server may have answered before reading it all. The
        // response future says which; an unfinished body is dropped, so
        // the host never sends it as if it were whole.
        let _ = send_body(body, bytes);
    }
    let response = wait(&future);
    drop(future);
    read_response(response?)
}

fn build_error(why: impl Into<String>) -> WireHttpError {
    WireHttpError::Build(why.into())
}

fn build_request(request: &WireRequest) -> Result<http::OutgoingRequest, WireHttpError> {
    let headers = http::Fields::new();
    for (name, value) in &request.headers {
        headers
            .append(name, value.as_bytes())
            .map_err(|error| build_error(format!("header {name:?}: {}", header_error(&error))))?;
    }
    let outgoing = http::OutgoingRequest::new(headers);
    let method = match request.method {
        Method::Get => http::Method::Get,
        Method::Head => http::Method::Head,
        Method::Post => http::Method::Post,
        Method::Put => http::Method::Put,
        Method::Patch => http::Method::Patch,
        Method::Delete => http::Method::Delete,
    };
    outgoing
        .set_method(&method)
        .map_err(|()| build_error(format!("the method {} was refused", request.method)))?;
    let scheme = match request.scheme {
        Scheme::Http => http::Scheme::Http,
        Scheme::Https => http::Scheme::Https,
    };
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| build_error("the scheme was refused"))?;
    outgoing
        .set_authority(Some(&request.authority))
        .map_err(|()| build_error("the URL's host and port were refused"))?;
    outgoing
        .set_path_with_query(Some(&request.path_with_query))
        .map_err(|()| build_error("the URL's path or query was refused"))?;
    Ok(outgoing)
}

fn header_error(error: &http::HeaderError) -> &'static str {
    match error {
        http::HeaderError::InvalidSyntax => "invalid syntax",
        http::HeaderError::Forbidden => "forbidden by wasi:http",
        http::HeaderError::Immutable => "the headers are immutable",
    }
}

/// The asked first-byte timeout, if any. A host that cannot honour it
/// refuses to set it; its own bound then applies, which is what the guest
/// gets anyway when it asks for more than the host allows.
fn request_options(request: &WireRequest) -> Option<http::RequestOptions> {
    let timeout = request.first_byte_timeout?;
    let options = http::RequestOptions::new();
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let _ = options.set_first_byte_timeout(Some(nanos));
    Some(options)
}

/// Write `bytes` through the body's stream in chunks the stream accepts,
/// then finish the body.
fn send_body(body: http::OutgoingBody, bytes: &[u8]) -> Result<(), WireHttpError> {
    let stream = body
        .write()
        .map_err(|()| build_error("the request's body stream was already taken"))?;
    let written = write_all(&stream, bytes);
    // The stream is the body's child: it goes before the body is finished.
    drop(stream);
    match written {
        Ok(()) => http::OutgoingBody::finish(body, None).map_err(code),
        // Dropping an unfinished body tells the host the request is
        // incomplete, so no server takes a truncated body for a whole one.
        Err(error) => {
            drop(body);
            Err(error)
        }
    }
}

fn write_all(stream: &OutputStream, bytes: &[u8]) -> Result<(), WireHttpError> {
    for chunk in bytes.chunks(WRITE_CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(stream_error)?;
    }
    Ok(())
}

/// Block until the response's head arrived, or the request failed.
fn wait(future: &http::FutureIncomingResponse) -> Result<http::IncomingResponse, WireHttpError> {
    loop {
        match future.get() {
            Some(Ok(Ok(response))) => return Ok(response),
            Some(Ok(Err(error))) => return Err(code(error)),
            Some(Err(())) => {
                return Err(WireHttpError::Stream(
                    "the response was already taken".into(),
                ));
            }
            None => future.subscribe().block(),
        }
    }
}

fn read_response(response: http::IncomingResponse) -> Result<WireResponse, WireHttpError> {
    let status = response.status();
    let headers = response.headers().entries();
    let body = response
        .consume()
        .map_err(|()| WireHttpError::Stream("the response body was already taken".into()))?;
    let stream = body
        .stream()
        .map_err(|()| WireHttpError::Stream("the response body stream was already taken".into()))?;
    let read = read_all(&stream);
    // Children before parents: the stream, the body, then the response.
    drop(stream);
    drop(body);
    drop(response);
    Ok(WireResponse {
        status,
        headers,
        body: read?,
    })
}

fn read_all(stream: &InputStream) -> Result<Vec<u8>, WireHttpError> {
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(body),
            Err(error) => return Err(stream_error(error)),
        }
    }
}

/// A stream's failure: the `error-code` behind it when the host gives one
/// (a body over its bound, a between-bytes timeout, a connection dropped on
/// lease loss), through `http-error-code` or, where the host's
/// implementation leaves that empty, its error's text; otherwise the I/O
/// error's description.
fn stream_error(error: StreamError) -> WireHttpError {
    match error {
        StreamError::Closed => WireHttpError::Stream("the stream was closed".into()),
        StreamError::LastOperationFailed(error) => {
            if let Some(error) = http::http_error_code(&error) {
                return code(error);
            }
            let text = error.to_debug_string();
            match ErrorCode::from_host_text(&text) {
                Some(code) => WireHttpError::Code(code),
                None => WireHttpError::Stream(text.lines().next().unwrap_or("").trim().to_string()),
            }
        }
    }
}

fn field_size(size: http::FieldSizePayload) -> FieldSize {
    FieldSize {
        name: size.field_name,
        size: size.field_size,
    }
}

fn code(error: http::ErrorCode) -> WireHttpError {
    use http::ErrorCode as H;
    WireHttpError::Code(match error {
        H::DnsTimeout => ErrorCode::DnsTimeout,
        H::DnsError(payload) => ErrorCode::DnsError {
            rcode: payload.rcode,
            info_code: payload.info_code,
        },
        H::DestinationNotFound => ErrorCode::DestinationNotFound,
        H::DestinationUnavailable => ErrorCode::DestinationUnavailable,
        H::DestinationIpProhibited => ErrorCode::DestinationIpProhibited,
        H::DestinationIpUnroutable => ErrorCode::DestinationIpUnroutable,
        H::ConnectionRefused => ErrorCode::ConnectionRefused,
        H::ConnectionTerminated => ErrorCode::ConnectionTerminated,
        H::ConnectionTimeout => ErrorCode::ConnectionTimeout,
        H::ConnectionReadTimeout => ErrorCode::ConnectionReadTimeout,
        H::ConnectionWriteTimeout => ErrorCode::ConnectionWriteTimeout,
        H::ConnectionLimitReached => ErrorCode::ConnectionLimitReached,
        H::TlsProtocolError => ErrorCode::TlsProtocolError,
        H::TlsCertificateError => ErrorCode::TlsCertificateError,
        H::TlsAlertReceived(payload) => ErrorCode::TlsAlertReceived {
            alert_id: payload.alert_id,
            alert_message: payload.alert_message,
        },
        H::HttpRequestDenied => ErrorCode::HttpRequestDenied,
        H::HttpRequestLengthRequired => ErrorCode::HttpRequestLengthRequired,
        H::HttpRequestBodySize(n) => ErrorCode::HttpRequestBodySize(n),
        H::HttpRequestMethodInvalid => ErrorCode::HttpRequestMethodInvalid,
        H::HttpRequestUriInvalid => ErrorCode::HttpRequestUriInvalid,
        H::HttpRequestUriTooLong => ErrorCode::HttpRequestUriTooLong,
        H::HttpRequestHeaderSectionSize(n) => ErrorCode::HttpRequestHeaderSectionSize(n),
        H::HttpRequestHeaderSize(size) => ErrorCode::HttpRequestHeaderSize(size.map(field_size)),
        H::HttpRequestTrailerSectionSize(n) => ErrorCode::HttpRequestTrailerSectionSize(n),
        H::HttpRequestTrailerSize(size) => ErrorCode::HttpRequestTrailerSize(field_size(size)),
        H::HttpResponseIncomplete => ErrorCode::HttpResponseIncomplete,
        H::HttpResponseHeaderSectionSize(n) => ErrorCode::HttpResponseHeaderSectionSize(n),
        H::HttpResponseHeaderSize(size) => ErrorCode::HttpResponseHeaderSize(field_size(size)),
        H::HttpResponseBodySize(n) => ErrorCode::HttpResponseBodySize(n),
        H::HttpResponseTrailerSectionSize(n) => ErrorCode::HttpResponseTrailerSectionSize(n),
        H::HttpResponseTrailerSize(size) => ErrorCode::HttpResponseTrailerSize(field_size(size)),
        H::HttpResponseTransferCoding(coding) => ErrorCode::HttpResponseTransferCoding(coding),
        H::HttpResponseContentCoding(coding) => ErrorCode::HttpResponseContentCoding(coding),
        H::HttpResponseTimeout => ErrorCode::HttpResponseTimeout,
        H::HttpUpgradeFailed => ErrorCode::HttpUpgradeFailed,
        H::HttpProtocolError => ErrorCode::HttpProtocolError,
        H::LoopDetected => ErrorCode::LoopDetected,
        H::ConfigurationError => ErrorCode::ConfigurationError,
        H::InternalError(message) => ErrorCode::InternalError(message),
    })
}
