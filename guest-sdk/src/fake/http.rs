//! The fake's outbound HTTP: the host's rules for what may leave (deny by
//! default, `http_allow`, refusal after loss, requests per reconcile, body
//! bounds, the three fence headers), a scripted receiver, faults on the
//! wire, and a record of every request that left.
//!
//! Owns: [`HttpReply`], [`HttpFault`], [`HttpRecord`], the allow list, the
//! scripted routes and the HTTP fault queue, and the fake's answer to
//! `sys::http_send`. Must never: be laxer than the host (a request the host
//! refuses is refused here, in the host's order: lease, allow list,
//! bounds), let a guest's fence header through, or record a request as
//! delivered that the receiver never saw.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;

use crate::http::{
    EPOCH_HEADER, FENCED_PREFIX, HOLDER_HEADER, LEASE_HEADER, LIMIT_PREFIX, Method, Target,
};
use crate::sys::{ErrorCode, Scheme, WireHttpError, WireRequest, WireResponse};

use super::{FakeHost, State};

/// What the fake's receiver answers: a status, headers and a body.
///
/// # Example
///
/// ```
/// use leasehold_guest::HttpReply;
///
/// let reply = HttpReply::json(409, &serde_json::json!({ "error": "stale epoch" }))
///     .header("Retry-After", "1");
/// assert_eq!(reply.status, 409);
/// assert_eq!(reply.headers[0], ("content-type".to_string(), "application/json".to_string()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReply {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpReply {
    /// A reply with `status`, no headers and an empty body.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(leasehold_guest::HttpReply::status(204).body.is_empty());
    /// ```
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A reply with `status` and `value` as a JSON body.
    ///
    /// # Panics
    ///
    /// If `value` does not serialize: the test's script is wrong.
    ///
    /// # Example
    ///
    /// ```
    /// let reply = leasehold_guest::HttpReply::json(200, &[1, 2]);
    /// assert_eq!(reply.body, b"[1,2]");
    /// ```
    pub fn json<T: Serialize + ?Sized>(status: u16, value: &T) -> Self {
        let body = serde_json::to_vec(value)
            .unwrap_or_else(|e| panic!("a scripted JSON reply does not serialize: {e}"));
        Self::status(status)
            .header("content-type", "application/json")
            .body(body)
    }

    /// A reply with `status` and `text` as a plain-text body.
    ///
    /// # Example
    ///
    /// ```
    /// let reply = leasehold_guest::HttpReply::text(503, "try later");
    /// assert_eq!(reply.body, b"try later");
    /// ```
    pub fn text(status: u16, text: impl Into<String>) -> Self {
        Self::status(status)
            .header("content-type", "text/plain; charset=utf-8")
            .body(text.into())
    }

    /// Add a header.
    ///
    /// # Example
    ///
    /// ```
    /// let reply = leasehold_guest::HttpReply::status(200).header("ETag", "\"7\"");
    /// assert_eq!(reply.headers.len(), 1);
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the body.
    ///
    /// # Example
    ///
    /// ```
    /// let reply = leasehold_guest::HttpReply::status(200).body(vec![0u8; 3]);
    /// assert_eq!(reply.body.len(), 3);
    /// ```
    pub fn body(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.body = bytes.into();
        self
    }
}

/// A failure on the wire that [`FakeHost::fail_http`] injects into an
/// outbound request. The host's own refusals (not in `http_allow`, a bound
/// reached, the lease lost) need no fault: the fake applies them as the
/// host does.
///
/// # Example
///
/// ```
/// use leasehold_guest::http::{HttpError, Request};
/// use leasehold_guest::{FakeHost, HttpFault};
///
/// let host = FakeHost::new();
/// host.allow_http(["http://svc.test"]);
/// host.fail_next_http(HttpFault::ReplyLost);
/// // The guest sees a failure, but the receiver got the request.
/// assert!(matches!(Request::post("http://svc.test/apply").send(), Err(HttpError::Connection(_))));
/// assert!(host.http_requests()[0].delivered);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpFault {
    /// The receiver refuses the connection: nothing is delivered, and the
    /// request fails with [`HttpError::Connection`](crate::http::HttpError::Connection)
    /// (`connection-refused`).
    Refused,
    /// The connection is not open within the connect timeout: nothing is
    /// delivered, and the request fails with
    /// [`HttpError::Timeout`](crate::http::HttpError::Timeout)
    /// (`connection-timeout`).
    Timeout,
    /// The receiver gets the request and applies it (its scripted reply is
    /// used up), then the connection drops before the response arrives:
    /// the request fails with
    /// [`HttpError::Connection`](crate::http::HttpError::Connection)
    /// (`connection-terminated`). The guest cannot tell the effect
    /// happened: the case an [`crate::http::IdempotencyKey`] exists for.
    ReplyLost,
    /// As [`HttpFault::ReplyLost`], but the response does not come within
    /// the first-byte timeout: the request fails with
    /// [`HttpError::Timeout`](crate::http::HttpError::Timeout)
    /// (`connection-read-timeout`) after the receiver applied it.
    ReplyTimedOut,
    /// The lease is lost just before the request: it fails with
    /// [`HttpError::Fenced`](crate::http::HttpError::Fenced), nothing is
    /// sent, and every later call is fenced too (as
    /// [`crate::Fault::Fenced`]).
    Fenced,
}

/// A request that left the fake host, as the receiver saw it (or would
/// have, for one that was never delivered).
///
/// # Example
///
/// ```
/// use leasehold_guest::http::Request;
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// host.allow_http(["http://svc.test"]);
/// Request::put("http://svc.test/things/a?dry=1").body("x").send()?;
/// let sent = &host.http_requests()[0];
/// assert_eq!(sent.url, "http://svc.test/things/a?dry=1");
/// assert_eq!((sent.body.as_slice(), sent.epoch), (&b"x"[..], 1));
/// // No reply was scripted: the fake's receiver answers 404.
/// assert_eq!(sent.status, Some(404));
/// # Ok::<(), leasehold_guest::http::HttpError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRecord {
    /// The method.
    pub method: Method,
    /// `scheme://authority/path?query`, as sent (without a fragment; an
    /// empty path is `/`).
    pub url: String,
    /// The headers as the receiver sees them: names lowercased, the
    /// guest's in order (with the SDK's `content-length`), then the
    /// host's `leasehold-lease`, `leasehold-epoch` and `leasehold-holder`
    /// (whatever the guest set under those names is gone).
    pub headers: Vec<(String, String)>,
    /// The body (empty if there was none).
    pub body: Vec<u8>,
    /// The first-byte timeout the guest asked for.
    pub timeout: Option<Duration>,
    /// The epoch of the fence it was sent under.
    pub epoch: u64,
    /// Whether the receiver got it (and, for a scripted receiver, acted on
    /// it): false after [`HttpFault::Refused`] or [`HttpFault::Timeout`].
    pub delivered: bool,
    /// The status the receiver answered with, whether or not the answer
    /// reached the guest; `None` if it never answered.
    pub status: Option<u16>,
}

impl HttpRecord {
    /// The first value of the header `name`, compared case-insensitively.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// Request::get("http://svc.test/").header("X-Trace", "t1").send()?;
    /// assert_eq!(host.http_requests()[0].header("x-trace"), Some("t1"));
    /// assert_eq!(host.http_requests()[0].header("Leasehold-Holder"), Some("fake-host"));
    /// # Ok::<(), leasehold_guest::http::HttpError>(())
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON, for assertions; `None` if it is not JSON.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// Request::post("http://svc.test/").json(&serde_json::json!({ "n": 1 }))?.send()?;
    /// assert_eq!(host.http_requests()[0].body_json(), Some(serde_json::json!({ "n": 1 })));
    /// # Ok::<(), leasehold_guest::http::HttpError>(())
    /// ```
    pub fn body_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// A reply computed from the request, for [`FakeHost::respond_with`].
type Responder = Rc<RefCell<dyn FnMut(&HttpRecord) -> HttpReply>>;

/// What a route answers once its one-shot replies are used up.
#[derive(Clone)]
enum Standing {
    Fixed(HttpReply),
    With(Responder),
}

/// The replies scripted for one URL pattern.
struct Route {
    /// An exact URL, or a prefix ending in `*`.
    pattern: String,
    once: VecDeque<HttpReply>,
    standing: Option<Standing>,
}

impl Route {
    /// How well the pattern matches `url`: `None` if not at all; exact
    /// matches rank above every prefix, longer prefixes above shorter.
    fn rank(&self, url: &str) -> Option<usize> {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => url.starts_with(prefix).then_some(prefix.len()),
            None => (self.pattern == url).then_some(usize::MAX),
        }
    }

    fn can_answer(&self) -> bool {
        !self.once.is_empty() || self.standing.is_some()
    }
}

/// One `http_allow` entry, parsed as the host parses it.
#[derive(Debug, Clone)]
struct AllowEntry {
    scheme: Scheme,
    host: String,
    port: u16,
    /// `None` allows every path of the origin.
    path_prefix: Option<String>,
}

impl AllowEntry {
    fn parse(text: &str) -> Result<Self, String> {
        if text.contains('#') {
            return Err("an entry has no fragment".into());
        }
        let target = Target::parse(text)?;
        if target.query.is_some() {
            return Err("an entry is scheme://host[:port][/path-prefix], without a query".into());
        }
        let path_prefix = if target.path == "/" {
            None
        } else if has_dot_segment(&target.path) {
            return Err("an entry's path has a `.` or `..` segment".into());
        } else {
            Some(target.path)
        };
        Ok(Self {
            scheme: target.scheme,
            host: target.host,
            port: target.port,
            path_prefix,
        })
    }

    /// The host's rule: same scheme, host and port; a prefix ending in
    /// `/` matches paths under it, one without matches itself and paths
    /// under it (`/hooks` allows `/hooks` and `/hooks/a`, not `/hookshot`).
    fn allows(&self, target: &Target) -> bool {
        if target.scheme != self.scheme || target.port != self.port || target.host != self.host {
            return false;
        }
        match &self.path_prefix {
            None => true,
            Some(prefix) if prefix.ends_with('/') => target.path.starts_with(prefix.as_str()),
            Some(prefix) => {
                target.path == *prefix
                    || target
                        .path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }
        }
    }
}

/// Whether `path` has a `.` or `..` segment, raw or percent-encoded, or an
/// encoded separator: a server may resolve `/hooks/../admin` to `/admin`,
/// outside an allowed prefix, so the host refuses such paths.
fn has_dot_segment(path: &str) -> bool {
    let lowered = path.to_ascii_lowercase().replace("%2e", ".");
    lowered
        .split(['/', '\\'])
        .any(|segment| segment == "." || segment == "..")
        || lowered.contains("%2f")
        || lowered.contains("%5c")
}

/// The headers `wasi:http` refuses from a guest (wasmtime's default list,
/// which the host uses).
const FORBIDDEN_HEADERS: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
    "http2-settings",
];

/// The fake's outbound HTTP state, part of [`State`].
#[derive(Default)]
pub(super) struct HttpState {
    allow: Vec<AllowEntry>,
    routes: Vec<Route>,
    /// Faults by the request number they strike (`sent` when it is counted).
    faults: Vec<(u64, HttpFault)>,
    /// Every `http_send` so far, refused or not.
    sent: u64,
    /// Requests admitted in the current reconcile.
    this_reconcile: u32,
    records: Vec<HttpRecord>,
}

impl HttpState {
    /// A reconcile begins: its request budget is fresh.
    pub(super) fn begin_reconcile(&mut self) {
        self.this_reconcile = 0;
    }

    pub(super) fn pending_faults(&self) -> usize {
        self.faults.len()
    }
}

/// The receiver's answer, chosen with the state borrowed and produced
/// without it (a responder may use the fake).
enum Answer {
    Reply(HttpReply),
    With(Responder),
}

/// How the fake sends one admitted request.
struct Admitted {
    record: HttpRecord,
    fault: Option<HttpFault>,
    answer: Option<Answer>,
    response_limit: usize,
}

impl State {
    fn fenced_http(&self) -> WireHttpError {
        WireHttpError::Code(ErrorCode::InternalError(Some(format!(
            "{FENCED_PREFIX}controller {}: {}: the lease is lost; nothing was sent",
            self.fence.lease, self.fence
        ))))
    }

    /// The host's checks, in its order, and the record of what would be
    /// sent. Counts the request, and takes the fault aimed at it.
    fn admit_http(&mut self, request: &WireRequest) -> Result<Admitted, WireHttpError> {
        self.http.sent += 1;
        let sent = self.http.sent;
        let fault = self
            .http
            .faults
            .iter()
            .position(|(at, _)| *at == sent)
            .map(|index| self.http.faults.remove(index).1);
        // `wasi:http` refuses a forbidden header while the request is
        // built, before the host sees it.
        if let Some((name, _)) = request.headers.iter().find(|(name, _)| {
            FORBIDDEN_HEADERS
                .iter()
                .any(|forbidden| name.eq_ignore_ascii_case(forbidden))
        }) {
            return Err(WireHttpError::Build(format!(
                "header {name:?} is forbidden by wasi:http"
            )));
        }
        if fault == Some(HttpFault::Fenced) {
            self.revoked = true;
        }
        if self.revoked {
            return Err(self.fenced_http());
        }
        let url = request.url();
        let target = Target::parse(&url).map_err(WireHttpError::Build)?;
        let allowed = !has_dot_segment(&target.path)
            && self.http.allow.iter().any(|entry| entry.allows(&target));
        if !allowed {
            return Err(WireHttpError::Code(ErrorCode::HttpRequestDenied));
        }
        let limited = |what: String| {
            WireHttpError::Code(ErrorCode::InternalError(Some(format!(
                "{LIMIT_PREFIX}controller {}: {}: {what}; nothing was sent",
                self.fence.lease, self.fence
            ))))
        };
        if self.http.this_reconcile >= self.limits.http_requests_per_reconcile {
            return Err(limited(format!(
                "{} requests in this reconcile already (the limit)",
                self.limits.http_requests_per_reconcile
            )));
        }
        let body = request.body.clone().unwrap_or_default();
        if body.len() > self.limits.http_request_body_bytes {
            return Err(WireHttpError::Code(ErrorCode::HttpRequestBodySize(Some(
                body.len() as u64,
            ))));
        }
        self.http.this_reconcile += 1;
        let record = HttpRecord {
            method: request.method,
            url: url.clone(),
            headers: self.stamped_headers(&request.headers),
            body,
            timeout: request.first_byte_timeout,
            epoch: self.fence.epoch,
            delivered: false,
            status: None,
        };
        // A receiver that never got the request never answered it, so its
        // script is left for the next one.
        let delivered = !matches!(fault, Some(HttpFault::Refused | HttpFault::Timeout));
        let answer = delivered.then(|| self.http.answer(&url));
        Ok(Admitted {
            record,
            fault,
            answer,
            response_limit: self.limits.http_response_body_bytes,
        })
    }

    /// The guest's headers as the receiver sees them, with the fence's
    /// replacing whatever the guest set under its names.
    fn stamped_headers(&self, headers: &[(String, String)]) -> Vec<(String, String)> {
        let fence_names = [LEASE_HEADER, EPOCH_HEADER, HOLDER_HEADER];
        let mut stamped: Vec<(String, String)> = headers
            .iter()
            .filter(|(name, _)| !fence_names.iter().any(|f| name.eq_ignore_ascii_case(f)))
            .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
            .collect();
        let fence = &self.fence;
        stamped.push((
            LEASE_HEADER.into(),
            format!("{}/{}", fence.cluster, fence.lease),
        ));
        stamped.push((EPOCH_HEADER.into(), fence.epoch.to_string()));
        stamped.push((HOLDER_HEADER.into(), fence.holder.clone()));
        stamped
    }
}

impl HttpState {
    /// The scripted answer for `url`, using up a one-shot reply.
    fn answer(&mut self, url: &str) -> Answer {
        let best = self
            .routes
            .iter_mut()
            .filter(|route| route.can_answer())
            .filter_map(|route| route.rank(url).map(|rank| (rank, route)))
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, route)| route);
        let Some(route) = best else {
            return Answer::Reply(HttpReply::text(
                404,
                format!("FakeHost: no reply is scripted for {url}"),
            ));
        };
        if let Some(reply) = route.once.pop_front() {
            return Answer::Reply(reply);
        }
        match route.standing.clone() {
            Some(Standing::Fixed(reply)) => Answer::Reply(reply),
            Some(Standing::With(responder)) => Answer::With(responder),
            None => unreachable!("a route that can answer has a reply"),
        }
    }

    fn route(&mut self, pattern: &str) -> &mut Route {
        let index = match self.routes.iter().position(|r| r.pattern == pattern) {
            Some(index) => index,
            None => {
                self.routes.push(Route {
                    pattern: pattern.to_string(),
                    once: VecDeque::new(),
                    standing: None,
                });
                self.routes.len() - 1
            }
        };
        &mut self.routes[index]
    }
}

impl FakeHost {
    /// Serve one outbound request: admit it as the host does, let the
    /// scripted receiver answer (with the state released: a responder may
    /// use this fake), apply the fault aimed at it, and record it.
    pub(super) fn serve_http(&self, request: &WireRequest) -> Result<WireResponse, WireHttpError> {
        let admitted = self.state.borrow_mut().admit_http(request)?;
        let Admitted {
            mut record,
            fault,
            answer,
            response_limit,
        } = admitted;
        let reply = answer.map(|answer| match answer {
            Answer::Reply(reply) => reply,
            Answer::With(responder) => {
                let mut delivered = record.clone();
                delivered.delivered = true;
                (responder.borrow_mut())(&delivered)
            }
        });
        record.delivered = reply.is_some();
        record.status = reply.as_ref().map(|reply| reply.status);
        self.state.borrow_mut().http.records.push(record);
        let failure = match fault {
            Some(HttpFault::Refused) => Some(ErrorCode::ConnectionRefused),
            Some(HttpFault::Timeout) => Some(ErrorCode::ConnectionTimeout),
            Some(HttpFault::ReplyLost) => Some(ErrorCode::ConnectionTerminated),
            Some(HttpFault::ReplyTimedOut) => Some(ErrorCode::ConnectionReadTimeout),
            Some(HttpFault::Fenced) | None => None,
        };
        if let Some(code) = failure {
            return Err(WireHttpError::Code(code));
        }
        let Some(reply) = reply else {
            unreachable!("a request without a fault is delivered and answered");
        };
        if reply.body.len() > response_limit {
            return Err(WireHttpError::Code(ErrorCode::HttpResponseBodySize(Some(
                response_limit as u64,
            ))));
        }
        Ok(WireResponse {
            status: reply.status,
            headers: reply
                .headers
                .into_iter()
                .map(|(name, value)| (name, value.into_bytes()))
                .collect(),
            body: reply.body,
        })
    }

    /// Add `entries` to the controller's `http_allow` list, as the host's
    /// config would: `scheme://host[:port]` allows every path of that
    /// origin, `scheme://host[:port]/prefix/` only paths under the prefix
    /// (`/hooks` without the slash allows `/hooks` and `/hooks/…`). Until
    /// then every request is denied, as by the host.
    ///
    /// # Panics
    ///
    /// If an entry is malformed (the host's config check would refuse it).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{HttpError, Request};
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// assert!(matches!(Request::get("http://svc.test/").send(), Err(HttpError::Denied { .. })));
    /// host.allow_http(["http://svc.test/hooks/", "https://api.example.com:8443"]);
    /// assert!(Request::get("http://svc.test/hooks/a").send().is_ok());
    /// assert!(Request::get("https://API.example.com:8443/x").send().is_ok());
    /// assert!(matches!(Request::get("http://svc.test/other").send(), Err(HttpError::Denied { .. })));
    /// assert!(matches!(Request::get("https://api.example.com/x").send(), Err(HttpError::Denied { .. })));
    /// ```
    pub fn allow_http<I, S>(&self, entries: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let parsed: Vec<AllowEntry> = entries
            .into_iter()
            .map(|entry| {
                let entry = entry.as_ref();
                AllowEntry::parse(entry)
                    .unwrap_or_else(|why| panic!("http_allow entry {entry:?}: {why}"))
            })
            .collect();
        self.state.borrow_mut().http.allow.extend(parsed);
    }

    /// Answer every request to `pattern` with `reply` (replacing what was
    /// scripted for it before), once its [`FakeHost::respond_once`]
    /// replies are used up. A pattern is an exact URL as sent
    /// (`scheme://authority/path?query`), or a prefix ending in `*`
    /// (`http://svc.test/hooks/*`); an exact match wins over a prefix, a
    /// longer prefix over a shorter. A request nothing is scripted for is
    /// answered `404`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    /// use leasehold_guest::{FakeHost, HttpReply};
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// host.respond("http://svc.test/*", HttpReply::status(202));
    /// host.respond("http://svc.test/health", HttpReply::text(200, "ok"));
    /// assert_eq!(Request::get("http://svc.test/health").send()?.status, 200);
    /// assert_eq!(Request::post("http://svc.test/jobs").send()?.status, 202);
    /// assert_eq!(Request::post("http://svc.test/jobs").send()?.status, 202);
    /// # Ok::<(), leasehold_guest::http::HttpError>(())
    /// ```
    pub fn respond(&self, pattern: &str, reply: HttpReply) {
        self.state.borrow_mut().http.route(pattern).standing = Some(Standing::Fixed(reply));
    }

    /// Queue `reply` for the next request to `pattern` that has no earlier
    /// one-shot reply queued: one-shot replies are used up in the order
    /// queued, before the standing reply of [`FakeHost::respond`] or
    /// [`FakeHost::respond_with`]. Patterns are as for
    /// [`FakeHost::respond`].
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    /// use leasehold_guest::{FakeHost, HttpReply};
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// host.respond_once("http://svc.test/jobs", HttpReply::status(503));
    /// host.respond_once("http://svc.test/jobs", HttpReply::status(201));
    /// host.respond("http://svc.test/jobs", HttpReply::status(200));
    /// let statuses: Vec<u16> = (0..3)
    ///     .map(|_| Request::post("http://svc.test/jobs").send().unwrap().status)
    ///     .collect();
    /// assert_eq!(statuses, [503, 201, 200]);
    /// ```
    pub fn respond_once(&self, pattern: &str, reply: HttpReply) {
        self.state
            .borrow_mut()
            .http
            .route(pattern)
            .once
            .push_back(reply);
    }

    /// Answer every request to `pattern` with what `responder` computes
    /// from it (replacing what was scripted for it before): a receiver with
    /// state, such as one that follows the fenced-receiver rule. The
    /// responder runs only for requests the receiver gets; it sees the
    /// request as recorded, fence headers included. Patterns are as for
    /// [`FakeHost::respond`].
    ///
    /// # Example
    ///
    /// A receiver that keeps the highest epoch it accepted and dedups by
    /// `Idempotency-Key`:
    ///
    /// ```
    /// use std::collections::HashMap;
    ///
    /// use leasehold_guest::http::{IdempotencyKey, Request};
    /// use leasehold_guest::{FakeHost, HttpReply};
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// let mut highest = 0u64;
    /// let mut applied: HashMap<String, u16> = HashMap::new();
    /// host.respond_with("http://svc.test/apply", move |request| {
    ///     let epoch: u64 = request.header("leasehold-epoch").unwrap().parse().unwrap();
    ///     if epoch < highest {
    ///         return HttpReply::status(409);
    ///     }
    ///     highest = epoch;
    ///     let key = request.header("idempotency-key").unwrap().to_string();
    ///     let status = *applied.entry(key).or_insert(201);
    ///     HttpReply::status(status)
    /// });
    /// let key = IdempotencyKey::for_action("jobs", "j1", 5, "apply");
    /// let send = || Request::post("http://svc.test/apply").idempotency_key(&key).send();
    /// assert_eq!(send()?.status, 201);
    /// host.new_tenure();
    /// assert_eq!(send()?.status, 201, "the same key: the stored result, not a second effect");
    /// # Ok::<(), leasehold_guest::http::HttpError>(())
    /// ```
    pub fn respond_with(
        &self,
        pattern: &str,
        responder: impl FnMut(&HttpRecord) -> HttpReply + 'static,
    ) {
        let responder: Responder = Rc::new(RefCell::new(responder));
        self.state.borrow_mut().http.route(pattern).standing = Some(Standing::With(responder));
    }

    /// Make the n-th outbound request from now (1 = the next one) fail
    /// with `fault`. Requests count whether or not the host lets them out;
    /// a fault aimed at a request the host refuses anyway (not allowed, a
    /// bound reached) is used up without effect, except
    /// [`HttpFault::Fenced`], which the host checks first.
    ///
    /// # Panics
    ///
    /// If `n` is zero.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{HttpError, Request};
    /// use leasehold_guest::{FakeHost, HttpFault};
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// host.fail_http(2, HttpFault::Timeout);
    /// assert!(Request::get("http://svc.test/").send().is_ok());
    /// assert!(matches!(Request::get("http://svc.test/").send(), Err(HttpError::Timeout(_))));
    /// assert!(!host.http_requests()[1].delivered);
    /// assert_eq!(host.pending_faults(), 0);
    /// ```
    pub fn fail_http(&self, n: u64, fault: HttpFault) {
        assert!(n > 0, "positions count from 1 (the next request)");
        let mut state = self.state.borrow_mut();
        let at = state.http.sent + n;
        state.http.faults.push((at, fault));
    }

    /// Make the next outbound request fail with `fault`:
    /// `fail_http(1, fault)`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{HttpError, Request};
    /// use leasehold_guest::{FakeHost, HttpFault, Reply};
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test"]);
    /// host.fail_next_http(HttpFault::Fenced);
    /// assert!(matches!(Request::get("http://svc.test/").send(), Err(HttpError::Fenced(_))));
    /// assert!(host.http_requests().is_empty(), "nothing was sent");
    /// assert!(host.is_revoked());
    /// ```
    pub fn fail_next_http(&self, fault: HttpFault) {
        self.fail_http(1, fault);
    }

    /// Every request that left the fake host, in order, delivered or not
    /// (see [`HttpRecord::delivered`]). Requests the host refused (not in
    /// `http_allow`, the lease lost, a bound reached, a forbidden header)
    /// never left and are not here.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// let _ = Request::get("http://svc.test/").send();
    /// assert!(host.http_requests().is_empty(), "denied: nothing left");
    /// ```
    pub fn http_requests(&self) -> Vec<HttpRecord> {
        self.state.borrow().http.records.clone()
    }
}

impl fmt::Debug for HttpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpState")
            .field("allow", &self.allow.len())
            .field("routes", &self.routes.len())
            .field("sent", &self.sent)
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}
