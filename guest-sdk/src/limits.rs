//! The sizes and counts the host bounds, with the host's defaults.
//!
//! The host may be configured differently; these are what an unconfigured
//! host enforces and what [`crate::FakeHost`] enforces unless given other
//! [`Limits`].

/// Longest kind or object name: kinds and names are DNS labels, 1 to 63
/// characters of `a-z`, `0-9` and `-`, starting and ending with a letter or
/// digit.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_LABEL_LEN, 63);
/// ```
pub const MAX_LABEL_LEN: usize = 63;

/// Largest object value, in bytes of JSON text.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_VALUE_BYTES, 256 * 1024);
/// ```
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// Most operations (create, update, delete) in one commit.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_OPS_PER_COMMIT, 128);
/// ```
pub const MAX_OPS_PER_COMMIT: usize = 128;

/// Most events in one commit.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_EVENTS_PER_COMMIT, 128);
/// ```
pub const MAX_EVENTS_PER_COMMIT: usize = 128;

/// Longest event reason, in bytes.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_EVENT_REASON_BYTES, 128);
/// ```
pub const MAX_EVENT_REASON_BYTES: usize = 128;

/// Longest event message, in bytes.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_EVENT_MESSAGE_BYTES, 4 * 1024);
/// ```
pub const MAX_EVENT_MESSAGE_BYTES: usize = 4 * 1024;

/// The page size [`crate::Api::list`] callers should use when they have no
/// reason to choose another.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost, DEFAULT_PAGE_SIZE};
///
/// let _host = FakeHost::new();
/// let page = Api::<serde_json::Value>::new("tasks").list(None, DEFAULT_PAGE_SIZE)?;
/// assert!(page.objects.is_empty());
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// Largest page a listing returns; larger `limit`s are capped to it.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_PAGE_SIZE, 500);
/// ```
pub const MAX_PAGE_SIZE: u32 = 500;

/// Largest payload of one host call, in bytes: the sum of the kinds,
/// names, values, reasons and messages of a commit. A commit of many large
/// values can exceed it while each value is within [`MAX_VALUE_BYTES`].
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_CALL_PAYLOAD_BYTES, 4 * 1024 * 1024);
/// ```
pub const MAX_CALL_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

/// Longest log line, in bytes; the host truncates longer lines.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::LOG_LINE_BYTES, 8 * 1024);
/// ```
pub const LOG_LINE_BYTES: usize = 8 * 1024;

/// Most outbound HTTP requests one reconcile may send; past it the host
/// refuses with a `leasehold-limit` error (a guest looping on a failing
/// call is stopped long before its deadline).
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_HTTP_REQUESTS_PER_RECONCILE, 64);
/// ```
pub const MAX_HTTP_REQUESTS_PER_RECONCILE: u32 = 64;

/// Largest outbound HTTP request body, in bytes.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_HTTP_REQUEST_BODY_BYTES, 1024 * 1024);
/// ```
pub const MAX_HTTP_REQUEST_BODY_BYTES: usize = 1024 * 1024;

/// Largest HTTP response body a guest may read, in bytes.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_HTTP_RESPONSE_BODY_BYTES, 4 * 1024 * 1024);
/// ```
pub const MAX_HTTP_RESPONSE_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Largest settings (`[controllers.settings]` in the host's config), in
/// bytes of JSON text; the host refuses a config with larger ones, and
/// [`crate::FakeHost::set_settings`] refuses them too.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_SETTINGS_BYTES, 64 * 1024);
/// ```
pub const MAX_SETTINGS_BYTES: usize = 64 * 1024;

/// Most labels on one object.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_LABELS, 32);
/// ```
pub const MAX_LABELS: usize = 32;

/// Longest label key, in bytes: 1 to this many ASCII letters, digits, `-`,
/// `_`, `.` or `/`, beginning and ending with a letter or digit.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_LABEL_KEY_BYTES, 128);
/// ```
pub const MAX_LABEL_KEY_BYTES: usize = 128;

/// Longest label value, in bytes: empty, or ASCII letters, digits, `-`,
/// `_` or `.`, beginning and ending with a letter or digit.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_LABEL_VALUE_BYTES, 63);
/// ```
pub const MAX_LABEL_VALUE_BYTES: usize = 63;

/// Most finalizers on one object (each listed once).
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_FINALIZERS, 16);
/// ```
pub const MAX_FINALIZERS: usize = 16;

/// Longest finalizer name, in bytes (spelled like a label key).
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_FINALIZER_BYTES, 128);
/// ```
pub const MAX_FINALIZER_BYTES: usize = 128;

/// Most owned objects one commit deletes or marks by garbage collection;
/// a delete that would collect more is refused whole.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_COLLECTED_PER_COMMIT, 1000);
/// ```
pub const MAX_COLLECTED_PER_COMMIT: usize = 1000;

/// Most labels one selector may name ([`crate::Selector`]).
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_SELECTOR_LABELS, leasehold_guest::MAX_LABELS);
/// ```
pub const MAX_SELECTOR_LABELS: usize = MAX_LABELS;

/// Largest `contains` of a selector, in bytes of compact JSON.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_SELECTOR_CONTAINS_BYTES, 4 * 1024);
/// ```
pub const MAX_SELECTOR_CONTAINS_BYTES: usize = 4 * 1024;

/// Deepest nesting of a selector's `contains`: a scalar is depth 0, each
/// array or object around it one more.
///
/// # Example
///
/// ```
/// assert_eq!(leasehold_guest::MAX_SELECTOR_CONTAINS_DEPTH, 16);
/// ```
pub const MAX_SELECTOR_CONTAINS_DEPTH: usize = 16;

/// The limits a [`crate::FakeHost`] enforces. [`Limits::default`] is the
/// host's defaults (the constants of this crate); a test can shrink them to
/// reach a limit cheaply.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Limits, StoreError, Transaction};
///
/// let host = FakeHost::with_limits(Limits { max_ops_per_commit: 1, ..Limits::default() });
/// let result = Transaction::new()
///     .create("tasks", "a", &1)
///     .create("tasks", "b", &2)
///     .commit();
/// assert!(matches!(result, Err(StoreError::Invalid(_))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest object value in bytes of JSON text.
    pub max_value_bytes: usize,
    /// Most operations in one commit.
    pub max_ops_per_commit: usize,
    /// Most events in one commit.
    pub max_events_per_commit: usize,
    /// Longest event reason in bytes.
    pub max_event_reason_bytes: usize,
    /// Longest event message in bytes.
    pub max_event_message_bytes: usize,
    /// Largest page of a listing.
    pub max_page_size: u32,
    /// Largest payload of one host call.
    pub max_call_payload_bytes: usize,
    /// Longest log line in bytes.
    pub log_line_bytes: usize,
    /// Most outbound HTTP requests per reconcile.
    pub http_requests_per_reconcile: u32,
    /// Largest outbound HTTP request body in bytes.
    pub http_request_body_bytes: usize,
    /// Largest HTTP response body in bytes.
    pub http_response_body_bytes: usize,
}

impl Default for Limits {
    /// The host's defaults.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Limits;
    ///
    /// assert_eq!(Limits::default().max_page_size, leasehold_guest::MAX_PAGE_SIZE);
    /// ```
    fn default() -> Self {
        Self {
            max_value_bytes: MAX_VALUE_BYTES,
            max_ops_per_commit: MAX_OPS_PER_COMMIT,
            max_events_per_commit: MAX_EVENTS_PER_COMMIT,
            max_event_reason_bytes: MAX_EVENT_REASON_BYTES,
            max_event_message_bytes: MAX_EVENT_MESSAGE_BYTES,
            max_page_size: MAX_PAGE_SIZE,
            max_call_payload_bytes: MAX_CALL_PAYLOAD_BYTES,
            log_line_bytes: LOG_LINE_BYTES,
            http_requests_per_reconcile: MAX_HTTP_REQUESTS_PER_RECONCILE,
            http_request_body_bytes: MAX_HTTP_REQUEST_BODY_BYTES,
            http_response_body_bytes: MAX_HTTP_RESPONSE_BODY_BYTES,
        }
    }
}
