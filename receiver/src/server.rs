//! HTTP: the routes, the delivery of answers (and of test faults), and
//! serving connections one by one.
//!
//! Connections are served here rather than by `axum::serve` for two
//! reasons: `drop_after_apply` must close the connection a request came
//! on without answering, which a handler cannot do, and stopping the
//! receiver must cut connections left hanging by `hang`.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::faults::{Fault, FaultSpec};
use crate::record::Outcome;
use crate::state::{self, Answer, Body, Incoming as Decide, State as ReceiverState};

/// Largest request body accepted (a bucket spec is tens of bytes).
pub const MAX_REQUEST_BODY_BYTES: usize = 64 * 1024;
/// Size of each chunk of an `endless_body` answer after the decided JSON.
const ENDLESS_CHUNK_BYTES: usize = 16 * 1024;
/// Pause after a failed `accept` (say, out of file descriptors), so the
/// loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<ReceiverState>,
    pub(crate) test_hooks: bool,
}

impl Shared {
    pub(crate) fn new(state: ReceiverState, test_hooks: bool) -> Self {
        Self {
            state: Mutex::new(state),
            test_hooks,
        }
    }

    /// The state. A panic while it was held cannot leave it half-changed
    /// in a way that matters more than stopping would (each decision
    /// appends its entry last), so a poisoned lock is taken over.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ReceiverState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Set on every request: closes the connection it came on without an
/// answer.
#[derive(Debug, Clone)]
struct DropConnection(Arc<Notify>);

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let mut router = Router::new()
        .route("/buckets", any(buckets))
        .route("/buckets/{*name}", any(bucket))
        .route("/_record", get(record))
        .route("/_effects", get(effects));
    if shared.test_hooks {
        router = router.route(
            "/_faults",
            get(get_fault).post(set_fault).delete(clear_fault),
        );
    }
    router.with_state(shared)
}

async fn buckets(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    resource(shared, None, request).await
}

async fn bucket(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    // The raw path, not a decoded one: a name that needs percent-encoding
    // is not a DNS label and is refused as such.
    let name = request
        .uri()
        .path()
        .strip_prefix("/buckets/")
        .unwrap_or_default()
        .to_string();
    resource(shared, Some(name), request).await
}

async fn resource(shared: Arc<Shared>, name: Option<String>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let dropper = parts.extensions.get::<DropConnection>().cloned();
    let body = if parts.method == Method::GET || parts.method == Method::HEAD {
        None
    } else {
        Some(read_body(body).await)
    };
    let (answer, fault, entry) = shared.lock().decide(Decide {
        method: &parts.method,
        path: parts.uri.path(),
        bucket: name.as_deref(),
        headers: &parts.headers,
        body,
    });
    if entry.outcome != Outcome::Read {
        tracing::info!(
            seq = entry.seq,
            method = %entry.method,
            path = %entry.path,
            lease = entry.lease.as_deref().unwrap_or("-"),
            epoch = entry.epoch.map(|e| e.to_string()).as_deref().unwrap_or("-"),
            outcome = %entry.outcome,
            status = entry.status,
            fault = entry.fault.as_deref().unwrap_or("-"),
            "request decided"
        );
    }
    deliver(answer, fault, dropper).await
}

async fn read_body(body: AxumBody) -> Body {
    match Limited::new(body, MAX_REQUEST_BODY_BYTES).collect().await {
        Ok(collected) => Body::Read(collected.to_bytes().to_vec()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Body::Refused {
            status: 413,
            why: format!("the body is over {MAX_REQUEST_BODY_BYTES} bytes"),
        },
        Err(error) => Body::Refused {
            status: 400,
            why: format!("the body could not be read: {error}"),
        },
    }
}

/// Send the decided answer, shaped by the fault, if any.
async fn deliver(
    answer: Answer,
    fault: Option<Fault>,
    dropper: Option<DropConnection>,
) -> Response {
    match fault {
        None => respond(answer),
        Some(Fault::Delay { delay_ms }) => {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            respond(answer)
        }
        Some(Fault::Hang) => std::future::pending().await,
        Some(Fault::DropAfterApply) => {
            match dropper {
                Some(DropConnection(notify)) => notify.notify_one(),
                // Served without the connection layer (not by this
                // crate's server): hanging is the nearest thing.
                None => tracing::warn!("drop_after_apply without a connection to drop; hanging"),
            }
            std::future::pending().await
        }
        Some(Fault::EndlessBody { chunk_interval_ms }) => endless(answer, chunk_interval_ms),
    }
}

fn status_of(answer: &Answer) -> StatusCode {
    StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn respond(answer: Answer) -> Response {
    let mut response = (status_of(&answer), answer.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if answer.replayed {
        headers.insert(state::headers::REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

fn endless(answer: Answer, chunk_interval_ms: u64) -> Response {
    let status = status_of(&answer);
    let first = Bytes::from(answer.body);
    let padding = Bytes::from(vec![b' '; ENDLESS_CHUNK_BYTES]);
    let interval = Duration::from_millis(chunk_interval_ms);
    let chunks = futures::stream::unfold(Some(first), move |first| {
        let padding = padding.clone();
        async move {
            let chunk = match first {
                Some(first) => first,
                None => {
                    if interval.is_zero() {
                        // As fast as the client reads, without starving
                        // other connections on this worker.
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(interval).await;
                    }
                    padding
                }
            };
            Some((Ok::<Bytes, Infallible>(chunk), None))
        }
    });
    let mut response = Response::new(AxumBody::from_stream(chunks));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn record(State(shared): State<Arc<Shared>>) -> Response {
    let body = serde_json::to_vec(shared.lock().record());
    json_response(body)
}

async fn effects(State(shared): State<Arc<Shared>>) -> Response {
    let state = shared.lock();
    let applied: Vec<_> = state
        .record()
        .iter()
        .filter(|e| e.outcome == Outcome::Applied)
        .collect();
    json_response(serde_json::to_vec(&applied))
}

fn json_response(body: Result<Vec<u8>, serde_json::Error>) -> Response {
    match body {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({ "error": format!("cannot encode the record: {error}") })),
        )
            .into_response(),
    }
}

async fn get_fault(State(shared): State<Arc<Shared>>) -> Response {
    let pending = shared.lock().faults.peek();
    axum::Json(json!({ "pending": pending })).into_response()
}

async fn set_fault(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let spec: FaultSpec = match serde_json::from_slice(&body) {
        Ok(spec) => spec,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({ "error": format!("not a fault spec: {error}") })),
            )
                .into_response();
        }
    };
    if let Err(why) = spec.validate() {
        return (StatusCode::BAD_REQUEST, axum::Json(json!({ "error": why }))).into_response();
    }
    tracing::warn!(
        fault = spec.fault.name(),
        requests = spec.requests,
        "test fault set"
    );
    shared.lock().faults.set(spec);
    axum::Json(json!({ "pending": spec })).into_response()
}

async fn clear_fault(State(shared): State<Arc<Shared>>) -> Response {
    shared.lock().faults.clear();
    StatusCode::NO_CONTENT.into_response()
}

/// Accept and serve connections until the task is aborted; aborting it
/// drops every connection, hanging ones included.
pub(crate) async fn serve(listener: TcpListener, router: Router) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, router.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed; retrying shortly");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, router: Router) {
    let dropper = DropConnection(Arc::new(Notify::new()));
    let dropped = dropper.0.clone();
    let tower = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(dropper.clone());
        tower.call(request)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        }
        // Dropping the connection future closes the socket with nothing
        // written for the request in flight.
        () = dropped.notified() => tracing::debug!("connection dropped by drop_after_apply"),
    }
}
