//! Fenced outbound HTTP: what a controller may reach (`http_allow`), the
//! bounds every request runs under, and the tallies metrics and the tenure
//! history read.
//!
//! The request path itself (headers, refusal after loss, cancellation on
//! abort) is [`crate::runtime::host::http`]; this module holds the plain
//! data it and the config share.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// The three headers the host sets on every outbound request, replacing
/// whatever the guest set under these names. Part of the public contract.
pub mod headers {
    /// `<cluster>/<lease>` of the tenure that sent the request.
    pub const LEASE: &str = "leasehold-lease";
    /// The tenure's fencing epoch, in decimal.
    pub const EPOCH: &str = "leasehold-epoch";
    /// The replica holding the lease.
    pub const HOLDER: &str = "leasehold-holder";

    /// Whether `name` is a fence header as some server would read it: any
    /// case, and `_` for `-` (WSGI, CGI and some proxies fold them
    /// together, so `leasehold_epoch` arrives as `Leasehold-Epoch`).
    pub fn is_fence_name(name: &str) -> bool {
        let folded = name.trim().to_ascii_lowercase().replace('_', "-");
        [LEASE, EPOCH, HOLDER].contains(&folded.as_str())
    }

    /// Whether `name` is a header that speaks for a client or a proxy in
    /// front of the receiver (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`),
    /// which a receiver may trust for who is calling.
    pub fn is_forwarding_name(name: &str) -> bool {
        let folded = name.trim().to_ascii_lowercase().replace('_', "-");
        folded == "forwarded" || folded.starts_with("x-forwarded-") || folded == "x-real-ip"
    }
}

/// Prefix of the `internal-error` message a guest receives when a request
/// is refused or cancelled because the tenure's lease is lost.
pub const FENCED_PREFIX: &str = "leasehold-fenced: ";
/// Prefix of the `internal-error` message a guest receives when a host
/// bound (concurrent requests, requests per reconcile) refused a request.
pub const LIMIT_PREFIX: &str = "leasehold-limit: ";

/// One `http_allow` entry: a scheme, host and port, and optionally a path
/// prefix, e.g. `https://api.example.com` or `http://127.0.0.1:9000/hooks/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    scheme: Scheme,
    /// Lowercase host; an IPv6 address keeps its brackets.
    host: String,
    port: u16,
    /// `None` allows every path of the origin.
    path_prefix: Option<String>,
    /// The entry as configured, for messages.
    text: String,
}

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            _ => None,
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

impl AllowEntry {
    /// Parse one entry. The error says what is wrong (the caller names the
    /// config key).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("an empty entry; write scheme://host[:port][/path-prefix]".into());
        }
        if text.len() > crate::limits::MAX_HTTP_ALLOW_ENTRY_BYTES {
            return Err(format!(
                "an entry longer than {} bytes",
                crate::limits::MAX_HTTP_ALLOW_ENTRY_BYTES
            ));
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err("an entry with whitespace or control characters".into());
        }
        let Some((scheme_text, _)) = text.split_once("://") else {
            return Err("no scheme; write http://… or https://…".into());
        };
        let scheme = Scheme::parse(scheme_text).ok_or_else(|| {
            "a scheme other than http or https; only those are allowed".to_string()
        })?;
        // Checked on the raw text: the URL parser resolves `/a/../b` to `/b`,
        // which would make the entry mean something other than it says.
        let raw_path = text[scheme_text.len() + 3..]
            .split(['?', '#'])
            .next()
            .and_then(|rest| rest.find('/').map(|at| &rest[at..]))
            .unwrap_or("");
        if has_dot_segment(raw_path) {
            return Err("a `.` or `..` path segment".into());
        }
        let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
        if !url.username().is_empty() || url.password().is_some() {
            // Never echo the entry: it holds credentials.
            return Err(
                "an entry with user information (user:password@); credentials do not \
                 belong in http_allow"
                    .into(),
            );
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(
                "a query or fragment; an entry is scheme://host[:port][/path-prefix]".into(),
            );
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => d.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            _ => return Err("no host".into()),
        };
        let port = url.port().unwrap_or(scheme.default_port());
        let path = url.path();
        let path_prefix = if path.is_empty() || path == "/" {
            None
        } else if has_dot_segment(path) {
            return Err("a `.` or `..` path segment".into());
        } else {
            Some(path.to_string())
        };
        Ok(Self {
            scheme,
            host,
            port,
            path_prefix,
            text: text.to_string(),
        })
    }

    /// Whether a request to `scheme://authority` with `path` (without the
    /// query) falls under this entry.
    fn allows(&self, scheme: Scheme, host: &str, port: u16, path: &str) -> bool {
        if scheme != self.scheme || port != self.port || !host.eq_ignore_ascii_case(&self.host) {
            return false;
        }
        match &self.path_prefix {
            None => true,
            Some(prefix) if prefix.ends_with('/') => path.starts_with(prefix.as_str()),
            // `/hooks` allows `/hooks` and `/hooks/…`, not `/hookshot`.
            Some(prefix) => {
                path == prefix
                    || path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }
        }
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `path` has a `.` or `..` segment, raw or percent-encoded: a
/// server may resolve `/hooks/../admin` to `/admin`, outside the prefix.
fn has_dot_segment(path: &str) -> bool {
    let lowered = path.to_ascii_lowercase().replace("%2e", ".");
    lowered
        .split(['/', '\\'])
        .any(|segment| segment == "." || segment == "..")
        || lowered.contains("%2f")
        || lowered.contains("%5c")
}

/// What makes a request path unsafe to send, whoever decodes it at the
/// far end: a malformed escape (`%u002e`), bytes that are not UTF-8 once
/// decoded (the overlong `%c0%ae`), control characters (`%00`), and a
/// segment that is only dots once decoded once or twice, before any `;`
/// parameter (`..;`, `%252e%252e`, `.%252e`, `...`): servlet containers
/// resolve `..;`, and a decoding proxy turns `%252e` into `.`.
pub fn path_problem(path: &str) -> Option<&'static str> {
    for raw in path.split('/') {
        let Some(once) = percent_decode_strict(raw) else {
            return Some("the path has a malformed %-escape");
        };
        let Ok(once) = String::from_utf8(once) else {
            return Some("the path is not UTF-8 once decoded (an overlong or invalid encoding)");
        };
        if once.chars().any(char::is_control) {
            return Some("the path has a control character once decoded");
        }
        let twice = percent_decode_lenient(&once);
        for form in [once.as_str(), twice.as_str()] {
            let before_parameter = form.split(';').next().unwrap_or_default();
            if !before_parameter.is_empty() && before_parameter.chars().all(|c| c == '.') {
                return Some("the path has a segment of dots (once or twice decoded)");
            }
        }
    }
    None
}

/// `%XX` escapes decoded; `None` when a `%` is not followed by two hex
/// digits.
fn percent_decode_strict(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// `%XX` escapes decoded where they are well formed, the rest kept.
fn percent_decode_lenient(text: &str) -> String {
    let decoded = percent_decode_strict(text).unwrap_or_else(|| text.as_bytes().to_vec());
    String::from_utf8_lossy(&decoded).into_owned()
}

/// The port an authority names, without wrapping around: `Ok(None)` when
/// it names none, `Err` when what follows the host's `:` is not a number
/// from 1 to 65535 (`:65616` must not become port 80).
fn explicit_port(authority: &http::uri::Authority) -> Result<Option<u16>, ()> {
    let text = authority.as_str();
    let after_host = match text.rfind(']') {
        Some(bracket) => &text[bracket + 1..],
        None => text.rsplit_once('@').map_or(text, |(_, host)| host),
    };
    let Some((_, port)) = after_host.rsplit_once(':') else {
        return Ok(None);
    };
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(()),
        Ok(port) => Ok(Some(port)),
    }
}

/// A controller's `http_allow` list. Empty: the guest reaches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<AllowEntry>,
}

/// A request [`AllowList::check`] refused, with the reason for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The request's URL without user information or query.
    pub url: String,
    /// Why, e.g. "not in http_allow".
    pub reason: String,
}

impl AllowList {
    /// Parse every entry; the error names the entry's index.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        if entries.len() > crate::limits::MAX_HTTP_ALLOW_ENTRIES {
            return Err(format!(
                "{} entries; at most {} are allowed",
                entries.len(),
                crate::limits::MAX_HTTP_ALLOW_ENTRIES
            ));
        }
        let entries = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                AllowEntry::parse(e.as_ref()).map_err(|problem| format!("[{i}]: {problem}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { entries })
    }

    /// Whether the list is empty (no network at all).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries.
    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// Admit a request to `uri`, or say why not.
    pub fn check(&self, uri: &http::Uri) -> Result<(), Denied> {
        let url = display_url(uri);
        let deny = |reason: &str| {
            Err(Denied {
                url: url.clone(),
                reason: reason.to_string(),
            })
        };
        if self.entries.is_empty() {
            return deny("this controller has no http_allow list: it may not use the network");
        }
        let Some(scheme) = uri.scheme_str().and_then(Scheme::parse) else {
            return deny("only http and https are allowed");
        };
        let Some(authority) = uri.authority() else {
            return deny("the URL has no host");
        };
        if authority.as_str().contains('@') {
            return deny("the URL carries user information");
        }
        let host = authority.host();
        let Ok(port) = explicit_port(authority) else {
            return deny("the port is not a number from 1 to 65535");
        };
        let port = port.unwrap_or(scheme.default_port());
        let path = uri.path();
        if has_dot_segment(path) {
            return deny("the path has a `.` or `..` segment");
        }
        if let Some(problem) = path_problem(path) {
            return deny(problem);
        }
        if self
            .entries
            .iter()
            .any(|entry| entry.allows(scheme, host, port, path))
        {
            Ok(())
        } else {
            deny("not in http_allow")
        }
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, entry) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{entry}")?;
        }
        f.write_str("]")
    }
}

/// `scheme://host:port/path` of `uri`, without user information or query
/// (either may carry secrets), escaped for a log line.
pub fn display_url(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("?");
    let host = uri.authority().map(|a| {
        let text = a.as_str();
        text.rsplit_once('@').map_or(text, |(_, host)| host)
    });
    let text = format!("{scheme}://{}{}", host.unwrap_or(""), uri.path());
    crate::text::escape(&text).into_owned()
}

/// The bounds every outbound request of a guest runs under. Defaults are in
/// [`crate::limits`] and [`crate::timeouts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest time to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Longest wait for the response's head once the request is sent.
    pub first_byte_timeout: Duration,
    /// Longest silence between two chunks of a response body.
    pub between_bytes_timeout: Duration,
    /// Longest the whole request may take, connect to last response byte
    /// (below the controller's reconcile deadline).
    pub request_total: Duration,
    /// Largest request body.
    pub request_body_bytes: u64,
    /// Largest response body.
    pub response_body_bytes: u64,
    /// Most requests of one guest in flight at once.
    pub concurrent_requests: usize,
    /// Most requests one reconcile (or describe) may send.
    pub requests_per_reconcile: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        use crate::{limits, timeouts};
        Self {
            connect_timeout: timeouts::HTTP_OUT_CONNECT,
            first_byte_timeout: timeouts::HTTP_OUT_FIRST_BYTE,
            between_bytes_timeout: timeouts::HTTP_OUT_BETWEEN_BYTES,
            request_total: timeouts::HTTP_OUT_REQUEST_TOTAL,
            request_body_bytes: limits::HTTP_OUT_REQUEST_BODY_BYTES,
            response_body_bytes: limits::HTTP_OUT_RESPONSE_BODY_BYTES,
            concurrent_requests: limits::HTTP_OUT_CONCURRENT_REQUESTS,
            requests_per_reconcile: limits::HTTP_OUT_REQUESTS_PER_RECONCILE,
        }
    }
}

/// What became of one outbound request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response head arrived.
    Sent,
    /// The URL is not in `http_allow`; nothing was sent.
    Denied,
    /// The lease was already lost (revoked, or past its renew deadline);
    /// nothing was sent.
    RefusedAfterLoss,
    /// In flight when the lease was lost or the guest aborted: the
    /// connection was dropped.
    Cancelled,
    /// A connect, first-byte or between-bytes bound passed.
    TimedOut,
    /// A host bound (concurrency, requests per reconcile, body size)
    /// refused it; nothing more was sent.
    Limited,
    /// Anything else: connection refused, protocol error, TLS, DNS.
    Error,
}

impl Outcome {
    /// Every outcome, in metric order.
    pub const ALL: [Outcome; 7] = [
        Outcome::Sent,
        Outcome::Denied,
        Outcome::RefusedAfterLoss,
        Outcome::Cancelled,
        Outcome::TimedOut,
        Outcome::Limited,
        Outcome::Error,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Denied => "denied",
            Outcome::RefusedAfterLoss => "refused_after_loss",
            Outcome::Cancelled => "cancelled",
            Outcome::TimedOut => "timed_out",
            Outcome::Limited => "limited",
            Outcome::Error => "error",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Upper bounds (seconds) of the outbound latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A controller's outbound tallies, across its tenures, read by `/metrics`.
#[derive(Debug, Default)]
pub struct OutboundCounters {
    outcomes: [AtomicU64; 7],
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`] (plus `+Inf`).
    buckets: [AtomicU64; 13],
    latency_sum_micros: AtomicU64,
}

impl OutboundCounters {
    /// Count one request's outcome.
    pub fn count(&self, outcome: Outcome) {
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How many requests ended with `outcome`.
    pub fn get(&self, outcome: Outcome) -> u64 {
        self.outcomes[outcome.index()].load(Ordering::Relaxed)
    }

    /// Record the time from sending a request to its response head (or its
    /// failure on the wire).
    pub fn observe(&self, latency: Duration) {
        let seconds = latency.as_secs_f64();
        let slot = LATENCY_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_micros.fetch_add(
            u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The histogram: cumulative counts per bucket bound (the last is
    /// `+Inf`), the sum in seconds and the count.
    pub fn histogram(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let mut cumulative = 0;
        let mut out = Vec::with_capacity(LATENCY_BUCKETS.len() + 1);
        for (i, count) in self.buckets.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let bound = LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
            out.push((bound, cumulative));
        }
        let sum = self.latency_sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (out, sum, cumulative)
    }
}

/// One tenure's outbound requests, recorded in its history row when the
/// tenure ends.
#[derive(Debug, Default)]
pub struct TenureOutbound {
    requests: AtomicU64,
    last_at: Mutex<Option<SystemTime>>,
}

impl TenureOutbound {
    /// Note a request that left the host now.
    pub fn note(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_at.lock() {
            *last = Some(SystemTime::now());
        }
    }

    /// Requests that left the host in this tenure, and when the last did.
    pub fn tally(&self) -> (u64, Option<SystemTime>) {
        let last = self.last_at.lock().map(|l| *l).unwrap_or(None);
        (self.requests.load(Ordering::Relaxed), last)
    }
}

/// The TLS of guests' outbound HTTPS without `http_ca`: the public roots
/// (Mozilla's list, compiled in), built once.
pub fn public_tls() -> std::sync::Arc<rustls::ClientConfig> {
    static PUBLIC: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>> =
        std::sync::OnceLock::new();
    PUBLIC
        .get_or_init(|| {
            std::sync::Arc::new(
                crate::tls::client_config(
                    crate::tls::public_roots(),
                    crate::tls::Verify::Full,
                    None,
                )
                .expect("the public roots make a client configuration"),
            )
        })
        .clone()
}

/// The TLS of a controller's outbound HTTPS: the public roots, plus the
/// CAs of its `http_ca` file when it has one (read now; the error names
/// the file).
pub fn controller_tls(
    http_ca: Option<&std::path::Path>,
) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    let Some(path) = http_ca else {
        return Ok(public_tls());
    };
    let mut roots = crate::tls::public_roots();
    for certificate in crate::tls::read_certificates("http_ca", path).map_err(|e| e.to_string())? {
        roots.add(certificate).map_err(|e| {
            format!(
                "http_ca {}: not a usable CA certificate ({e})",
                path.display()
            )
        })?;
    }
    crate::tls::client_config(roots, crate::tls::Verify::Full, None).map(std::sync::Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_resolve_upwards_somewhere_are_refused() {
        for path in [
            "/hooks/..;/admin",
            "/hooks/%252e%252e/admin",
            "/hooks/.%252e/admin",
            "/hooks/%c0%ae%c0%ae/admin",
            "/hooks/..%00/admin",
            "/hooks/%u002e%u002e/admin",
            "/hooks/.../admin",
        ] {
            assert!(path_problem(path).is_some(), "{path} passed");
        }
        for path in [
            "/hooks/a.b/c",
            "/files/100%25",
            "/x/.well-known/y",
            "/a;v=1/b",
        ] {
            assert_eq!(path_problem(path), None, "{path} refused");
        }
    }

    #[test]
    fn ports_do_not_wrap_around() {
        let port = |authority: &str| explicit_port(&authority.parse().unwrap());
        assert_eq!(port("127.0.0.1:80"), Ok(Some(80)));
        assert_eq!(port("[::1]:8443"), Ok(Some(8443)));
        assert_eq!(port("example.com"), Ok(None));
        assert_eq!(port("[::1]"), Ok(None));
        assert_eq!(port("127.0.0.1:65616"), Err(()));
        assert_eq!(port("127.0.0.1:0"), Err(()));
        let list = AllowList::parse(&["http://127.0.0.1:80/hooks"]).unwrap();
        let uri: http::Uri = "http://127.0.0.1:65616/hooks/x".parse().unwrap();
        assert!(list.check(&uri).unwrap_err().reason.contains("port"));
    }

    #[test]
    fn fence_names_and_forwarding_headers_are_told_in_any_spelling() {
        for name in [
            "leasehold-epoch",
            "Leasehold_Epoch",
            "LEASEHOLD_LEASE",
            " leasehold-holder",
        ] {
            assert!(headers::is_fence_name(name), "{name}");
        }
        assert!(!headers::is_fence_name("leasehold-epochs"));
        for name in [
            "Forwarded",
            "x-forwarded-for",
            "X_Forwarded_Host",
            "x-real-ip",
        ] {
            assert!(headers::is_forwarding_name(name), "{name}");
        }
        assert!(!headers::is_forwarding_name("x-forwardedfor"));
    }

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(entries).expect("valid list")
    }

    fn uri(text: &str) -> http::Uri {
        text.parse().expect("valid uri")
    }

    #[test]
    fn an_empty_list_denies_everything() {
        let denied = AllowList::default()
            .check(&uri("http://127.0.0.1:9000/"))
            .unwrap_err();
        assert!(denied.reason.contains("no http_allow"), "{denied:?}");
    }

    #[test]
    fn scheme_host_and_port_must_all_match() {
        let allow = list(&["https://api.example.com", "http://127.0.0.1:9000"]);
        assert!(allow.check(&uri("https://api.example.com/v1/x")).is_ok());
        assert!(allow.check(&uri("https://API.example.com:443/")).is_ok());
        assert!(allow.check(&uri("http://api.example.com/")).is_err());
        assert!(allow.check(&uri("https://api.example.com:8443/")).is_err());
        assert!(
            allow
                .check(&uri("https://api.example.com.evil.net/"))
                .is_err()
        );
        assert!(allow.check(&uri("http://127.0.0.1:9000/anything")).is_ok());
        assert!(allow.check(&uri("http://127.0.0.1:9001/")).is_err());
        assert!(allow.check(&uri("http://127.0.0.1/")).is_err());
    }

    #[test]
    fn a_path_prefix_is_a_segment_boundary_and_dot_segments_are_refused() {
        let allow = list(&["http://127.0.0.1:9000/hooks/", "http://h:1/api"]);
        assert!(
            allow
                .check(&uri("http://127.0.0.1:9000/hooks/a?x=1"))
                .is_ok()
        );
        assert!(allow.check(&uri("http://127.0.0.1:9000/hooks")).is_err());
        assert!(allow.check(&uri("http://127.0.0.1:9000/admin")).is_err());
        assert!(
            allow
                .check(&uri("http://127.0.0.1:9000/hooks/../admin"))
                .is_err()
        );
        assert!(
            allow
                .check(&uri("http://127.0.0.1:9000/hooks/%2E%2E/admin"))
                .is_err()
        );
        assert!(
            allow
                .check(&uri("http://127.0.0.1:9000/hooks/..%2fadmin"))
                .is_err()
        );
        assert!(allow.check(&uri("http://h:1/api")).is_ok());
        assert!(allow.check(&uri("http://h:1/api/v1")).is_ok());
        assert!(allow.check(&uri("http://h:1/apix")).is_err());
    }

    #[test]
    fn user_information_in_a_request_is_refused_and_never_displayed() {
        let allow = list(&["http://127.0.0.1:9000"]);
        let denied = allow
            .check(&uri("http://user:s3cret@127.0.0.1:9000/x?token=abc"))
            .unwrap_err();
        assert!(!denied.url.contains("s3cret"), "{denied:?}");
        assert!(!denied.url.contains("token"), "{denied:?}");
    }

    #[test]
    fn bad_entries_are_explained_without_echoing_credentials() {
        for (entry, needle) in [
            ("", "empty"),
            ("api.example.com", "no scheme"),
            ("ftp://x", "other than http or https"),
            ("http://", "not a URL"),
            ("http://x/?q=1", "query"),
            ("http://x/a/../b", "path segment"),
            ("https://h/?token=s3cret", "query"),
            ("http:// x", "whitespace"),
        ] {
            let err = AllowList::parse(&[entry]).unwrap_err();
            assert!(err.contains(needle), "{entry:?}: {err}");
            assert!(err.starts_with("[0]: "), "{err}");
        }
        // Never the entry itself: any part of it may be a secret.
        for entry in [
            "x?token=s3cret",
            "bob:s3cret@x://y",
            "https://h/?token=s3cret",
        ] {
            let err = AllowList::parse(&[entry]).unwrap_err();
            assert!(!err.contains("s3cret"), "{err}");
        }
        let err = AllowList::parse(&["https://bob:hunter2@api.example.com"]).unwrap_err();
        assert!(err.contains("user information"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn the_latency_histogram_is_cumulative() {
        let counters = OutboundCounters::default();
        counters.observe(Duration::from_micros(500));
        counters.observe(Duration::from_millis(30));
        counters.observe(Duration::from_secs(60));
        let (buckets, sum, count) = counters.histogram();
        assert_eq!(count, 3);
        assert_eq!(buckets[0], (0.001, 1));
        assert_eq!(buckets.last().map(|b| b.1), Some(3));
        assert!(sum > 60.0);
    }
}
