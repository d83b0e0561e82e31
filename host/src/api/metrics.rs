//! `GET /metrics`: the supervisors' counters in the Prometheus text
//! exposition format (version 0.0.4). Every series carries
//! `controller="<name>"` (docs/design.md, point 6):
//!
//! | series | type | extra labels |
//! |---|---|---|
//! | `leasehold_leader` | gauge: 1 while this replica leads | |
//! | `leasehold_epoch` | gauge: epoch of the tenure held here, 0 if none | |
//! | `leasehold_acquisitions_total` | counter | |
//! | `leasehold_losses_total` | counter | `reason` |
//! | `leasehold_aborts_total` | counter | `reason` |
//! | `leasehold_reconcile_duration_seconds` | histogram | |
//! | `leasehold_commits_total` | counter | `result` = ok, fenced, conflict, failed |
//! | `leasehold_renew_duration_seconds` | histogram | |
//! | `leasehold_quota_refusals_total` | counter: commits a write quota refused | `quota` = max_creates_per_second, max_objects_per_kind |
//!
//! Known loss and abort reasons and every quota are always exported (at 0
//! until they happen), so a rate query works before the first incident.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::quota::Quota;
use crate::status::{ControllerState, ControllerStatus, Histogram, Status};

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Loss reasons the supervisors record (see
/// [`crate::status::ControllerMetrics::losses`]).
const LOSS_REASONS: &[&str] = &[
    "renew_refused",
    "renew_deadline",
    "identity_changed",
    "fenced",
];

/// Abort reasons the supervisors record (see
/// [`crate::status::ControllerMetrics::aborts`]).
const ABORT_REASONS: &[&str] = &["lease_lost", "trap", "deadline", "memory", "shutdown"];

pub(super) async fn handler(State(shared): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        render(&shared.api.status),
    )
}

/// Escape a label value: backslash, double quote and newline.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels_text: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{name}{labels_text} {value}");
}

/// Counts by reason: every known reason, plus any other the supervisors
/// recorded.
fn by_reason(
    map: &std::sync::Mutex<BTreeMap<&'static str, u64>>,
    known: &[&'static str],
) -> BTreeMap<String, u64> {
    let recorded = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut all: BTreeMap<String, u64> = known.iter().map(|r| (r.to_string(), 0)).collect();
    for (reason, count) in recorded {
        all.insert(reason.to_string(), count);
    }
    all
}

fn histogram(out: &mut String, name: &str, controller: &str, h: &Histogram) {
    let (buckets, sum, count) = h.snapshot();
    for (bound, cumulative) in buckets {
        let le = format!("{bound}");
        sample(
            out,
            &format!("{name}_bucket"),
            &labels(&[("controller", controller), ("le", &le)]),
            cumulative,
        );
    }
    sample(
        out,
        &format!("{name}_bucket"),
        &labels(&[("controller", controller), ("le", "+Inf")]),
        count,
    );
    let plain = labels(&[("controller", controller)]);
    sample(out, &format!("{name}_sum"), &plain, sum);
    sample(out, &format!("{name}_count"), &plain, count);
}

/// Render every controller's metrics.
pub fn render(status: &Status) -> String {
    let controllers = status.controllers();
    let controllers: Vec<&ControllerStatus> = controllers.iter().map(AsRef::as_ref).collect();
    let mut out = String::new();

    header(
        &mut out,
        "leasehold_leader",
        "gauge",
        "1 while this replica holds the controller's lease and runs its guest, else 0.",
    );
    for c in &controllers {
        let leading = matches!(c.get(), ControllerState::Leading { .. });
        sample(
            &mut out,
            "leasehold_leader",
            &labels(&[("controller", &c.name)]),
            u8::from(leading),
        );
    }

    header(
        &mut out,
        "leasehold_epoch",
        "gauge",
        "Fencing epoch of the tenure this replica holds; 0 when it holds none.",
    );
    for c in &controllers {
        let epoch = match c.get() {
            ControllerState::Leading { epoch, .. } => epoch,
            _ => 0,
        };
        sample(
            &mut out,
            "leasehold_epoch",
            &labels(&[("controller", &c.name)]),
            epoch,
        );
    }

    header(
        &mut out,
        "leasehold_acquisitions_total",
        "counter",
        "Leases acquired by this replica.",
    );
    for c in &controllers {
        sample(
            &mut out,
            "leasehold_acquisitions_total",
            &labels(&[("controller", &c.name)]),
            c.metrics.acquisitions.load(Ordering::Relaxed),
        );
    }

    header(
        &mut out,
        "leasehold_losses_total",
        "counter",
        "Leases this replica lost, by reason.",
    );
    for c in &controllers {
        for (reason, count) in by_reason(&c.metrics.losses, LOSS_REASONS) {
            sample(
                &mut out,
                "leasehold_losses_total",
                &labels(&[("controller", &c.name), ("reason", &reason)]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_aborts_total",
        "counter",
        "Guest instances torn down, by reason.",
    );
    for c in &controllers {
        for (reason, count) in by_reason(&c.metrics.aborts, ABORT_REASONS) {
            sample(
                &mut out,
                "leasehold_aborts_total",
                &labels(&[("controller", &c.name), ("reason", &reason)]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_reconcile_duration_seconds",
        "histogram",
        "Duration of one reconcile call.",
    );
    for c in &controllers {
        histogram(
            &mut out,
            "leasehold_reconcile_duration_seconds",
            &c.name,
            &c.metrics.reconcile_seconds,
        );
    }

    header(
        &mut out,
        "leasehold_commits_total",
        "counter",
        "Fenced commits by result: ok, fenced (stale epoch refused), conflict (version), failed.",
    );
    for c in &controllers {
        let commits = &c.metrics.commits;
        for (result, counter) in [
            ("ok", &commits.ok),
            ("fenced", &commits.fenced),
            ("conflict", &commits.conflict),
            ("failed", &commits.failed),
        ] {
            sample(
                &mut out,
                "leasehold_commits_total",
                &labels(&[("controller", &c.name), ("result", result)]),
                counter.load(Ordering::Relaxed),
            );
        }
    }

    header(
        &mut out,
        "leasehold_quota_refusals_total",
        "counter",
        "Guest commits refused by a write quota (nothing written), by quota.",
    );
    for c in &controllers {
        for quota in Quota::ALL {
            sample(
                &mut out,
                "leasehold_quota_refusals_total",
                &labels(&[("controller", &c.name), ("quota", quota.key())]),
                c.metrics
                    .commits
                    .quota_refusals(quota)
                    .load(Ordering::Relaxed),
            );
        }
    }

    header(
        &mut out,
        "leasehold_renew_duration_seconds",
        "histogram",
        "Round-trip time of lease renewals.",
    );
    for c in &controllers {
        histogram(
            &mut out,
            "leasehold_renew_duration_seconds",
            &c.name,
            &c.metrics.renew_seconds,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_refusals_are_exported_per_controller_and_quota() {
        let status = Status::new("c1".into(), "host-a".into(), &["flood".to_string()]);
        let flood = status.controller("flood").expect("configured");
        flood
            .metrics
            .commits
            .quota_refusals(Quota::CreatesPerSecond)
            .fetch_add(3, Ordering::Relaxed);
        let text = render(&status);
        assert!(
            text.contains("# TYPE leasehold_quota_refusals_total counter"),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_quota_refusals_total{controller=\"flood\",quota=\"max_creates_per_second\"} 3\n"
            ),
            "{text}"
        );
        // Exported at 0 before the first refusal.
        assert!(
            text.contains(
                "leasehold_quota_refusals_total{controller=\"flood\",quota=\"max_objects_per_kind\"} 0\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(labels(&[("controller", "x\"y")]), "{controller=\"x\\\"y\"}");
    }
}
