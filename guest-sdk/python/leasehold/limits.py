"""The host's default bounds, as the Rust SDK's `limits` module states them.

The fake host enforces these; a real host may be configured with other
values (see `docs/contract.md`).
"""

#: Longest kind or name: a DNS label.
MAX_LABEL_LEN = 63
#: Largest value (or status) in bytes of JSON text.
MAX_VALUE_BYTES = 256 * 1024
#: Most operations in one commit.
MAX_OPS_PER_COMMIT = 128
#: Most events in one commit.
MAX_EVENTS_PER_COMMIT = 128
#: Longest event reason in bytes.
MAX_EVENT_REASON_BYTES = 128
#: Longest event message in bytes.
MAX_EVENT_MESSAGE_BYTES = 4 * 1024
#: The page size a list gets when it asks for 0.
DEFAULT_PAGE_SIZE = 100
#: The largest page a list returns, whatever it asks for.
MAX_PAGE_SIZE = 500
#: Largest payload of one host call in bytes.
MAX_CALL_PAYLOAD_BYTES = 4 * 1024 * 1024
#: Longest log line in bytes; longer lines are truncated.
LOG_LINE_BYTES = 8 * 1024
#: Largest settings JSON text in bytes.
MAX_SETTINGS_BYTES = 64 * 1024
#: Most labels on an object.
MAX_LABELS = 32
#: Longest label key in bytes.
MAX_LABEL_KEY_BYTES = 128
#: Longest non-empty label value in bytes.
MAX_LABEL_VALUE_BYTES = 63
#: Most finalizers on an object.
MAX_FINALIZERS = 16
#: Longest finalizer in bytes.
MAX_FINALIZER_BYTES = 128
#: Most owned objects one commit deletes or marks through their owners.
MAX_COLLECTED_PER_COMMIT = 1000
#: Most labels in a selector.
MAX_SELECTOR_LABELS = MAX_LABELS
#: Largest `contains` of a selector, in bytes of compact JSON.
MAX_SELECTOR_CONTAINS_BYTES = 4 * 1024
#: Deepest nesting of a selector's `contains`.
MAX_SELECTOR_CONTAINS_DEPTH = 16
#: Deepest nesting of arrays and objects in any JSON the store keeps.
MAX_JSON_DEPTH = 127
#: Smallest integer a JSON value may hold (below it: refused, not rounded).
MIN_JSON_INTEGER = -9223372036854775808
#: Largest integer a JSON value may hold (above it: refused, not rounded).
MAX_JSON_INTEGER = 18446744073709551615
#: Most shards a controller may run as (`shards = N` in its config entry).
MAX_SHARDS = 64
#: Most outbound HTTP requests per reconcile.
MAX_HTTP_REQUESTS_PER_RECONCILE = 64
#: Largest outbound HTTP request body in bytes.
MAX_HTTP_REQUEST_BODY_BYTES = 1024 * 1024
#: Largest HTTP response body in bytes.
MAX_HTTP_RESPONSE_BODY_BYTES = 4 * 1024 * 1024
