//! `wasi:http/outgoing-handler`: fenced outbound requests.
//!
//! wasmtime-wasi-http implements the standard interface; every request a
//! guest sends passes through [`OutboundHooks::send_request`], which, in
//! order:
//! 1. refuses it if the tenure's lease is lost (revoked, or past its renew
//!    deadline: L3), nothing sent;
//! 2. refuses it if its URL is not in the controller's `http_allow`,
//!    nothing sent, and logs the controller, URL and list;
//! 3. refuses it past the guest's bounds (requests per reconcile,
//!    concurrent requests, a declared body too large), nothing sent;
//! 4. replaces the `Leasehold-Lease`, `Leasehold-Epoch` and
//!    `Leasehold-Holder` headers with the tenure's true fence;
//! 5. sends it with the host's timeouts (a guest may ask for shorter ones)
//!    and body bounds, and drops the connection the moment the tenure is
//!    revoked, whether the guest is still waiting or already aborted (G3).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use ::http::{HeaderValue, Request, Response};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpHooks};

use crate::fence::Fence;
use crate::outbound::{
    AllowList, FENCED_PREFIX, HttpLimits, LIMIT_PREFIX, OutboundCounters, Outcome, TenureOutbound,
    headers,
};
use crate::runtime::Revocation;
use crate::runtime::environment::{GuestEnvironment, SimulatedRequest, Simulation};
use crate::telemetry;
use tracing::Instrument;

use super::send::{IoFuture, RequestClock};
type SendFuture = Box<dyn Future<Output = Result<(Response<WasiBody>, IoFuture), Error>> + Send>;

/// What a controller's outbound requests share across its tenures.
#[derive(Debug, Clone)]
pub struct OutboundPolicy {
    /// Where it may send requests.
    pub allow: Arc<AllowList>,
    /// The bounds of each request.
    pub limits: HttpLimits,
    /// Its tallies, read by `/metrics`.
    pub counters: Arc<OutboundCounters>,
    /// The roots its HTTPS trusts: the public ones, plus its `http_ca`.
    pub tls: Arc<rustls::ClientConfig>,
    /// Where an admitted request goes: the network, or a simulation's
    /// services (`leasehold sim`).
    pub environment: GuestEnvironment,
    /// The forwarding headers (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`)
    /// the operator lets its guest send (`http_forwarded_headers`,
    /// lowercase); any other is refused.
    pub forwarded: Arc<Vec<String>>,
}

impl Default for OutboundPolicy {
    fn default() -> Self {
        Self {
            allow: Arc::default(),
            limits: HttpLimits::default(),
            counters: Arc::default(),
            tls: crate::outbound::public_tls(),
            environment: GuestEnvironment::Host,
            forwarded: Arc::default(),
        }
    }
}

/// The outbound HTTP slice of a guest's host state.
pub struct HttpHost {
    pub(crate) ctx: WasiHttpCtx,
    pub(crate) hooks: OutboundHooks,
}

impl HttpHost {
    /// Outbound HTTP of one tenure.
    pub fn new(
        controller: String,
        fence: Fence,
        revocation: Revocation,
        policy: OutboundPolicy,
        tenure: Arc<TenureOutbound>,
    ) -> Self {
        let in_flight = Arc::new(Semaphore::new(policy.limits.concurrent_requests));
        Self {
            ctx: WasiHttpCtx::new(),
            hooks: OutboundHooks {
                fence_headers: FenceHeaders::new(&fence),
                controller,
                fence,
                revocation,
                policy,
                tenure,
                in_flight,
                sent_this_call: 0,
            },
        }
    }

    /// A guest call (reconcile, describe) begins: its request budget is
    /// fresh.
    pub fn begin_call(&mut self) {
        self.hooks.sent_this_call = 0;
    }
}

/// The three header values, built once per tenure.
struct FenceHeaders {
    lease: HeaderValue,
    epoch: HeaderValue,
    holder: HeaderValue,
}

impl FenceHeaders {
    fn new(fence: &Fence) -> Self {
        // Names are DNS labels and holders are validated identities, so
        // every value is a valid header value; fall back to an escaped form
        // rather than ever sending a request without its fence.
        let value = |text: String| {
            HeaderValue::from_str(&text).unwrap_or_else(|_| {
                HeaderValue::from_str(&text.escape_default().to_string())
                    .unwrap_or(HeaderValue::from_static("invalid"))
            })
        };
        Self {
            lease: value(fence.key.to_string()),
            epoch: value(fence.epoch.0.to_string()),
            holder: value(fence.holder.clone()),
        }
    }
}

/// The hooks wasmtime-wasi-http calls for each outbound request.
pub struct OutboundHooks {
    controller: String,
    fence: Fence,
    fence_headers: FenceHeaders,
    revocation: Revocation,
    policy: OutboundPolicy,
    tenure: Arc<TenureOutbound>,
    in_flight: Arc<Semaphore>,
    sent_this_call: u32,
}

impl OutboundHooks {
    /// Decide whether `request` may leave the host; on success the permit
    /// holds one of the guest's concurrent-request slots.
    fn admit(&mut self, request: &Request<WasiBody>) -> Result<OwnedSemaphorePermit, Error> {
        let counters = &self.policy.counters;
        if self.revocation.is_lost_at(Instant::now()) {
            counters.count(Outcome::RefusedAfterLoss);
            return Err(Error::InternalError(Some(format!(
                "{FENCED_PREFIX}controller {}: {}: the lease is lost; nothing was sent",
                self.controller, self.fence
            ))));
        }
        if let Err(denied) = self.policy.allow.check(request.uri()) {
            counters.count(Outcome::Denied);
            tracing::warn!(
                controller = self.controller,
                epoch = self.fence.epoch.0,
                url = denied.url,
                http_allow = %self.policy.allow,
                "outbound request denied: {}; nothing was sent",
                denied.reason
            );
            return Err(Error::HttpRequestDenied);
        }
        if let Some(problem) = self.header_problem(request) {
            counters.count(Outcome::Denied);
            tracing::warn!(
                controller = self.controller,
                epoch = self.fence.epoch.0,
                url = crate::outbound::display_url(request.uri()),
                "outbound request denied: {problem}; nothing was sent"
            );
            return Err(Error::HttpRequestDenied);
        }
        let limits = &self.policy.limits;
        let limited = |what: String| {
            counters.count(Outcome::Limited);
            Error::InternalError(Some(format!(
                "{LIMIT_PREFIX}controller {}: {}: {what}; nothing was sent",
                self.controller, self.fence
            )))
        };
        if self.sent_this_call >= limits.requests_per_reconcile {
            return Err(limited(format!(
                "{} requests in this reconcile already (the limit)",
                limits.requests_per_reconcile
            )));
        }
        if let Some(length) = declared_length(request)
            && length > limits.request_body_bytes
        {
            counters.count(Outcome::Limited);
            return Err(Error::HttpRequestBodySize(Some(length)));
        }
        let permit = self.in_flight.clone().try_acquire_owned().map_err(|_| {
            limited(format!(
                "{} requests in flight already (the limit)",
                limits.concurrent_requests
            ))
        })?;
        self.sent_this_call += 1;
        Ok(permit)
    }

    /// Replace whatever the guest set under the fence's names, and under
    /// names a server would read as them (`leasehold_epoch`).
    fn stamp(&self, request: &mut Request<WasiBody>) {
        let map = request.headers_mut();
        let lookalikes: Vec<::http::HeaderName> = map
            .keys()
            .filter(|name| headers::is_fence_name(name.as_str()))
            .cloned()
            .collect();
        for name in lookalikes {
            map.remove(name);
        }
        map.insert(headers::LEASE, self.fence_headers.lease.clone());
        map.insert(headers::EPOCH, self.fence_headers.epoch.clone());
        map.insert(headers::HOLDER, self.fence_headers.holder.clone());
    }

    /// Why the request's headers may not leave: a `Trailer` header that
    /// announces a fence header (a trailer after the body would reach the
    /// receiver after the true one), or a forwarding header the operator
    /// did not list.
    fn header_problem(&self, request: &Request<WasiBody>) -> Option<String> {
        for value in request.headers().get_all(::http::header::TRAILER) {
            let announced = String::from_utf8_lossy(value.as_bytes()).into_owned();
            if announced.split(',').any(headers::is_fence_name) {
                return Some("its Trailer header announces a fence header".to_string());
            }
        }
        request
            .headers()
            .keys()
            .map(|name| name.as_str())
            .find(|name| {
                headers::is_forwarding_name(name)
                    && !self.policy.forwarded.iter().any(|allowed| allowed == name)
            })
            .map(|name| {
                format!(
                    "it sets {name}, a forwarding header this controller's \
                     http_forwarded_headers does not list"
                )
            })
    }

    /// The guest's timeouts, never longer than the host's.
    fn options(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let limits = &self.policy.limits;
        let asked = asked.unwrap_or_default();
        let bound =
            |asked: Option<std::time::Duration>, max| Some(asked.map_or(max, |a| a.min(max)));
        RequestOptions {
            connect_timeout: bound(asked.connect_timeout, limits.connect_timeout),
            first_byte_timeout: bound(asked.first_byte_timeout, limits.first_byte_timeout),
            between_bytes_timeout: bound(asked.between_bytes_timeout, limits.between_bytes_timeout),
        }
    }

    fn cancelled(&self) -> Error {
        Error::InternalError(Some(format!(
            "{FENCED_PREFIX}controller {}: {}: the lease was lost while the request was in flight; \
             the connection was dropped",
            self.controller, self.fence
        )))
    }
}

fn declared_length(request: &Request<WasiBody>) -> Option<u64> {
    request
        .headers()
        .get(::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Put an admitted, stamped request on its way: on the network, or to a
/// simulation's services, which never open a socket. Everything before this
/// (the fence, the allow list, the bounds) and around it (the revocation
/// that cuts it) is the same for both. Past `clock`'s total bound the
/// request fails as `connection-read-timeout`.
async fn deliver(
    environment: GuestEnvironment,
    request: Request<WasiBody>,
    options: RequestOptions,
    tls: Arc<rustls::ClientConfig>,
    mut clock: RequestClock,
) -> Result<(Response<WasiBody>, IoFuture), Error> {
    match environment {
        GuestEnvironment::Host => super::send::send(request, options, tls, clock).await,
        GuestEnvironment::Simulated(simulation) => {
            clock
                .bound(
                    Error::ConnectionReadTimeout,
                    simulated(simulation.as_ref(), request, options),
                )
                .await
        }
    }
}

/// A request delivered to a simulation: its body read whole (through the
/// request's bound, which fails a body over it as on the wire), the
/// simulation's answer made a response.
async fn simulated(
    simulation: &dyn Simulation,
    request: Request<WasiBody>,
    options: RequestOptions,
) -> Result<(Response<WasiBody>, IoFuture), Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let answer = simulation
        .send(SimulatedRequest {
            method: parts.method.as_str().to_string(),
            url: parts.uri.to_string(),
            headers,
            body: body.to_vec(),
            first_byte_timeout: options.first_byte_timeout,
        })
        .await?;
    let mut response = Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    let body = http_body_util::Full::new(Bytes::from(answer.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    let response = response
        .body(body)
        .map_err(|e| Error::InternalError(Some(format!("simulated response: {e}"))))?;
    let io: IoFuture = Box::new(async { Ok(()) });
    Ok((response, io))
}

/// How an error on the wire is counted.
fn outcome_of(error: &Error) -> Outcome {
    match error {
        Error::ConnectionTimeout
        | Error::ConnectionReadTimeout
        | Error::ConnectionWriteTimeout
        | Error::HttpResponseTimeout
        | Error::DnsTimeout => Outcome::TimedOut,
        Error::HttpRequestBodySize(_) | Error::HttpResponseBodySize(_) => Outcome::Limited,
        Error::InternalError(Some(message)) if message.starts_with(FENCED_PREFIX) => {
            Outcome::Cancelled
        }
        _ => Outcome::Error,
    }
}

impl WasiHttpHooks for OutboundHooks {
    fn send_request(
        &mut self,
        mut request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> SendFuture {
        let permit = match self.admit(&request) {
            Ok(permit) => permit,
            Err(error) => return Box::new(async move { Err(error) }),
        };
        self.stamp(&mut request);
        // A child of the reconcile that sends it; its context travels in
        // the request's `traceparent` (replacing the guest's own, if any).
        let span = telemetry::http_span(
            request.method().as_str(),
            request.uri().host().unwrap_or_default(),
        );
        telemetry::inject(&span, request.headers_mut());
        let options = self.options(options);
        let limits = self.policy.limits;
        let request = request.map(|body| {
            Bounded::new(body, limits.request_body_bytes, Side::Request, None).boxed_unsync()
        });
        let counters = self.policy.counters.clone();
        let tls = self.policy.tls.clone();
        let environment = self.policy.environment.clone();
        // The whole request, connect to last response byte, ends by here.
        let deadline = tokio::time::Instant::now() + limits.request_total;
        let revocation = self.revocation.clone();
        let cancelled = self.cancelled();
        let cancelled_io = self.cancelled();
        self.tenure.note();
        let started = Instant::now();
        let traced = span.clone();
        Box::new(
            async move {
                let sent = tokio::select! {
                    // A revocation wins over a ready response: the guest must
                    // not see a reply to a request its lost tenure sent.
                    biased;
                    _ = revocation.revoked() => Err(cancelled),
                    sent = deliver(
                        environment,
                        request,
                        options,
                        tls,
                        RequestClock::new(deadline),
                    ) => sent,
                };
                counters.observe(started.elapsed());
                match &sent {
                    Ok((response, _)) => {
                        traced.record("http.status", response.status().as_u16());
                    }
                    Err(error) => telemetry::outcome(&traced, outcome_of(error).label()),
                }
                drop(traced);
                match sent {
                    Ok((response, io)) => {
                        counters.count(Outcome::Sent);
                        // The connection's driver ends when the tenure is
                        // revoked, which drops the connection even if the
                        // guest's store still holds the response body.
                        let io_revocation = revocation.clone();
                        let io: IoFuture = Box::new(async move {
                            tokio::select! {
                                biased;
                                _ = io_revocation.revoked() => Err(cancelled_io),
                                done = Box::into_pin(io) => done,
                            }
                        });
                        let response = response.map(|body| {
                            Bounded::new(
                                body.boxed_unsync(),
                                limits.response_body_bytes,
                                Side::Response,
                                Some(permit),
                            )
                            .until(deadline, counters.clone())
                            .boxed_unsync()
                        });
                        Ok((response, io))
                    }
                    Err(error) => {
                        counters.count(outcome_of(&error));
                        Err(error)
                    }
                }
            }
            .instrument(span),
        )
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Request,
    Response,
}

/// A body that fails once more than `limit` bytes passed through it. The
/// response's body also holds the request's concurrency slot until it is
/// read to the end or dropped.
struct Bounded {
    inner: WasiBody,
    limit: u64,
    seen: u64,
    side: Side,
    _permit: Option<OwnedSemaphorePermit>,
    /// The request's total bound (a response body only): past it the body
    /// fails as timed out, counted as such. Checked on every read, without
    /// a timer of its own: a body read from the network carries the
    /// request's clock (`send::RequestClock`), armed no later than this
    /// bound, which wakes the reader when it passes; a simulation's body is
    /// whole when it is handed over, so no read of it waits.
    deadline: Option<(tokio::time::Instant, Arc<OutboundCounters>)>,
}

impl Bounded {
    fn new(inner: WasiBody, limit: u64, side: Side, permit: Option<OwnedSemaphorePermit>) -> Self {
        Self {
            inner,
            limit,
            seen: 0,
            side,
            _permit: permit,
            deadline: None,
        }
    }

    /// End the body, as timed out, at `deadline`.
    fn until(mut self, deadline: tokio::time::Instant, counters: Arc<OutboundCounters>) -> Self {
        self.deadline = Some((deadline, counters));
        self
    }
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if this.seen > this.limit {
            return Poll::Ready(None);
        }
        if let Some((deadline, counters)) = &this.deadline
            && tokio::time::Instant::now() >= *deadline
        {
            counters.count(Outcome::TimedOut);
            // Once: the body ends here.
            this.seen = this.limit.saturating_add(1);
            return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                // Trailers a guest sends under a fence name (any case, `_`
                // for `-`) never leave: the true fence is in the head.
                if let Some(trailers) = frame.trailers_mut() {
                    let forged: Vec<::http::HeaderName> = trailers
                        .keys()
                        .filter(|name| headers::is_fence_name(name.as_str()))
                        .cloned()
                        .collect();
                    for name in forged {
                        trailers.remove(name);
                    }
                }
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len() as u64);
                    if this.seen > this.limit {
                        let limit = Some(this.limit);
                        return Poll::Ready(Some(Err(match this.side {
                            Side::Request => Error::HttpRequestBodySize(limit),
                            Side::Response => Error::HttpResponseBodySize(limit),
                        })));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
