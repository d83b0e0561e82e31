//! The guest SDKs' copies of the host's limits equal the host's own.
//!
//! `leasehold-guest` states the bounds a guest meets (so a controller's
//! native tests and its `FakeHost` refuse what the host would refuse), but
//! cannot depend on the host crate. This test compiles the SDK's own
//! `limits.rs` (the very file the SDK builds, not a copy) next to the
//! host's tables and compares every constant, so changing a bound on one
//! side only fails here. The Python and JavaScript SDKs' tables
//! (`leasehold/limits.py`, `src/limits.js`) are read from their sources
//! and held to the same host values, every constant they declare.

use leasehold_host::{limits as host, names};

/// The SDK's limits module, compiled from its source file: this crate
/// does not depend on `leasehold-guest`, and the module is self-contained.
#[allow(dead_code)]
#[path = "../../guest-sdk/src/limits.rs"]
mod guest;

/// The SDK's source of its limits, to find every constant it declares.
const GUEST_SOURCE: &str = include_str!("../../guest-sdk/src/limits.rs");

/// Every SDK constant with the host's value it copies, by the SDK's name.
fn pairs() -> Vec<(&'static str, u64, u64)> {
    let n = |v: usize| v as u64;
    vec![
        (
            "MAX_HTTP_REQUESTS_PER_RECONCILE",
            u64::from(guest::MAX_HTTP_REQUESTS_PER_RECONCILE),
            u64::from(host::HTTP_OUT_REQUESTS_PER_RECONCILE),
        ),
        (
            "MAX_HTTP_REQUEST_BODY_BYTES",
            n(guest::MAX_HTTP_REQUEST_BODY_BYTES),
            host::HTTP_OUT_REQUEST_BODY_BYTES,
        ),
        (
            "MAX_HTTP_RESPONSE_BODY_BYTES",
            n(guest::MAX_HTTP_RESPONSE_BODY_BYTES),
            host::HTTP_OUT_RESPONSE_BODY_BYTES,
        ),
        (
            "MAX_LABEL_LEN",
            n(guest::MAX_LABEL_LEN),
            n(names::MAX_LABEL_LEN),
        ),
        (
            "MAX_VALUE_BYTES",
            n(guest::MAX_VALUE_BYTES),
            n(host::MAX_VALUE_BYTES),
        ),
        (
            "MAX_OPS_PER_COMMIT",
            n(guest::MAX_OPS_PER_COMMIT),
            n(host::MAX_OPS_PER_COMMIT),
        ),
        (
            "MAX_EVENTS_PER_COMMIT",
            n(guest::MAX_EVENTS_PER_COMMIT),
            n(host::MAX_EVENTS_PER_COMMIT),
        ),
        (
            "MAX_EVENT_REASON_BYTES",
            n(guest::MAX_EVENT_REASON_BYTES),
            n(host::MAX_EVENT_REASON_BYTES),
        ),
        (
            "MAX_EVENT_MESSAGE_BYTES",
            n(guest::MAX_EVENT_MESSAGE_BYTES),
            n(host::MAX_EVENT_MESSAGE_BYTES),
        ),
        (
            "DEFAULT_PAGE_SIZE",
            u64::from(guest::DEFAULT_PAGE_SIZE),
            n(host::DEFAULT_PAGE_SIZE),
        ),
        (
            "MAX_PAGE_SIZE",
            u64::from(guest::MAX_PAGE_SIZE),
            n(host::MAX_PAGE_SIZE),
        ),
        (
            "MAX_CALL_PAYLOAD_BYTES",
            n(guest::MAX_CALL_PAYLOAD_BYTES),
            n(host::HOST_CALL_PAYLOAD_BYTES),
        ),
        (
            "LOG_LINE_BYTES",
            n(guest::LOG_LINE_BYTES),
            n(host::LOG_LINE_BYTES),
        ),
        (
            "MAX_SETTINGS_BYTES",
            n(guest::MAX_SETTINGS_BYTES),
            n(host::MAX_SETTINGS_BYTES),
        ),
        ("MAX_LABELS", n(guest::MAX_LABELS), n(host::MAX_LABELS)),
        (
            "MAX_LABEL_KEY_BYTES",
            n(guest::MAX_LABEL_KEY_BYTES),
            n(host::MAX_LABEL_KEY_BYTES),
        ),
        (
            "MAX_LABEL_VALUE_BYTES",
            n(guest::MAX_LABEL_VALUE_BYTES),
            n(host::MAX_LABEL_VALUE_BYTES),
        ),
        (
            "MAX_FINALIZERS",
            n(guest::MAX_FINALIZERS),
            n(host::MAX_FINALIZERS),
        ),
        (
            "MAX_FINALIZER_BYTES",
            n(guest::MAX_FINALIZER_BYTES),
            n(host::MAX_FINALIZER_BYTES),
        ),
        (
            "MAX_COLLECTED_PER_COMMIT",
            n(guest::MAX_COLLECTED_PER_COMMIT),
            n(host::MAX_COLLECTED_PER_COMMIT),
        ),
        (
            "MAX_SELECTOR_LABELS",
            n(guest::MAX_SELECTOR_LABELS),
            n(host::MAX_SELECTOR_LABELS),
        ),
        (
            "MAX_SELECTOR_CONTAINS_BYTES",
            n(guest::MAX_SELECTOR_CONTAINS_BYTES),
            n(host::MAX_SELECTOR_CONTAINS_BYTES),
        ),
        (
            "MAX_SELECTOR_CONTAINS_DEPTH",
            n(guest::MAX_SELECTOR_CONTAINS_DEPTH),
            n(host::MAX_SELECTOR_CONTAINS_DEPTH),
        ),
    ]
}

#[test]
fn every_sdk_limit_equals_the_hosts() {
    let mismatched: Vec<String> = pairs()
        .into_iter()
        .filter(|(_, guest, host)| guest != host)
        .map(|(name, guest, host)| {
            format!("{name}: the SDK says {guest}, the host enforces {host}")
        })
        .collect();
    assert!(
        mismatched.is_empty(),
        "the guest SDK's limits disagree with the host's:\n{}",
        mismatched.join("\n")
    );
}

#[test]
fn every_sdk_limit_is_compared() {
    // A constant added to the SDK without a host counterpart here would
    // go unchecked: name each `pub const` of the SDK's file.
    let declared: Vec<&str> = GUEST_SOURCE
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("pub const "))
        .filter_map(|rest| rest.split(':').next())
        .map(str::trim)
        .collect();
    assert!(
        !declared.is_empty(),
        "no constants found in the SDK's limits.rs"
    );
    let compared: Vec<&str> = pairs().into_iter().map(|(name, _, _)| name).collect();
    let unchecked: Vec<&&str> = declared.iter().filter(|d| !compared.contains(d)).collect();
    assert!(
        unchecked.is_empty(),
        "SDK limits without a host comparison in this test: {unchecked:?}"
    );
}

#[test]
fn the_fake_hosts_default_limits_are_the_hosts() {
    let limits = guest::Limits::default();
    let fields = [
        (
            "max_value_bytes",
            limits.max_value_bytes,
            host::MAX_VALUE_BYTES,
        ),
        (
            "max_ops_per_commit",
            limits.max_ops_per_commit,
            host::MAX_OPS_PER_COMMIT,
        ),
        (
            "max_events_per_commit",
            limits.max_events_per_commit,
            host::MAX_EVENTS_PER_COMMIT,
        ),
        (
            "max_event_reason_bytes",
            limits.max_event_reason_bytes,
            host::MAX_EVENT_REASON_BYTES,
        ),
        (
            "max_event_message_bytes",
            limits.max_event_message_bytes,
            host::MAX_EVENT_MESSAGE_BYTES,
        ),
        (
            "max_page_size",
            limits.max_page_size as usize,
            host::MAX_PAGE_SIZE,
        ),
        (
            "max_call_payload_bytes",
            limits.max_call_payload_bytes,
            host::HOST_CALL_PAYLOAD_BYTES,
        ),
        (
            "log_line_bytes",
            limits.log_line_bytes,
            host::LOG_LINE_BYTES,
        ),
    ];
    for (field, sdk, host) in fields {
        assert_eq!(sdk, host, "Limits::default().{field}");
    }
}

/// The host's value of every bound the Python and JavaScript SDKs state,
/// by their (shared) name: the Rust SDK's pairs, and what those SDKs
/// state beyond them.
fn host_values() -> Vec<(&'static str, i128)> {
    let mut values: Vec<(&'static str, i128)> = pairs()
        .into_iter()
        .map(|(name, _, host)| (name, i128::from(host)))
        .collect();
    values.extend([
        ("MAX_SHARDS", i128::from(leasehold_host::shard::MAX_SHARDS)),
        ("MAX_JSON_DEPTH", host::MAX_JSON_DEPTH as i128),
        ("MIN_JSON_INTEGER", host::MIN_JSON_INTEGER),
        ("MAX_JSON_INTEGER", host::MAX_JSON_INTEGER),
    ]);
    values
}

/// The constants a Python (`NAME = expr`) or JavaScript (`export const
/// NAME = expr;`) limits table declares, evaluated: integer literals
/// (JavaScript's `n` suffix allowed), products, a leading minus, and
/// names declared above.
fn declared(source: &str, prefix: &str) -> Vec<(String, i128)> {
    let mut values: Vec<(String, i128)> = Vec::new();
    for line in source.lines() {
        // Declarations only: comments and docs begin otherwise.
        let Some(rest) = line
            .strip_prefix(prefix)
            .filter(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
        else {
            continue;
        };
        let Some((name, expr)) = rest.split_once('=') else {
            continue;
        };
        let name = name.trim().to_string();
        let expr = expr.trim().trim_end_matches(';');
        let value = expr
            .split('*')
            .map(|factor| {
                let factor = factor.trim();
                let (negative, factor) = match factor.strip_prefix('-') {
                    Some(rest) => (true, rest.trim()),
                    None => (false, factor),
                };
                let literal = factor.trim_end_matches('n').replace('_', "");
                let value = literal.parse::<i128>().ok().or_else(|| {
                    values
                        .iter()
                        .find(|(known, _)| known == factor)
                        .map(|(_, v)| *v)
                });
                let value = value
                    .unwrap_or_else(|| panic!("{name}: cannot evaluate {factor:?} of {expr:?}"));
                if negative { -value } else { value }
            })
            .product();
        values.push((name, value));
    }
    assert!(!values.is_empty(), "no constants found");
    values
}

/// Every constant of one SDK's table equals the host's, and each has a
/// host value to be compared with.
fn agrees(sdk: &str, source: &str, prefix: &str) {
    let host = host_values();
    let mut problems = Vec::new();
    for (name, value) in declared(source, prefix) {
        match host.iter().find(|(known, _)| *known == name) {
            Some((_, expected)) if *expected == value => {}
            Some((_, expected)) => problems.push(format!(
                "{name}: the {sdk} SDK says {value}, the host enforces {expected}"
            )),
            None => problems.push(format!(
                "{name}: the {sdk} SDK states it, but this test knows no host value for it"
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_python_sdks_limits_are_the_hosts() {
    agrees(
        "Python",
        include_str!("../../guest-sdk/python/leasehold/limits.py"),
        "",
    );
}

#[test]
fn the_javascript_sdks_limits_are_the_hosts() {
    agrees(
        "JavaScript",
        include_str!("../../guest-sdk/js/src/limits.js"),
        "export const ",
    );
}

#[test]
fn a_changed_bound_in_an_sdk_table_is_found() {
    let python = include_str!("../../guest-sdk/python/leasehold/limits.py")
        .replace("MAX_LABELS = 32", "MAX_LABELS = 31");
    let refused = std::panic::catch_unwind(|| agrees("Python", &python, ""));
    assert!(refused.is_err(), "a Python MAX_LABELS of 31 went unnoticed");
    let js = include_str!("../../guest-sdk/js/src/limits.js").replace(
        "MAX_JSON_INTEGER = 18446744073709551615n",
        "MAX_JSON_INTEGER = 18446744073709551616n",
    );
    let refused = std::panic::catch_unwind(|| agrees("JavaScript", &js, "export const "));
    assert!(
        refused.is_err(),
        "a JavaScript MAX_JSON_INTEGER off by one went unnoticed"
    );
}
