//! The bounds of the store's rules, declared once with their defaults.
//!
//! The host's bounds table (`host/src/limits.rs`) re-exports these beside
//! its own; the Rust SDK states them for guests, and the Python and
//! JavaScript SDKs' copies are checked against the host's table by
//! `tests/tests/limits_agree.rs`.

/// Largest object value (JSON text) accepted by the store, given and once
/// canonicalized; a status has the same bound.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;
/// Most operations in one commit.
pub const MAX_OPS_PER_COMMIT: usize = 128;
/// Most events in one commit.
pub const MAX_EVENTS_PER_COMMIT: usize = 128;
/// Largest event reason.
pub const MAX_EVENT_REASON_BYTES: usize = 128;
/// Largest event message.
pub const MAX_EVENT_MESSAGE_BYTES: usize = 4 * 1024;
/// Most labels on one object.
pub const MAX_LABELS: usize = 32;
/// Longest label key (letters, digits, `-`, `_`, `.`, `/`).
pub const MAX_LABEL_KEY_BYTES: usize = 128;
/// Longest label value (letters, digits, `-`, `_`, `.`; may be empty).
pub const MAX_LABEL_VALUE_BYTES: usize = 63;
/// Most finalizers on one object.
pub const MAX_FINALIZERS: usize = 16;
/// Longest finalizer (letters, digits, `-`, `_`, `.`, `/`).
pub const MAX_FINALIZER_BYTES: usize = 128;
/// Most owned objects one commit may delete or mark by garbage collection
/// (transitively) when it deletes their owner; beyond it the commit is
/// refused as too large and the owned objects must be deleted first.
pub const MAX_COLLECTED_PER_COMMIT: usize = 1000;
/// Most labels one selector may name: no object carries more, so a
/// selector naming more could never match.
pub const MAX_SELECTOR_LABELS: usize = MAX_LABELS;
/// Largest `contains` of a selector, as compact JSON: a condition on a
/// value, not a copy of one; it rides in a URL on the HTTP API.
pub const MAX_SELECTOR_CONTAINS_BYTES: usize = 4 * 1024;
/// Deepest nesting of a selector's `contains` (a scalar is depth 0, each
/// array or object around it one more): containment is checked
/// recursively, and this bounds that recursion.
pub const MAX_SELECTOR_CONTAINS_DEPTH: usize = 16;
/// Deepest nesting of arrays and objects in any JSON the store accepts (a
/// value, a status, a selector's `contains`): the host's JSON parser
/// stops at 128 levels, so 127 is the deepest every backend and fake
/// reads alike.
pub const MAX_JSON_DEPTH: usize = 127;
/// Smallest integer a JSON value may hold exactly: the 64-bit signed
/// range. A JSON integer (no fraction, no exponent) below it is refused
/// as invalid rather than rounded to a double: no backend could give it
/// back as written.
pub const MIN_JSON_INTEGER: i128 = i64::MIN as i128;
/// Largest integer a JSON value may hold exactly: the 64-bit unsigned
/// range; beyond it, as [`MIN_JSON_INTEGER`], refused as invalid. (A
/// number written with a fraction or an exponent is a double and is kept
/// as the nearest one.)
pub const MAX_JSON_INTEGER: i128 = u64::MAX as i128;
/// Default page of a listing (a limit of 0 asks for it).
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page of a listing, events included.
pub const MAX_PAGE_SIZE: usize = 500;
/// Longest kind, object, lease or cluster name.
pub const MAX_LABEL_LEN: usize = 63;
/// Longest holder identity.
pub const MAX_HOLDER_LEN: usize = 253;

// Relations between the bounds, checked when the crate compiles.
const _: () = assert!(MAX_SELECTOR_CONTAINS_BYTES < MAX_VALUE_BYTES);
const _: () = assert!(MAX_SELECTOR_CONTAINS_DEPTH <= MAX_JSON_DEPTH);
const _: () = assert!(DEFAULT_PAGE_SIZE <= MAX_PAGE_SIZE);
// A lease name is a label and must fit wherever a holder name would.
const _: () = assert!(MAX_LABEL_LEN <= MAX_HOLDER_LEN);
const _: () = assert!(MIN_JSON_INTEGER < 0 && MAX_JSON_INTEGER > 0);

/// The bounds of a commit a caller may lower: the host enforces
/// [`Bounds::HOST`]; the SDK's `FakeHost` lets a test shrink them to reach
/// a limit cheaply. Metadata and selector bounds are not adjustable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Largest value or status, given and canonicalized.
    pub max_value_bytes: usize,
    /// Most operations in one commit.
    pub max_ops_per_commit: usize,
    /// Most events in one commit.
    pub max_events_per_commit: usize,
    /// Longest event reason.
    pub max_event_reason_bytes: usize,
    /// Longest event message.
    pub max_event_message_bytes: usize,
}

impl Bounds {
    /// The host's bounds: the constants of this module.
    pub const HOST: Bounds = Bounds {
        max_value_bytes: MAX_VALUE_BYTES,
        max_ops_per_commit: MAX_OPS_PER_COMMIT,
        max_events_per_commit: MAX_EVENTS_PER_COMMIT,
        max_event_reason_bytes: MAX_EVENT_REASON_BYTES,
        max_event_message_bytes: MAX_EVENT_MESSAGE_BYTES,
    };
}

impl Default for Bounds {
    /// [`Bounds::HOST`].
    fn default() -> Self {
        Self::HOST
    }
}
