//! The HTTP surface of one replica: health, readiness, metrics, leases,
//! objects, events and object changes (the public contract,
//! `docs/contract.md`).
//!
//! Owns: paths, JSON shapes, status codes, the bearer tokens ([`auth`])
//! and the request-size limit. Must never: change leases or run
//! guests. It reads the [`Status`] the supervisors publish and calls the
//! [`Authority`] and [`Store`] traits; every replica serves the same
//! durable state, so any replica can answer any request.
//!
//! # Endpoints
//!
//! The reference is the OpenAPI document `docs/openapi.json`, compiled in
//! and served at `GET /v1/openapi.json` ([`openapi`]); the tests hold it to
//! the routes [`router`] serves, in both directions, and to the shapes of
//! real answers. Routes are added only through `Routes::add`, which
//! records each one for that comparison.
//!
//! Every list answers one envelope, `{"items": [...], "next": <cursor> |
//! null}` ([`page`]): `limit` is 1 to [`crate::limits::MAX_PAGE_SIZE`],
//! default [`crate::limits::DEFAULT_PAGE_SIZE`]; `next` is the cursor of
//! the page's last item, to pass as `after` for the following page, and
//! `null` when nothing more was there.
//!
//! Every error is `{"error": "<what happened and what to do>", "code":
//! "<machine-readable>"}` with codes `invalid_request` (400),
//! `unauthorized` (401), `forbidden` (403), `not_found` (404), `method_not_allowed` (405),
//! `conflict` (409), `too_large` (413), `unavailable` / `wrong_database` /
//! `schema` (503), `overloaded` (503 with `Retry-After`, see below) and
//! `internal` (500). Times are
//! RFC 3339 in UTC with microseconds, e.g. `2025-01-31T12:00:00.123456Z`.
//!
//! - `GET /healthz`: `200 ok` (text) while the process serves.
//! - `GET /readyz`: `200` when all four checks under `checks` pass, else
//!   `503`; `failed` names those that do not (see [`health`]):
//!   `{"ready": true, "cluster": "demo", "holder": "h", "failed": [],
//!     "checks": {"database": {"ok": true, ...}, "writes": {"ok": true, ...},
//!                "holder": {"ok": true, "state": "claimed"},
//!                "controllers": {"ok": true, ...}},
//!     "database": {"ok": true, "state": "verified", "database_id": "...",
//!                  "system_identifier": "...", "endpoint": "..."},
//!     "controllers": {"scheduler": {"state": "leading", "epoch": 3},
//!                     "rollout": {"state": "standby", "holder": "other"}}}`.
//!   Database states: `verified` (PostgreSQL), `embedded` (SQLite in the
//!   data directory: `"durable": true`, `database_id`, `endpoint`),
//!   `memory` (with `"durable": false` and a `warning`), `unknown` and
//!   `failing` (with a `reason`). Controller
//!   states: `starting`, `leading` (`epoch`, and `problem` while its guest
//!   is being restarted), `standby` (`holder`, may be null), `failing`
//!   (`reason`), `stopped`. The database is probed live on each call
//!   (bounded by a 1 s timeout and cached for 1 s), so readiness drops
//!   while the database is unreachable or refuses writes and returns when
//!   it is back.
//! - `GET /metrics`: Prometheus text; see [`metrics`].
//! - `GET /v1/openapi.json`: the OpenAPI document (exempt from the request
//!   budgets, like the three above).
//! - `GET /ui/`, `/ui/leases/{name}`, `/ui/objects/{kind}`, `/ui/changes`:
//!   the web console, a page that reads this API ([`ui`]); `/ui` redirects
//!   to `/ui/`, and `/ui/console.js` and `/ui/console.css` are its assets.
//!   Exempt from the budgets and the token check: constants, no data.
//! - `GET /v1/leases[?after=NAME][&limit=N]`: a page of `{"name", "holder",
//!   "epoch", "acquired_at", "expires_at", "held_here", "active",
//!   "crash_detection", "holder_session", "last_move", "shard"}` by name; `next`
//!   is a lease name. `held_here`: this replica's own supervisor leads
//!   the lease now, at that epoch (never decided by comparing holder
//!   names); `active`: someone does (not released, not
//!   expired); `crash_detection`: how the current tenure may be taken over
//!   if its holder dies (`"session"` or `"ttl"`); `holder_session`:
//!   `{"pid", "backend_start"}` of the holder's liveness session the grant
//!   was made under (`backend_start` null unless its host registered that
//!   session), or null when unknown; `last_move`: `{"reason", "at",
//!   "from", "to"}` of the last time lease placement moved it (`reason`
//!   `over_share`, `no_other_host` or `lapsed`; `from` null when that grant
//!   was its first), recorded by the grant that completed the move, or
//!   null if placement never moved it.
//! - `GET /v1/leases/{name}`: that lease, as `/v1/leases` lists it; 404
//!   `not_found` for a lease never granted.
//! - `GET /v1/leases/{name}/history[?after=EPOCH][&limit=N]`: a page of
//!   tenures newest first, `{"epoch", "holder", "endpoint", "acquired_at",
//!   "ended_at", "end_reason", "writes", "last_write_at",
//!   "outbound_requests", "last_outbound_at"}`; `next` is an epoch and
//!   `after=E` lists the tenures below epoch E (the memory backend keeps
//!   the newest [`crate::limits::MAX_HISTORY`] of each lease; PostgreSQL
//!   keeps them all).
//!   `ended_at`, `end_reason`, `last_write_at` and
//!   `last_outbound_at` are null while unknown. `outbound_requests` (the
//!   guests' HTTP requests that left the host) and `last_outbound_at` (by
//!   the sending host's clock) are recorded when the tenure ends: 0 and
//!   null while it runs, or if its host died first. A lease that was never
//!   granted has no tenures: 200 with no items, not 404 (a configured
//!   controller that has not run yet is not an error).
//! - `GET /v1/objects/{kind}/{name}`: `{"kind", "name", "version",
//!   "value", "generation", "labels", "owner", "finalizers",
//!   "deleting_since", "status"}` where `value` and `status` are the
//!   stored JSON itself (not a string), with `ETag: "<version>"`; 404 if
//!   absent.
//! - `GET /v1/objects/{kind}[?after=NAME][&limit=N]`: a page of objects in
//!   name order; `next` is an object name.
//! - `PUT /v1/objects/{kind}/{name}`: the body is the JSON value (any
//!   content type). Preconditions: `If-Match: <version>` (or `"<version>"`)
//!   replaces only that version; `If-Match: 0` or `If-None-Match: *`
//!   creates only if absent; `If-Match: *` replaces only if present
//!   (concurrent `If-Match: *` writers on an existing object all succeed,
//!   one after the other, on every backend). Every failed precondition is
//!   409 `conflict` (not RFC 9110's 412), an absent object under
//!   `If-Match: <version>` or `*` included. Answers the stored object: 201
//!   when this request created it, 200 when it replaced one. A bare value
//!   keeps the metadata; a body of `Content-Type:
//!   application/vnd.leasehold.object+json` is `{"value", "labels",
//!   "owner", "finalizers"}` and replaces it (204 when that removed the
//!   last finalizer of an object marked for deletion).
//! - `PUT /v1/objects/{kind}/{name}/status[?generation=G]`: the status
//!   part only (JSON, `null` clears); 409 if `G` is not the generation.
//! - `DELETE /v1/objects/{kind}/{name}`: optional `If-Match: <version>` or
//!   `*`; 204 removed (with what it owned), 202 with the object when
//!   finalizers hold it (marked), 404 if absent without `If-Match`, 409
//!   when `If-Match` fails (another version, or absent).
//! - `GET /v1/events[?after=SEQ][&limit=N][&wait=DURATION]`: a page of the
//!   events with `seq > SEQ` (default 0) in commit order, `{"seq",
//!   "revision", "at", "kind", "name", "reason", "message", "origin":
//!   {"by": "api"} | {"by": "guest", "lease", "epoch", "holder"}}`; `next`
//!   is a `seq`. With `wait` (e.g. `10s`, capped at
//!   [`crate::timeouts::EVENTS_LONG_POLL_MAX`]) the request is held until
//!   such events exist or the wait ends (then no items); a replica that is
//!   stopping answers held polls at once with no items.
//! - `GET /v1/changes[?after=POSITION][&limit=N][&kind=K...][&wait=DURATION]`:
//!   a page of the object changes (every committed create, update and
//!   delete, by the API or a controller, with or without an event) with
//!   `position > POSITION`, of the kinds named (all when none), `{"position",
//!   "revision", "at", "kind", "name", "change", "version", "origin",
//!   "owner", "labels"}`; `next` is a position, also given when the read
//!   passed positions that hold nothing for this reader ([`changes`]).
//!   `wait` as for events; 410 `too_old` behind the retention floor.
//!
//! With any token configured ([`auth`]), every `/v1` request but `GET
//! /v1/openapi.json` needs `Authorization: Bearer <token>`: 401 without a
//! known token, 403 when it lacks the role (`PUT` and `DELETE` need
//! `write`) or the kind; without tokens the API is open. A request with more than one
//! `Authorization` header is refused with 400 (`invalid_request`) whatever
//! its method: no credential is chosen over another. Bodies are limited to
//! [`crate::limits::HTTP_BODY_BYTES`] (413) and must arrive within
//! [`crate::timeouts::HTTP_BODY_READ`] of the end of the header (else 408,
//! `request_timeout`, and the connection is closed).
//!
//! Connections ([`serve`]): a request header must be complete within
//! [`crate::timeouts::HTTP_HEADER_READ`] of its first byte, a connection
//! without a request in flight is closed after
//! [`crate::timeouts::HTTP_KEEP_ALIVE_IDLE`] of silence, and at most
//! [`crate::limits::HTTP_MAX_CONNECTIONS`] (lowered to
//! [`crate::limits::HTTP_CONNECTIONS_FD_SHARE_PERCENT`] % of the
//! file-descriptor limit) are open at once: a new connection past the cap
//! replaces the connection idle the longest, or, when every connection is
//! serving a request, is answered 503 (`too_many_connections`) and closed.
//!
//! Requests ([`serve::Limiter`]): at most [`crate::limits::HTTP_MAX_IN_FLIGHT`]
//! `/v1` requests are served at once, events aside; up to
//! [`crate::limits::HTTP_MAX_QUEUED`] more wait their turn, each for at most
//! [`crate::limits::HTTP_QUEUE_WAIT`]. `GET /v1/events` and `GET
//! /v1/changes` share a budget of their own, [`crate::limits::HTTP_MAX_EVENT_REQUESTS`] at once and no queue (a
//! held long poll costs a task, not a database connection, and must not
//! crowd out other reads). Beyond a budget a request is answered 503
//! `overloaded` with `Retry-After: 1` and nothing done, counted in
//! `leasehold_http_overloaded_total{budget}`. `/healthz`, `/readyz`,
//! `/metrics` and `/v1/openapi.json` are exempt. None of this touches leases: the lease authority
//! has its own database connections, apart from the pool the API and the
//! store share.

pub mod auth;
mod changes;
mod error;
mod events;
mod health;
mod leases;
pub mod metrics;
mod objects;
mod openapi;
mod page;
pub mod serve;
mod tail;
#[cfg(test)]
mod tests;
mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;

use crate::authority::Authority;
use crate::status::Status;
use crate::store::Store;

pub use crate::timeouts::{READINESS_PROBE_MAX_AGE, READINESS_PROBE_TIMEOUT};
pub use error::ApiError;
pub use serve::{ServeLimits, serve};

/// What the HTTP surface needs from the rest of the host.
#[derive(Clone)]
pub struct ApiState {
    /// The cluster this replica serves; every lease, object and event is
    /// read and written within it.
    pub cluster: String,
    /// This replica's holder identity (shown by `/readyz`).
    pub holder: String,
    /// What the supervisors report.
    pub status: Arc<Status>,
    /// The lease backend (leases, history, database identity).
    pub authority: Arc<dyn Authority>,
    /// The state backend (objects, events).
    pub store: Arc<dyn Store>,
    /// The bearer tokens that may call `/v1` ([`auth::Access::open`]: no
    /// token, every request let in).
    pub access: Arc<auth::Access>,
    /// Turns `true` when the server is about to stop: held long polls
    /// answer at once (with what there is) instead of holding the graceful
    /// shutdown for up to their whole wait.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

// By hand: the token must never reach a log line.
impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("cluster", &self.cluster)
            .field("holder", &self.holder)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// How the readiness probe behaves; tests shorten the cache.
#[derive(Debug, Clone, Copy)]
struct ProbeSettings {
    timeout: Duration,
    max_age: Duration,
}

/// The state every handler sees.
struct Shared {
    api: ApiState,
    probe: health::Probe,
    /// The budget of every `/v1` request but events.
    requests: Arc<serve::Limiter>,
    /// The budget of `GET /v1/events` (long polls hold a slot while they
    /// wait, at no other cost).
    events: Arc<serve::Limiter>,
    /// The host's own metrics (HTTP routes, pools, leases, process).
    host: Arc<metrics::HostMetrics>,
    /// The change stream's tail, read once for every long-polled reader
    /// of `/v1/changes` waiting at it.
    tail: tail::TailCache,
}

type AppState = Arc<Shared>;

/// The router serving every endpoint listed in the module documentation.
/// Serve it with `axum::serve`.
pub fn router(state: ApiState) -> Router {
    router_for_host(state, Arc::default())
}

/// [`router`] reporting `host`'s metrics (its database pools) on
/// `/metrics`.
pub fn router_for_host(state: ApiState, host: Arc<metrics::HostMetrics>) -> Router {
    build_limited(
        state,
        ProbeSettings {
            timeout: READINESS_PROBE_TIMEOUT,
            max_age: READINESS_PROBE_MAX_AGE,
        },
        crate::timeouts::HTTP_BODY_READ,
        Arc::new(serve::Limiter::new(
            "requests",
            serve::RequestLimits::REQUESTS,
        )),
        Arc::new(serve::Limiter::new("events", serve::RequestLimits::EVENTS)),
        host,
    )
}

#[cfg(test)]
fn build(state: ApiState, probe: ProbeSettings, body_read: Duration) -> Router {
    build_limited(
        state,
        probe,
        body_read,
        Arc::new(serve::Limiter::new(
            "requests",
            serve::RequestLimits::REQUESTS,
        )),
        Arc::new(serve::Limiter::new("events", serve::RequestLimits::EVENTS)),
        Arc::default(),
    )
}

/// [`build`] with the request budgets given (tests hold their slots).
fn build_limited(
    state: ApiState,
    probe: ProbeSettings,
    body_read: Duration,
    requests: Arc<serve::Limiter>,
    events: Arc<serve::Limiter>,
    host: Arc<metrics::HostMetrics>,
) -> Router {
    let shared: AppState = Arc::new(Shared {
        api: state,
        probe: health::Probe::new(probe.timeout, probe.max_age),
        requests,
        events,
        host,
        tail: tail::TailCache::default(),
    });
    assemble(shared, body_read).0
}

/// The routes [`router`] serves, as `(method, path template)`, from the
/// same [`assemble`] that builds it.
#[cfg(test)]
fn served_routes(state: ApiState) -> Vec<(Method, &'static str)> {
    let shared: AppState = Arc::new(Shared {
        api: state,
        probe: health::Probe::new(READINESS_PROBE_TIMEOUT, READINESS_PROBE_MAX_AGE),
        requests: Arc::new(serve::Limiter::new(
            "requests",
            serve::RequestLimits::REQUESTS,
        )),
        events: Arc::new(serve::Limiter::new("events", serve::RequestLimits::EVENTS)),
        host: Arc::default(),
        tail: tail::TailCache::default(),
    });
    assemble(shared, crate::timeouts::HTTP_BODY_READ).1
}

/// The router under construction and every route added to it, one method
/// at a time: the list the OpenAPI test compares with the document is the
/// one the router was built from. Add routes only through [`Routes::add`].
struct Routes {
    router: Router<AppState>,
    added: Vec<(Method, &'static str)>,
}

impl Routes {
    fn new() -> Self {
        Self {
            router: Router::new(),
            added: Vec::new(),
        }
    }

    /// Serve `method` on `path` with `handler`; methods added to the same
    /// path join it (axum merges them).
    fn add<H, T>(mut self, method: Method, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone())
            .unwrap_or_else(|_| panic!("axum cannot route {method} (adding {path})"));
        self.router = self.router.route(path, on(filter, handler));
        self.added.push((method, path));
        self
    }

    /// Apply `wrap` to the router as it is (a `route_layer` then covers the
    /// routes added so far).
    fn wrap(mut self, wrap: impl FnOnce(Router<AppState>) -> Router<AppState>) -> Self {
        self.router = wrap(self.router);
        self
    }
}

/// The whole router, and its routes as `(method, path template)`. The one
/// place routes are added.
fn assemble(shared: AppState, body_read: Duration) -> (Router, Vec<(Method, &'static str)>) {
    let routes = Routes::new()
        .add(Method::GET, "/v1/leases", leases::list)
        .add(Method::GET, "/v1/leases/{name}", leases::get)
        .add(Method::GET, "/v1/leases/{name}/history", leases::history)
        .add(Method::GET, "/v1/objects/{kind}", objects::list)
        .add(Method::GET, "/v1/objects/{kind}/{name}", objects::get)
        .add(Method::PUT, "/v1/objects/{kind}/{name}", objects::put)
        .add(Method::DELETE, "/v1/objects/{kind}/{name}", objects::delete)
        .add(
            Method::PUT,
            "/v1/objects/{kind}/{name}/status",
            objects::put_status,
        )
        .add(Method::GET, "/v1/events", events::list)
        .add(Method::GET, "/v1/changes", changes::list)
        // Only the routes above (`route_layer` wraps the routes added so
        // far), innermost: a request refused for its token or its body
        // takes no slot, and one refused here had its body read, so its
        // connection stays usable.
        .wrap(|router| {
            router.route_layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                limit_requests,
            ))
        })
        // Exempt from the request budgets: no database work beyond the one
        // shared, cached readiness probe, so they cannot add load that
        // grows with a flood, and they are what orchestrators and
        // monitoring read to judge a host under load (a busy host must not
        // look dead, and its overload counter must stay readable). The
        // OpenAPI document is a constant.
        .add(Method::GET, "/healthz", health::healthz)
        .add(Method::GET, "/readyz", health::readyz)
        .add(Method::GET, "/metrics", metrics::handler)
        .add(Method::GET, openapi::PATH, openapi::document)
        // The web console ([`ui`]): one constant page for each of its
        // paths and its two assets, exempt like the document. It holds no
        // data (its script reads /v1 with the token it is given), so it
        // needs no token itself.
        .add(Method::GET, "/ui", ui::to_root)
        .add(Method::GET, ui::ROOT, ui::page)
        .add(Method::GET, "/ui/leases/{name}", ui::page)
        .add(Method::GET, "/ui/objects/{kind}", ui::page)
        .add(Method::GET, "/ui/changes", ui::page)
        .add(Method::GET, "/ui/console.js", ui::script)
        .add(Method::GET, "/ui/console.css", ui::style);
    let router = routes
        .router
        // Innermost of the rest: only a request that passed the token
        // check has its body read.
        .route_layer(axum::middleware::from_fn_with_state(
            body_read,
            read_body_within_deadline,
        ))
        // Only matched routes: an unknown path is 404 whatever the token.
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            auth::require_token,
        ))
        .route_layer(axum::middleware::from_fn(refuse_repeated_authorization))
        // Outermost of the route layers: every answer of a matched route,
        // refusals included, carries its template for `count_request`.
        .route_layer(axum::middleware::from_fn(mark_route))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(crate::limits::HTTP_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            count_request,
        ))
        .with_state(shared.clone());
    for (method, path) in &routes.added {
        shared.host.http.declare(method.as_str(), path);
    }
    (router, routes.added)
}

/// The route template a response was answered under (see [`mark_route`]).
#[derive(Clone)]
struct RouteTemplate(Arc<str>);

/// Tag the response of a matched route with its template, for
/// [`count_request`] outside the router (only inside is the match known).
async fn mark_route(request: Request, next: Next) -> Response {
    let template = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|matched| RouteTemplate(Arc::from(matched.as_str())));
    let mut response = next.run(request).await;
    if let Some(template) = template {
        response.extensions_mut().insert(template);
    }
    response
}

/// Count every request the router answers, by route template (never the
/// raw path: `unmatched` when no route matched), method and status, with
/// the time until its response was built.
async fn count_request(State(shared): State<AppState>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let response = next.run(request).await;
    let route = response
        .extensions()
        .get::<RouteTemplate>()
        .map_or(metrics::UNMATCHED_ROUTE, |t| &*t.0);
    shared.host.http.observe(
        method.as_str(),
        route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Serve the request within its budget ([`serve::Limiter`]): the
/// long-polled feeds (events, changes) in theirs, every other `/v1`
/// request in the shared one; beyond it, 503
/// `overloaded` with `Retry-After`. The slot is held until the handler
/// answered (responses are built whole, so that is when the work is done).
async fn limit_requests(State(shared): State<AppState>, request: Request, next: Next) -> Response {
    let budget = if matches!(request.uri().path(), "/v1/events" | "/v1/changes") {
        &shared.events
    } else {
        &shared.requests
    };
    match budget.admit().await {
        Ok(slot) => {
            let response = next.run(request).await;
            drop(slot);
            response
        }
        Err(why) => {
            let limits = budget.limits();
            let reason = match why {
                serve::Overloaded::QueueFull if limits.queued == 0 => "every slot is taken",
                serve::Overloaded::QueueFull => "every slot is taken and the queue is full",
                serve::Overloaded::WaitedTooLong => "no slot came free in time",
            };
            ApiError::overloaded(format!(
                "the API is at its limit of {} requests at once (budget {}): {reason}; try \
                 again after the Retry-After delay",
                limits.in_flight,
                budget.name()
            ))
            .into_response()
        }
    }
}

/// Refuse a request with more than one `Authorization` header: servers and
/// proxies disagree on which of them counts, so choosing one would let a
/// request mean different things to different hops.
async fn refuse_repeated_authorization(request: Request, next: Next) -> Response {
    if request
        .headers()
        .get_all(header::AUTHORIZATION)
        .iter()
        .nth(1)
        .is_some()
    {
        return ApiError::invalid(
            "give the Authorization header once; a request with several is refused rather than \
             one of them chosen",
        )
        .into_response();
    }
    next.run(request).await
}

/// Read the whole request body within `deadline` of the end of its header,
/// before the handler runs, so a client that sends half a body cannot hold
/// the handler (and the connection) for longer. Bodies are small
/// ([`crate::limits::HTTP_BODY_BYTES`]) and every handler reads them whole
/// anyway.
async fn read_body_within_deadline(
    State(deadline): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if body.size_hint().exact() == Some(0) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let limit = crate::limits::HTTP_BODY_BYTES;
    let too_large = || {
        closing(ApiError::too_large(format!(
            "the request body is larger than {limit} bytes"
        )))
    };
    // A declared length over the limit is refused without reading.
    if body.size_hint().lower() > limit as u64 {
        return too_large();
    }
    let read = async {
        let mut chunks = body.into_data_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if bytes.len() + chunk.len() > limit {
                return Ok(None);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok::<_, axum::Error>(Some(bytes))
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(Some(bytes))) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Ok(None)) => too_large(),
        Ok(Err(e)) => closing(ApiError::invalid(format!(
            "cannot read the request body: {e}"
        ))),
        Err(_elapsed) => closing(ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            code: "request_timeout",
            message: format!(
                "the request body did not arrive within {}; send it at once after the header",
                humantime::format_duration(deadline)
            ),
            oldest_kept: None,
        }),
    }
}

/// `error`, closing the connection after it: the rest of the request body
/// was not read, so the next bytes on the connection are not a request.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The one time format of the API: RFC 3339, UTC, microseconds (the
/// database's precision), `Z` suffix.
fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod limit_tests {
    //! The request budgets as a client sees them, on a real listener over
    //! the memory backends.

    use std::net::SocketAddr;

    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::serve::{Limiter, RequestLimits};
    use super::*;
    use crate::authority::memory::MemoryAuthority;
    use crate::status::DatabaseState;
    use crate::store::memory::MemoryStore;

    /// Longest any step of these tests may take.
    const PATIENCE: Duration = Duration::from_secs(10);

    struct Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }

        fn json(&self) -> Value {
            serde_json::from_str(&self.body).expect("a JSON body")
        }
    }

    /// One request on its own connection (`Connection: close`), read whole.
    async fn get(addr: SocketAddr, path: &str) -> Reply {
        tokio::time::timeout(PATIENCE, async {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            let head = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
            stream.write_all(head.as_bytes()).await.expect("send");
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await.expect("read");
            let text = String::from_utf8(raw).expect("UTF-8");
            let (head, body) = text.split_once("\r\n\r\n").expect("a header end");
            let mut lines = head.lines();
            let status = lines
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|s| s.parse().ok())
                .expect("a status");
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .collect();
            Reply {
                status,
                headers,
                body: body.to_string(),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("GET {path} took longer than {PATIENCE:?}"))
    }

    /// Poll `done` until it holds, at most [`PATIENCE`].
    async fn until(what: &str, done: impl Fn() -> bool) {
        let started = tokio::time::Instant::now();
        while !done() {
            assert!(
                started.elapsed() < PATIENCE,
                "timed out waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The API over the memory backends with the given budgets, served on
    /// a loopback port; it counts as stopping once the sender is dropped.
    async fn api(
        requests: Arc<Limiter>,
        events: Arc<Limiter>,
    ) -> (SocketAddr, tokio::sync::watch::Sender<bool>) {
        let authority = Arc::new(MemoryAuthority::new());
        let store = Arc::new(MemoryStore::new(authority.clone()));
        let status = Arc::new(Status::new("demo".into(), "here".into(), &[]));
        status.set_database(DatabaseState::Memory);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let app = build_limited(
            ApiState {
                cluster: "demo".into(),
                holder: "here".into(),
                status,
                authority,
                store,
                access: Arc::new(auth::Access::open()),
                stopping,
            },
            ProbeSettings {
                timeout: READINESS_PROBE_TIMEOUT,
                max_age: READINESS_PROBE_MAX_AGE,
            },
            crate::timeouts::HTTP_BODY_READ,
            requests,
            events,
            Arc::default(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(serve(
            listener,
            app,
            ServeLimits::for_this_process().0,
            None,
            std::future::pending(),
        ));
        (addr, stop)
    }

    fn budget(name: &'static str, in_flight: usize, queued: usize, wait: Duration) -> Arc<Limiter> {
        Arc::new(Limiter::new(
            name,
            RequestLimits {
                in_flight,
                queued,
                queue_wait: wait,
            },
        ))
    }

    fn overloaded_metric(metrics: &str, budget: &str) -> Option<u64> {
        let prefix = format!("leasehold_http_overloaded_total{{budget=\"{budget}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
    }

    #[tokio::test]
    async fn past_its_budget_a_request_is_answered_503_overloaded_with_retry_after() {
        let requests = budget("requests", 1, 0, Duration::ZERO);
        let events = budget("events", 1, 0, Duration::ZERO);
        let (addr, _stop) = api(requests.clone(), events.clone()).await;
        assert_eq!(get(addr, "/v1/objects/nodes").await.status, 200);

        // Every slot busy (held here as a slow request would hold it).
        let held = requests.admit().await.expect("the one slot");
        let refused = get(addr, "/v1/objects/nodes").await;
        assert_eq!(refused.status, 503, "{}", refused.body);
        assert_eq!(refused.header("retry-after"), Some("1"));
        let body = refused.json();
        assert_eq!(body["code"], "overloaded", "{body}");
        let message = body["error"].as_str().expect("a message");
        assert!(message.contains("try again"), "{message}");
        assert_eq!(get(addr, "/v1/leases").await.status, 503);

        // Health, readiness and metrics answer all the same, and the
        // other budget is untouched.
        assert_eq!(get(addr, "/healthz").await.status, 200);
        assert_eq!(get(addr, "/readyz").await.status, 200);
        assert_eq!(get(addr, "/v1/events").await.status, 200);
        let metrics = get(addr, "/metrics").await;
        assert_eq!(metrics.status, 200);
        assert_eq!(
            overloaded_metric(&metrics.body, "requests"),
            Some(2),
            "{}",
            metrics.body
        );
        assert_eq!(
            overloaded_metric(&metrics.body, "events"),
            Some(0),
            "{}",
            metrics.body
        );
        // An unknown path is a 404, not a refusal.
        assert_eq!(get(addr, "/nowhere").await.status, 404);

        drop(held);
        assert_eq!(get(addr, "/v1/objects/nodes").await.status, 200);
        assert_eq!(requests.refused(), 2);
    }

    #[tokio::test]
    async fn a_queued_request_is_served_when_a_slot_comes_free() {
        let requests = budget("requests", 1, 1, PATIENCE);
        let (addr, _stop) = api(requests.clone(), budget("events", 1, 0, Duration::ZERO)).await;
        let held = requests.admit().await.expect("the one slot");
        let queued = tokio::spawn(async move { get(addr, "/v1/objects/nodes").await });
        until("the request is queued", || requests.queued() == 1).await;
        // The queue is full: the next is refused at once.
        assert_eq!(get(addr, "/v1/objects/nodes").await.status, 503);
        drop(held);
        let served = queued.await.expect("the queued request");
        assert_eq!(served.status, 200, "{}", served.body);
        assert_eq!(requests.refused(), 1);
    }

    #[tokio::test]
    async fn long_polls_spend_their_own_budget_not_the_other_requests() {
        let requests = budget("requests", 1, 0, Duration::ZERO);
        let events = budget("events", 1, 0, Duration::ZERO);
        let (addr, _stop) = api(requests.clone(), events.clone()).await;
        let poll = tokio::spawn(async move { get(addr, "/v1/events?wait=30s").await });
        until("the long poll holds its slot", || events.serving() == 1).await;
        let refused = get(addr, "/v1/events").await;
        assert_eq!(refused.status, 503, "{}", refused.body);
        assert_eq!(refused.json()["code"], "overloaded");
        // The change feed is long-polled too: it spends the same budget.
        let changes = get(addr, "/v1/changes").await;
        assert_eq!(changes.status, 503, "{}", changes.body);
        // Objects and leases are served beside the held poll.
        assert_eq!(get(addr, "/v1/objects/nodes").await.status, 200);
        assert_eq!(get(addr, "/v1/leases").await.status, 200);
        assert_eq!(requests.refused(), 0);
        assert_eq!(events.refused(), 2);
        poll.abort();
    }
}
