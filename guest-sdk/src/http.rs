//! Calling external services under the lease: outbound HTTP through the
//! standard `wasi:http/outgoing-handler`, fenced by the host.
//!
//! A controller's effects outside the store (a webhook, a cloud API, a
//! billing service) are the ones a deposed leader can still cause after
//! its successor took over. The host closes that window from its side, and
//! the receiver closes the rest:
//!
//! - **Deny by default.** A request reaches the network only if its URL is
//!   in the controller's `http_allow` list in the host's config
//!   (`"https://api.example.com"` allows that origin,
//!   `"http://10.0.0.5:9000/hooks/"` only paths under `/hooks/`). Anything
//!   else fails with [`HttpError::Denied`] and nothing is sent.
//! - **Three fence headers.** The host sets on every request that leaves it
//!   `Leasehold-Lease: <cluster>/<lease>`, `Leasehold-Epoch: <epoch>`
//!   (decimal) and `Leasehold-Holder: <holder>`, replacing whatever the
//!   guest set under those names ([`LEASE_HEADER`], [`EPOCH_HEADER`],
//!   [`HOLDER_HEADER`]). The guest cannot forge an epoch.
//! - **Refusal after loss.** Once the lease is lost (revoked, or past its
//!   renew deadline) the host sends nothing more: a request fails with
//!   [`HttpError::Fenced`], and a request in flight has its connection
//!   dropped and fails the same way. Return the error (`?` does): the
//!   reconcile ends as *fenced* and the guest stops.
//! - **Bounds.** Connect, first-byte and between-bytes timeouts
//!   ([`HttpError::Timeout`]; [`Request::timeout`] may ask for a shorter
//!   first-byte timeout), body sizes ([`HttpError::BodyTooLarge`]), and
//!   requests in flight and per reconcile ([`HttpError::Limit`], at most
//!   [`crate::MAX_HTTP_REQUESTS_PER_RECONCILE`] by default).
//!
//! The host cannot stop a request that already left it from arriving late:
//! a deposed leader's request may reach the receiver after the
//! successor's. So a receiver of effects that must not be applied twice or
//! out of order follows the **fenced-receiver rule**:
//!
//! 1. it keeps the highest `Leasehold-Epoch` it has accepted per lease
//!    (or per resource it manages) and rejects a request with a lower epoch
//!    with `409 Conflict`, applying nothing;
//! 2. it deduplicates by `Idempotency-Key`: a repeated key returns the
//!    stored result of the first request without applying the effect
//!    again.
//!
//! The guest's half of the rule is [`IdempotencyKey::for_action`]: a key
//! built from the object, its generation (which status writes do not
//! move) and the action, never the epoch, so that a retry
//! (after a [`HttpError::Timeout`] or [`HttpError::Connection`], when the
//! request may or may not have been applied) and a successor's re-run of
//! the same decision carry the same key, and the receiver applies the
//! effect once. A `409` tells the guest a newer tenure has acted: it is
//! about to be fenced, and should stop.
//!
//! # Example
//!
//! On native targets requests go to the [`crate::FakeHost`], which
//! applies the host's rules (deny by default, fence headers, refusal after
//! loss, limits) and answers from a script:
//!
//! ```
//! use leasehold_guest::http::{HttpError, IdempotencyKey, Request};
//! use leasehold_guest::{FakeHost, HttpReply};
//! use serde_json::json;
//!
//! let host = FakeHost::new();
//! // Nothing is reachable until the controller's http_allow lists it.
//! let denied = Request::post("http://billing.test/v1/invoices").send();
//! assert!(matches!(denied, Err(HttpError::Denied { .. })));
//!
//! host.allow_http(["http://billing.test/v1/"]);
//! host.respond("http://billing.test/v1/invoices", HttpReply::json(201, &json!({ "id": "inv-7" })));
//!
//! // The key names the decision (order o1 at generation 42, "invoice"),
//! // not the tenure: a successor re-running it sends the same key.
//! let key = IdempotencyKey::for_action("orders", "o1", 42, "invoice");
//! let response = Request::post("http://billing.test/v1/invoices")
//!     .json(&json!({ "order": "o1", "amount": 5 }))?
//!     .idempotency_key(&key)
//!     // A guest cannot forge the fence: the host replaces this header.
//!     .header("Leasehold-Epoch", "999")
//!     .send()?;
//! assert!(response.is_success());
//! assert_eq!(response.json::<serde_json::Value>()?["id"], "inv-7");
//!
//! let sent = &host.http_requests()[0];
//! assert_eq!(sent.header("leasehold-epoch"), Some("1"));
//! assert_eq!(sent.header("leasehold-lease"), Some("test/controller"));
//! assert_eq!(sent.header("idempotency-key"), Some("orders/o1@42/invoice"));
//!
//! // Once the lease is lost, nothing more is sent.
//! host.revoke();
//! let fenced = Request::post("http://billing.test/v1/invoices").send();
//! assert!(matches!(fenced, Err(HttpError::Fenced(_))));
//! assert_eq!(host.http_requests().len(), 1);
//! # Ok::<(), HttpError>(())
//! ```
//!
//! Owns: the request builder, the URL's parsing into what `wasi:http`
//! takes, the one classification of the host's `error-code`s into
//! [`HttpError`] (both the wasm imports and the native fake come through
//! it), responses and idempotency keys. Must never: report a failure as
//! fenced that the host did not, put the epoch into an idempotency key, or
//! show a URL's user information or query (either may carry a secret) in an
//! error.

use std::fmt::{self, Write as _};
use std::time::Duration;

use crate::sys::{self, ErrorCode, Scheme, WireHttpError, WireRequest, WireResponse};

pub use crate::sys::Method;

/// The header naming the lease a request was sent under,
/// `<cluster>/<lease>`. Set by the host on every request.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::http::LEASE_HEADER, "leasehold-lease");
/// ```
pub const LEASE_HEADER: &str = "leasehold-lease";

/// The header carrying the sending tenure's fencing epoch, in decimal. Set
/// by the host on every request; a fenced receiver rejects one lower than
/// the highest it accepted.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::http::EPOCH_HEADER, "leasehold-epoch");
/// ```
pub const EPOCH_HEADER: &str = "leasehold-epoch";

/// The header naming the replica that holds the lease. Set by the host on
/// every request.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::http::HOLDER_HEADER, "leasehold-holder");
/// ```
pub const HOLDER_HEADER: &str = "leasehold-holder";

/// The header [`Request::idempotency_key`] sets.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::http::IDEMPOTENCY_KEY_HEADER, "idempotency-key");
/// ```
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// The start of the host's `internal-error` message when a request was
/// refused, or its connection dropped, because the lease is lost. Stable:
/// the SDK derives [`HttpError::Fenced`] from it.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::http::FENCED_PREFIX, "leasehold-fenced: ");
/// ```
pub const FENCED_PREFIX: &str = "leasehold-fenced: ";

/// The start of the host's `internal-error` message when a host bound
/// (requests in flight, requests per reconcile) refused a request. Stable:
/// the SDK derives [`HttpError::Limit`] from it.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::http::LIMIT_PREFIX, "leasehold-limit: ");
/// ```
pub const LIMIT_PREFIX: &str = "leasehold-limit: ";

/// Why an outbound request failed.
///
/// Match on it to decide what to do next. [`HttpError::Fenced`] means
/// stop: return it (it converts into a fenced [`crate::Error`]). For the
/// others, whether the receiver applied the request tells what a retry
/// needs: nothing was sent for [`HttpError::Denied`], [`HttpError::Limit`]
/// and [`HttpError::InvalidRequest`]; after [`HttpError::Timeout`],
/// [`HttpError::Connection`] or [`HttpError::Protocol`] it may have been
/// applied, so retry only with the same [`IdempotencyKey`].
///
/// # Example
///
/// ```
/// use leasehold_guest::http::{HttpError, Request};
/// use leasehold_guest::{FakeHost, HttpFault};
///
/// let host = FakeHost::new();
/// host.allow_http(["http://svc.test"]);
/// host.fail_next_http(HttpFault::Refused);
/// match Request::get("http://svc.test/health").send() {
///     Err(HttpError::Connection(why)) => assert!(why.contains("connection-refused"), "{why}"),
///     other => panic!("expected a refused connection, got {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// The URL is not in the controller's `http_allow` list (or is not one
    /// the host sends to at all). Nothing was sent.
    Denied {
        /// The request's URL, without its query.
        url: String,
    },
    /// The lease this guest runs under is lost: nothing was sent, or the
    /// request in flight had its connection dropped. Stop and return the
    /// error: the host is tearing the guest down.
    Fenced(String),
    /// A host bound refused the request (requests in flight, requests per
    /// reconcile). Nothing was sent.
    Limit(String),
    /// The request's body, or the response's, is over the host's bound.
    BodyTooLarge(String),
    /// Connecting, waiting for the response, or reading its body took too
    /// long. The receiver may have applied the request.
    Timeout(String),
    /// The connection failed: refused, reset, DNS, TLS. After a reset the
    /// receiver may have applied the request.
    Connection(String),
    /// Anything else that went wrong on the wire.
    Protocol(String),
    /// The request is malformed (its URL, a header, the body's
    /// serialization); retrying it will fail the same way. Nothing was
    /// sent.
    InvalidRequest(String),
    /// A response body did not decode as asked ([`Response::json`],
    /// [`Response::text`]).
    Decode(String),
}

impl HttpError {
    /// Whether this is [`HttpError::Fenced`]: the guest must stop.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::HttpError;
    ///
    /// assert!(HttpError::Fenced("lease lost".into()).is_fenced());
    /// assert!(!HttpError::Timeout("slow".into()).is_fenced());
    /// ```
    pub fn is_fenced(&self) -> bool {
        matches!(self, HttpError::Fenced(_))
    }

    /// What a failure below the SDK means to the author: the host's
    /// `error-code` classified, the guest side's failures typed. `at` is
    /// the request's method and shown URL, `url` the shown URL alone.
    pub(crate) fn from_wire(error: WireHttpError, at: &str, url: &str) -> HttpError {
        match error {
            WireHttpError::Code(code) => HttpError::from_code(code, at, url),
            WireHttpError::Build(why) => {
                HttpError::InvalidRequest(format!("{at}: {why}; nothing was sent"))
            }
            WireHttpError::Stream(why) => {
                HttpError::Connection(format!("{at}: the body stream failed: {why}"))
            }
        }
    }

    fn from_code(code: ErrorCode, at: &str, url: &str) -> HttpError {
        use ErrorCode as E;
        let why = format!("{at}: {code}");
        match code {
            E::HttpRequestDenied => HttpError::Denied {
                url: url.to_string(),
            },
            E::InternalError(Some(ref message)) => {
                if let Some(rest) = message.strip_prefix(FENCED_PREFIX) {
                    HttpError::Fenced(format!("{at}: {rest}"))
                } else if let Some(rest) = message.strip_prefix(LIMIT_PREFIX) {
                    HttpError::Limit(format!("{at}: {rest}"))
                } else {
                    HttpError::Protocol(why)
                }
            }
            E::HttpRequestBodySize(_) | E::HttpResponseBodySize(_) => HttpError::BodyTooLarge(why),
            E::DnsTimeout
            | E::ConnectionTimeout
            | E::ConnectionReadTimeout
            | E::ConnectionWriteTimeout
            | E::HttpResponseTimeout => HttpError::Timeout(why),
            E::DnsError { .. }
            | E::DestinationNotFound
            | E::DestinationUnavailable
            | E::DestinationIpProhibited
            | E::DestinationIpUnroutable
            | E::ConnectionRefused
            | E::ConnectionTerminated
            | E::ConnectionLimitReached
            | E::TlsProtocolError
            | E::TlsCertificateError
            | E::TlsAlertReceived { .. } => HttpError::Connection(why),
            // The request as the guest built it is what is wrong: sending
            // it again fails the same way.
            E::HttpRequestLengthRequired
            | E::HttpRequestMethodInvalid
            | E::HttpRequestUriInvalid
            | E::HttpRequestUriTooLong
            | E::HttpRequestHeaderSectionSize(_)
            | E::HttpRequestHeaderSize(_)
            | E::HttpRequestTrailerSectionSize(_)
            | E::HttpRequestTrailerSize(_) => HttpError::InvalidRequest(why),
            E::HttpResponseIncomplete
            | E::HttpResponseHeaderSectionSize(_)
            | E::HttpResponseHeaderSize(_)
            | E::HttpResponseTrailerSectionSize(_)
            | E::HttpResponseTrailerSize(_)
            | E::HttpResponseTransferCoding(_)
            | E::HttpResponseContentCoding(_)
            | E::HttpUpgradeFailed
            | E::HttpProtocolError
            | E::LoopDetected
            | E::ConfigurationError
            | E::InternalError(None) => HttpError::Protocol(why),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied { url } => write!(
                f,
                "request to {url} denied: not in this controller's http_allow; nothing was sent"
            ),
            HttpError::Fenced(why) => write!(f, "no longer the leader, stopping: {why}"),
            HttpError::Limit(why) => write!(f, "outbound request refused by a host limit: {why}"),
            HttpError::BodyTooLarge(why) => write!(f, "body over the host's bound: {why}"),
            HttpError::Timeout(why) => write!(
                f,
                "outbound request timed out: {why}; it may have been applied"
            ),
            HttpError::Connection(why) => write!(f, "outbound connection failed: {why}"),
            HttpError::Protocol(why) => write!(f, "outbound request failed: {why}"),
            HttpError::InvalidRequest(why) => write!(f, "invalid outbound request: {why}"),
            HttpError::Decode(why) => write!(f, "response body does not decode: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// An outbound request, built and then [sent](Request::send).
///
/// The URL is `http://` or `https://`, ASCII, with characters outside
/// RFC 3986 percent-encoded, and without user information (send
/// credentials in a header). Problems with it or with a header are reported
/// by [`Request::send`] as [`HttpError::InvalidRequest`], before anything
/// is sent.
///
/// The SDK sets `Content-Length` from the body (replacing one the guest
/// set): a request with a body, or a `POST`, `PUT` or `PATCH`, carries
/// one. The host sets the three fence headers.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use leasehold_guest::http::{Method, Request};
/// use leasehold_guest::{FakeHost, HttpReply};
///
/// let host = FakeHost::new();
/// host.allow_http(["https://api.example.com"]);
/// host.respond("https://api.example.com/v1/things/a", HttpReply::status(204));
///
/// let response = Request::new(Method::Put, "https://api.example.com/v1/things/a")
///     .header("Authorization", "Bearer token")
///     .body("on")
///     .timeout(Duration::from_secs(2))
///     .send()?;
/// assert_eq!(response.status, 204);
/// let sent = &host.http_requests()[0];
/// assert_eq!(sent.header("content-length"), Some("2"));
/// assert_eq!(sent.timeout, Some(Duration::from_secs(2)));
/// # Ok::<(), leasehold_guest::http::HttpError>(())
/// ```
#[derive(Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    timeout: Option<Duration>,
}

impl fmt::Debug for Request {
    // Header values and the query may carry credentials: show only the
    // header names and the URL without its query.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &shown_url(&self.url))
            .field("headers", &names)
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Request {
    /// A request of `method` to `url`, with no headers and no body.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// let request = Request::new(Method::Delete, "https://api.example.com/v1/things/a");
    /// assert_eq!(request.method(), Method::Delete);
    /// ```
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout: None,
        }
    }

    /// A `GET` request.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::get("http://svc.test/").method(), Method::Get);
    /// ```
    pub fn get(url: impl Into<String>) -> Self {
        Self::new(Method::Get, url)
    }

    /// A `HEAD` request.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::head("http://svc.test/").method(), Method::Head);
    /// ```
    pub fn head(url: impl Into<String>) -> Self {
        Self::new(Method::Head, url)
    }

    /// A `POST` request.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::post("http://svc.test/").method(), Method::Post);
    /// ```
    pub fn post(url: impl Into<String>) -> Self {
        Self::new(Method::Post, url)
    }

    /// A `PUT` request.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::put("http://svc.test/").method(), Method::Put);
    /// ```
    pub fn put(url: impl Into<String>) -> Self {
        Self::new(Method::Put, url)
    }

    /// A `PATCH` request.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::patch("http://svc.test/").method(), Method::Patch);
    /// ```
    pub fn patch(url: impl Into<String>) -> Self {
        Self::new(Method::Patch, url)
    }

    /// A `DELETE` request.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::delete("http://svc.test/").method(), Method::Delete);
    /// ```
    pub fn delete(url: impl Into<String>) -> Self {
        Self::new(Method::Delete, url)
    }

    /// Set the header `name` to `value`, replacing any value set before
    /// under that name (names are case-insensitive). The fence headers
    /// may be set but the host replaces them; `Content-Length` is the
    /// SDK's. `Host`, `Connection`, `Transfer-Encoding` and the other
    /// headers `wasi:http` forbids make [`Request::send`] fail.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// let request = Request::get("http://svc.test/")
    ///     .header("Accept", "text/plain")
    ///     .header("accept", "application/json");
    /// assert_eq!(request.headers(), [("accept".to_string(), "application/json".to_string())]);
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.headers
            .retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
        self.headers.push((name, value.into()));
        self
    }

    /// Set the body.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// let request = Request::post("http://svc.test/").body("hello");
    /// assert_eq!(request.body_bytes(), Some(&b"hello"[..]));
    /// ```
    pub fn body(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.body = Some(bytes.into());
        self
    }

    /// Set the body to `value` as JSON, and `Content-Type` to
    /// `application/json`.
    ///
    /// # Errors
    ///
    /// [`HttpError::InvalidRequest`] if `value` does not serialize.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// let request = Request::post("http://svc.test/").json(&serde_json::json!({ "n": 1 }))?;
    /// assert_eq!(request.body_bytes(), Some(&br#"{"n":1}"#[..]));
    /// # Ok::<(), leasehold_guest::http::HttpError>(())
    /// ```
    pub fn json<T: serde::Serialize + ?Sized>(self, value: &T) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value).map_err(|e| {
            HttpError::InvalidRequest(format!(
                "{} {}: the JSON body does not serialize: {e}",
                self.method,
                shown_url(&self.url)
            ))
        })?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Set the `Idempotency-Key` header to `key`: the receiver applies
    /// requests with the same key once.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{IdempotencyKey, Request};
    ///
    /// let key = IdempotencyKey::for_action("tasks", "t1", 3, "notify");
    /// let request = Request::post("http://svc.test/").idempotency_key(&key);
    /// assert_eq!(request.headers()[0].1, "tasks/t1@3/notify");
    /// ```
    pub fn idempotency_key(self, key: &IdempotencyKey) -> Self {
        self.header(IDEMPOTENCY_KEY_HEADER, key.as_str())
    }

    /// Ask for a first-byte timeout: how long to wait for the response's
    /// head once the request is sent. The host caps it at its own bound
    /// (10 s by default); past it the request fails with
    /// [`HttpError::Timeout`].
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use leasehold_guest::http::Request;
    ///
    /// let request = Request::get("http://svc.test/").timeout(Duration::from_millis(500));
    /// assert_eq!(request.timeout_asked(), Some(Duration::from_millis(500)));
    /// ```
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// The method.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{Method, Request};
    ///
    /// assert_eq!(Request::patch("http://svc.test/").method(), Method::Patch);
    /// ```
    pub fn method(&self) -> Method {
        self.method
    }

    /// The URL as given.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// assert_eq!(Request::get("http://svc.test/a").url(), "http://svc.test/a");
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The headers set so far, in order, as given (the SDK's
    /// `Content-Length` and the host's fence headers are added when sent).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// assert!(Request::get("http://svc.test/").headers().is_empty());
    /// ```
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body, if one was set.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// assert_eq!(Request::get("http://svc.test/").body_bytes(), None);
    /// ```
    pub fn body_bytes(&self) -> Option<&[u8]> {
        self.body.as_deref()
    }

    /// The first-byte timeout asked for, if any.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Request;
    ///
    /// assert_eq!(Request::get("http://svc.test/").timeout_asked(), None);
    /// ```
    pub fn timeout_asked(&self) -> Option<Duration> {
        self.timeout
    }

    /// Send the request through the host and read the whole response.
    ///
    /// Blocks the reconcile until the response's body has been read to its
    /// end, or the request failed. A response of any status is `Ok`: check
    /// [`Response::is_success`] (a fenced receiver answers `409` to a
    /// request from an older epoch).
    ///
    /// # Errors
    ///
    /// An [`HttpError`] saying whether anything was sent: see its variants.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{HttpError, Request};
    /// use leasehold_guest::{FakeHost, HttpReply};
    ///
    /// let host = FakeHost::new();
    /// host.allow_http(["http://svc.test/api/"]);
    /// host.respond("http://svc.test/api/ping", HttpReply::text(200, "pong"));
    /// assert_eq!(Request::get("http://svc.test/api/ping").send()?.text()?, "pong");
    /// // Outside the allowed path prefix: denied, nothing sent.
    /// let denied = Request::get("http://svc.test/admin").send();
    /// assert_eq!(denied, Err(HttpError::Denied { url: "http://svc.test/admin".into() }));
    /// # Ok::<(), HttpError>(())
    /// ```
    pub fn send(self) -> Result<Response, HttpError> {
        let shown = shown_url(&self.url);
        let at = format!("{} {shown}", self.method);
        let target = Target::parse(&self.url)
            .map_err(|why| HttpError::InvalidRequest(format!("{at}: {why}; nothing was sent")))?;
        let mut headers = Vec::with_capacity(self.headers.len() + 1);
        for (name, value) in self.headers {
            check_header(&name, &value).map_err(|why| {
                HttpError::InvalidRequest(format!("{at}: {why}; nothing was sent"))
            })?;
            // The body's length is the SDK's to state: a guest's own value
            // could disagree with the bytes written.
            if !name.eq_ignore_ascii_case("content-length") {
                headers.push((name, value));
            }
        }
        let body = match self.body {
            Some(body) => Some(body),
            None if self.method.has_body() => Some(Vec::new()),
            None => None,
        };
        if let Some(body) = &body {
            headers.push(("content-length".to_string(), body.len().to_string()));
        }
        let request = WireRequest {
            method: self.method,
            scheme: target.scheme,
            authority: target.authority.clone(),
            path_with_query: target.path_with_query(),
            headers,
            body,
            first_byte_timeout: self.timeout,
        };
        let shown = target.shown();
        let at = format!("{} {shown}", self.method);
        let response =
            sys::http_send(&request).map_err(|e| HttpError::from_wire(e, &at, &shown))?;
        Ok(Response::from_wire(response))
    }
}

/// A response, read to its end.
///
/// # Example
///
/// ```
/// use leasehold_guest::http::Response;
///
/// let response = Response {
///     status: 409,
///     headers: vec![("Content-Type".into(), "text/plain".into())],
///     body: b"epoch 3 is older than 4".to_vec(),
/// };
/// assert!(!response.is_success());
/// assert_eq!(response.header("content-type"), Some("text/plain"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, in the order received; values that are not UTF-8 are
    /// converted lossily.
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl fmt::Debug for Response {
    // Header values (cookies, tokens) and the body may carry secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &names)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl Response {
    fn from_wire(response: WireResponse) -> Self {
        Self {
            status: response.status,
            headers: response
                .headers
                .into_iter()
                .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
                .collect(),
            body: response.body,
        }
    }

    /// The first value of the header `name`, compared case-insensitively.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Response;
    ///
    /// let response = Response { status: 200, headers: vec![("ETag".into(), "\"v7\"".into())], body: vec![] };
    /// assert_eq!(response.header("etag"), Some("\"v7\""));
    /// assert_eq!(response.header("age"), None);
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body decoded as JSON.
    ///
    /// # Errors
    ///
    /// [`HttpError::Decode`] if it is not JSON of type `T`.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::{HttpError, Response};
    ///
    /// let response = Response { status: 200, headers: vec![], body: br#"{"id":7}"#.to_vec() };
    /// assert_eq!(response.json::<serde_json::Value>()?["id"], 7);
    /// assert!(matches!(response.json::<Vec<u8>>(), Err(HttpError::Decode(_))));
    /// # Ok::<(), HttpError>(())
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            HttpError::Decode(format!(
                "a {} response's body is not JSON of the expected shape: {e}",
                self.status
            ))
        })
    }

    /// The body as UTF-8 text.
    ///
    /// # Errors
    ///
    /// [`HttpError::Decode`] if it is not UTF-8.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Response;
    ///
    /// let response = Response { status: 200, headers: vec![], body: b"ok".to_vec() };
    /// assert_eq!(response.text()?, "ok");
    /// # Ok::<(), leasehold_guest::http::HttpError>(())
    /// ```
    pub fn text(&self) -> Result<&str, HttpError> {
        std::str::from_utf8(&self.body).map_err(|e| {
            HttpError::Decode(format!(
                "a {} response's body is not UTF-8: {e}",
                self.status
            ))
        })
    }

    /// Whether the status is 2xx.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::Response;
    ///
    /// let ok = Response { status: 204, headers: vec![], body: vec![] };
    /// assert!(ok.is_success());
    /// ```
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A key that names one action decided on one state of one object, for
/// the receiver's deduplication (the `Idempotency-Key` header).
///
/// Stable across tenures and processes: built only from the object's
/// kind and name, a number that says which state of the object the
/// decision was made on, and the action's name — never the epoch, the
/// holder or anything random — so a retry, and a successor re-running the
/// same decision, send the same key and the receiver applies the effect
/// once. A new state (the decision made again on changed input) gives a
/// new key.
///
/// # Which number: the generation
///
/// For an effect driven by the object's spec (its value and metadata:
/// create this bucket, resize it, delete it once marked), pass the
/// object's **generation** ([`crate::Object::generation`]). The generation
/// moves only when the value or the metadata changes (a deletion mark
/// included); a status write never moves it. The version moves with
/// every write, status writes included, so a key built from the version
/// changes as soon as the controller records its own progress: write
/// `Pending` to the status, send the request, lose the answer, and the
/// retry reads a new version, builds a new key, and the receiver applies
/// the effect a second time. With the generation the retry sends the same
/// key, and the receiver replays its stored answer.
///
/// Pass the version only for an effect that must be decided again after
/// any write of the object, status included. [`crate::finalizer`]'s
/// cleanup runs on the marked object: its generation (the mark's) keys
/// the cleanup's effects.
///
/// **An object made again under the same name starts at generation 1
/// again.** If a receiver may still hold the keys of a former object of
/// that name (it does, if it deduplicates by key for longer than an
/// object lives), a new object would send the old keys and get the old
/// answers replayed. Tell the objects apart in the action: record the
/// object's version in its status when you first write the status (a
/// version is never reused), and keep it there as the object's
/// incarnation, e.g. `for_action(kind, name, generation,
/// &format!("put-{incarnation}"))`, as the example provisioner does.
///
/// The form is `<kind>/<name>@<number>/<action>`, each of kind, name and
/// action percent-encoded except for ASCII letters, digits and `-._~`, so
/// the separators are unambiguous and the key is a valid header value.
/// This form is part of the contract, shared by every SDK of this
/// repository, and does not change. Two controllers sending to the same
/// receiver about the same objects should use distinct action names.
///
/// # Example
///
/// ```
/// use leasehold_guest::http::IdempotencyKey;
/// use leasehold_guest::{Api, FakeHost, Transaction};
/// use serde_json::json;
///
/// let key = IdempotencyKey::for_action("orders", "o-17", 42, "charge card");
/// assert_eq!(key.as_str(), "orders/o-17@42/charge%20card");
/// assert_eq!(key, IdempotencyKey::for_action("orders", "o-17", 42, "charge card"));
/// assert_ne!(key, IdempotencyKey::for_action("orders", "o-17", 43, "charge card"));
///
/// // Recording progress in the status keeps the generation, and the key.
/// let host = FakeHost::new();
/// host.seed("orders", "o-17", &json!({ "amount": 5 }));
/// let orders = Api::<serde_json::Value>::new("orders");
/// let order = orders.get("o-17")?.unwrap();
/// let key = |o: &leasehold_guest::Object| {
///     IdempotencyKey::for_action("orders", &o.name, o.generation, "charge")
/// };
/// let before = key(&order);
/// Transaction::new().update_status(&order, &json!({ "phase": "Pending" })).commit()?;
/// let after = orders.get("o-17")?.unwrap();
/// assert_ne!(after.version, order.version, "a status write moves the version");
/// assert_eq!(key(&after), before, "but not the generation");
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key of `action` decided on the state `number` of `kind/name`:
    /// the object's generation for an effect of its spec (see
    /// [`IdempotencyKey`], "Which number"), or its version for one that
    /// must be decided again after any write.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::IdempotencyKey;
    ///
    /// // A separator inside a field is escaped, so fields never run together.
    /// let a = IdempotencyKey::for_action("a", "b/c", 1, "d");
    /// let b = IdempotencyKey::for_action("a", "b", 1, "c/d");
    /// assert_ne!(a, b);
    /// assert_eq!(a.as_str(), "a/b%2Fc@1/d");
    /// ```
    pub fn for_action(kind: &str, name: &str, number: u64, action: &str) -> Self {
        let mut key = String::with_capacity(kind.len() + name.len() + action.len() + 24);
        escape_into(&mut key, kind);
        key.push('/');
        escape_into(&mut key, name);
        // Writing to a String cannot fail.
        let _ = write!(key, "@{number}/");
        escape_into(&mut key, action);
        IdempotencyKey(key)
    }

    /// The key, as sent in the header.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::http::IdempotencyKey;
    ///
    /// assert_eq!(IdempotencyKey::for_action("k", "n", 0, "a").as_str(), "k/n@0/a");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Append `field` percent-encoded: unreserved ASCII (RFC 3986) as is,
/// every other byte as `%XX`.
fn escape_into(out: &mut String, field: &str) {
    for byte in field.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// A URL for messages: cut before its query or fragment, without user
/// information. Either may carry a secret; neither helps to find which
/// request failed.
pub(crate) fn shown_url(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

/// Characters RFC 3986 never allows unescaped in a URL; `wasi:http`'s
/// host refuses a path with them.
const NOT_IN_URLS: &[char] = &['"', '<', '>', '\\', '^', '`', '{', '|', '}'];

/// A request URL taken apart: what `wasi:http` takes, and what an
/// `http_allow` entry is matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub scheme: Scheme,
    /// `host[:port]` as written.
    pub authority: String,
    /// Lowercase; an IPv6 address keeps its brackets.
    pub host: String,
    /// As written, or the scheme's default.
    pub port: u16,
    /// Starts with `/`.
    pub path: String,
    /// After the `?`, if there is one.
    pub query: Option<String>,
}

impl Target {
    /// Take `url` apart. The error says what is wrong without repeating
    /// the URL.
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        if url.is_empty() {
            return Err("the URL is empty".into());
        }
        if !url.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the URL has a space, a control or a non-ASCII character; percent-encode it".into(),
            );
        }
        let Some((scheme_text, rest)) = url.split_once("://") else {
            return Err("the URL has no scheme; write http://… or https://…".into());
        };
        let scheme = match scheme_text.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => {
                return Err(format!(
                    "only http and https URLs can be sent, not {scheme_text:?}"
                ));
            }
        };
        // A fragment is the client's own business: it is never sent.
        let rest = rest.split('#').next().unwrap_or("");
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path_and_query) = rest.split_at(authority_end);
        if authority.contains('@') {
            return Err(
                "the URL carries user information (user:password@); send credentials \
                 in a header instead"
                    .into(),
            );
        }
        let (host, port) = split_authority(authority)?;
        let port = match port {
            None | Some("") => scheme.default_port(),
            Some(text) => parse_port(text)?,
        };
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query.to_string())),
            None => (path_and_query, None),
        };
        let path = if path.is_empty() { "/" } else { path };
        if path.contains(NOT_IN_URLS) || query.as_deref().is_some_and(|q| q.contains(NOT_IN_URLS)) {
            return Err(format!(
                "the URL's path or query has one of {} unescaped; percent-encode it",
                NOT_IN_URLS.iter().collect::<String>()
            ));
        }
        Ok(Target {
            scheme,
            authority: authority.to_string(),
            host: host.to_ascii_lowercase(),
            port,
            path: path.to_string(),
            query,
        })
    }

    /// The path and query as sent.
    pub(crate) fn path_with_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }

    /// `scheme://authority/path`, for messages: no query.
    pub(crate) fn shown(&self) -> String {
        format!("{}://{}{}", self.scheme.as_str(), self.authority, self.path)
    }
}

/// `host` and the port text after its `:`, if any.
fn split_authority(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.is_empty() {
        return Err("the URL has no host".into());
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return Err("the URL's IPv6 host has no closing `]`".into());
        };
        let address = &inner[..close];
        if address.is_empty()
            || !address
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err("the URL's IPv6 host is not an address".into());
        }
        let after = &inner[close + 1..];
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("the URL has text after its IPv6 host")?,
            ),
        };
        (&authority[..close + 2], port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let name_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    if host.is_empty() || (!host.starts_with('[') && !host.bytes().all(name_ok)) {
        return Err("the URL's host is not a name or an address".into());
    }
    Ok((host, port))
}

fn parse_port(text: &str) -> Result<u16, String> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the URL's port is not a number".into());
    }
    match text.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err("the URL's port is not between 1 and 65535".into()),
    }
}

/// Check a header the way `wasi:http` will: a name of RFC 9110 token
/// characters, a value without control characters (tab allowed). The error
/// names the header, never its value.
fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{name:?} is not a valid header name"));
    }
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(format!(
            "the value of header {name:?} has a control character (CR, LF, NUL, ...)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::FieldSize;

    #[test]
    fn urls_are_taken_apart_as_wasi_http_wants_them() {
        let t = Target::parse("HTTPS://Api.Example.com:8443/v1/things?x=1&y=2#frag").unwrap();
        assert_eq!(t.scheme, Scheme::Https);
        assert_eq!(t.authority, "Api.Example.com:8443");
        assert_eq!(t.host, "api.example.com");
        assert_eq!(t.port, 8443);
        assert_eq!(t.path_with_query(), "/v1/things?x=1&y=2");
        assert_eq!(t.shown(), "https://Api.Example.com:8443/v1/things");

        let t = Target::parse("http://svc.test").unwrap();
        assert_eq!((t.port, t.path_with_query().as_str()), (80, "/"));
        let t = Target::parse("http://svc.test?q").unwrap();
        assert_eq!(t.path_with_query(), "/?q");
        let t = Target::parse("http://[::1]:9000/hooks").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("[::1]", 9000));
        let t = Target::parse("https://[fe80::1]").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("[fe80::1]", 443));
    }

    #[test]
    fn bad_urls_are_explained_without_repeating_them() {
        for (url, needle) in [
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
        ] {
            let why = Target::parse(url).unwrap_err();
            assert!(why.contains(needle), "{url:?}: {why}");
        }
        let why = Target::parse("https://bob:hunter2@svc.test/?token=abc").unwrap_err();
        assert!(why.contains("user information"), "{why}");
        assert!(!why.contains("hunter2"), "{why}");
    }

    #[test]
    fn shown_urls_drop_credentials_and_queries() {
        assert_eq!(
            shown_url("https://bob:hunter2@svc.test/a/b?token=abc#f"),
            "https://svc.test/a/b"
        );
        assert_eq!(shown_url("http://svc.test"), "http://svc.test");
        assert_eq!(shown_url("not a url?secret"), "not a url");
    }

    #[test]
    fn every_error_code_is_classified() {
        use ErrorCode as E;
        let at = "POST http://svc.test/x";
        let url = "http://svc.test/x";
        let class = |code: ErrorCode| {
            let error = HttpError::from_wire(WireHttpError::Code(code), at, url);
            let name = match &error {
                HttpError::Denied { .. } => "denied",
                HttpError::Fenced(_) => "fenced",
                HttpError::Limit(_) => "limit",
                HttpError::BodyTooLarge(_) => "body",
                HttpError::Timeout(_) => "timeout",
                HttpError::Connection(_) => "connection",
                HttpError::Protocol(_) => "protocol",
                HttpError::InvalidRequest(_) => "invalid",
                HttpError::Decode(_) => "decode",
            };
            (name, error)
        };
        let size = FieldSize {
            name: Some("x".into()),
            size: Some(9),
        };
        let expected = [
            (E::HttpRequestDenied, "denied"),
            (
                E::InternalError(Some(format!("{FENCED_PREFIX}lease lost"))),
                "fenced",
            ),
            (
                E::InternalError(Some(format!("{LIMIT_PREFIX}65 requests"))),
                "limit",
            ),
            (
                E::InternalError(Some("leasehold-fenced without the space".into())),
                "protocol",
            ),
            (E::InternalError(Some("boom".into())), "protocol"),
            (E::InternalError(None), "protocol"),
            (E::HttpRequestBodySize(Some(5)), "body"),
            (E::HttpResponseBodySize(None), "body"),
            (E::DnsTimeout, "timeout"),
            (E::ConnectionTimeout, "timeout"),
            (E::ConnectionReadTimeout, "timeout"),
            (E::ConnectionWriteTimeout, "timeout"),
            (E::HttpResponseTimeout, "timeout"),
            (
                E::DnsError {
                    rcode: Some("NXDOMAIN".into()),
                    info_code: None,
                },
                "connection",
            ),
            (E::DestinationNotFound, "connection"),
            (E::DestinationUnavailable, "connection"),
            (E::DestinationIpProhibited, "connection"),
            (E::DestinationIpUnroutable, "connection"),
            (E::ConnectionRefused, "connection"),
            (E::ConnectionTerminated, "connection"),
            (E::ConnectionLimitReached, "connection"),
            (E::TlsProtocolError, "connection"),
            (E::TlsCertificateError, "connection"),
            (
                E::TlsAlertReceived {
                    alert_id: Some(40),
                    alert_message: None,
                },
                "connection",
            ),
            (E::HttpRequestLengthRequired, "invalid"),
            (E::HttpRequestMethodInvalid, "invalid"),
            (E::HttpRequestUriInvalid, "invalid"),
            (E::HttpRequestUriTooLong, "invalid"),
            (E::HttpRequestHeaderSectionSize(None), "invalid"),
            (E::HttpRequestHeaderSize(Some(size.clone())), "invalid"),
            (E::HttpRequestTrailerSectionSize(None), "invalid"),
            (E::HttpRequestTrailerSize(size.clone()), "invalid"),
            (E::HttpResponseIncomplete, "protocol"),
            (E::HttpResponseHeaderSectionSize(None), "protocol"),
            (E::HttpResponseHeaderSize(size.clone()), "protocol"),
            (E::HttpResponseTrailerSectionSize(None), "protocol"),
            (E::HttpResponseTrailerSize(size), "protocol"),
            (E::HttpResponseTransferCoding(None), "protocol"),
            (E::HttpResponseContentCoding(Some("br".into())), "protocol"),
            (E::HttpUpgradeFailed, "protocol"),
            (E::HttpProtocolError, "protocol"),
            (E::LoopDetected, "protocol"),
            (E::ConfigurationError, "protocol"),
        ];
        for (code, want) in expected {
            let shown = code.to_string();
            let (got, error) = class(code);
            assert_eq!(got, want, "{shown}");
            if want != "denied" {
                // Every message says which request failed.
                assert!(error.to_string().contains(at), "{shown}: {error}");
            }
        }
        assert_eq!(
            class(E::HttpRequestDenied).1,
            HttpError::Denied { url: url.into() }
        );
        assert_eq!(
            class(E::InternalError(Some(format!("{FENCED_PREFIX}lease lost")))).1,
            HttpError::Fenced(format!("{at}: lease lost"))
        );
    }

    #[test]
    fn guest_side_failures_are_typed() {
        let at = "GET http://svc.test/";
        assert!(matches!(
            HttpError::from_wire(WireHttpError::Build("forbidden header".into()), at, ""),
            HttpError::InvalidRequest(why) if why.contains("forbidden header")
        ));
        assert!(matches!(
            HttpError::from_wire(WireHttpError::Stream("reset".into()), at, ""),
            HttpError::Connection(why) if why.contains("reset")
        ));
    }

    #[test]
    fn headers_are_checked_without_echoing_values() {
        assert!(check_header("X-Api-Key", "abc\tdef").is_ok());
        assert!(check_header("", "v").is_err());
        assert!(check_header("bad name", "v").is_err());
        assert!(check_header("bad:name", "v").is_err());
        let why = check_header("Authorization", "Bearer s3cret\r\nX-Evil: 1").unwrap_err();
        assert!(why.contains("Authorization"), "{why}");
        assert!(!why.contains("s3cret"), "{why}");
    }

    #[test]
    fn idempotency_keys_are_stable_and_header_safe() {
        // A fixed value: the form is part of the contract, so a change of
        // it (which would break deduplication across an upgrade) fails here.
        assert_eq!(
            IdempotencyKey::for_action("tasks", "t1", 7, "notify").as_str(),
            "tasks/t1@7/notify"
        );
        let key = IdempotencyKey::for_action("k", "n@x", u64::MAX, "a b/ü%");
        assert_eq!(
            key.as_str(),
            "k/n%40x@18446744073709551615/a%20b%2F%C3%BC%25"
        );
        assert!(key.as_str().bytes().all(|b| b.is_ascii_graphic()));
        assert!(check_header(IDEMPOTENCY_KEY_HEADER, key.as_str()).is_ok());
        // Fields never run together.
        assert_ne!(
            IdempotencyKey::for_action("a@1", "b", 2, "c"),
            IdempotencyKey::for_action("a", "1@b", 2, "c")
        );
    }

    #[test]
    fn debug_output_hides_header_values_and_queries() {
        let request = Request::post("https://svc.test/x?token=abc")
            .header("Authorization", "Bearer s3cret")
            .body("secret body");
        let shown = format!("{request:?}");
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("token"), "{shown}");
        assert!(!shown.contains("secret body"), "{shown}");
        let response = Response {
            status: 200,
            headers: vec![("Set-Cookie".into(), "session=s3cret".into())],
            body: b"s3cret".to_vec(),
        };
        assert!(!format!("{response:?}").contains("s3cret"));
    }
}
