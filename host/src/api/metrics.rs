//! `GET /metrics`: the supervisors' counters in the Prometheus text
//! exposition format (version 0.0.4). Every series carries
//! `controller="<name>"` (docs/design.md, point 6), but the API's own,
//! which belongs to the whole host:
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
//! | `leasehold_outbound_requests_total` | counter: outbound HTTP requests of the guests, by what became of them | `outcome` = sent, denied, refused_after_loss, cancelled, timed_out, limited, error |
//! | `leasehold_outbound_request_seconds` | histogram: from sending a request to its response head (or its failure on the wire) | |
//! | `leasehold_http_overloaded_total` | counter: API requests answered 503 `overloaded` (no `controller` label) | `budget` = requests, events |
//!
//! Known loss and abort reasons, every quota, every outbound outcome and
//! every request budget are always exported (at 0 until they happen), so a rate query works before
//! the first incident.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::quota::Quota;
use crate::status::{ControllerState, ControllerStatus, Histogram, OutboundSnapshot, Status};

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
    let mut text = render(&shared.api.status);
    render_overloaded(&mut text, &[&shared.requests, &shared.events]);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text)
}

/// `leasehold_http_overloaded_total`: the refusals of each request budget.
fn render_overloaded(out: &mut String, budgets: &[&super::serve::Limiter]) {
    header(
        out,
        "leasehold_http_overloaded_total",
        "counter",
        "HTTP API requests answered 503 overloaded (with Retry-After) because their budget of \
         requests at once was spent, by budget: requests (every /v1 request but events), events.",
    );
    for budget in budgets {
        sample(
            out,
            "leasehold_http_overloaded_total",
            &labels(&[("budget", budget.name())]),
            budget.refused(),
        );
    }
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
        "leasehold_outbound_requests_total",
        "counter",
        "Outbound HTTP requests of the guests, by outcome: sent (a response head arrived), denied \
         (not in http_allow), refused_after_loss, cancelled (in flight when the lease was lost or \
         the guest aborted), timed_out, limited (a host bound), error.",
    );
    let outbound: Vec<OutboundSnapshot> = controllers
        .iter()
        .map(|c| c.metrics.outbound.snapshot())
        .collect();
    for (c, totals) in controllers.iter().zip(&outbound) {
        for (outcome, count) in &totals.outcomes {
            sample(
                &mut out,
                "leasehold_outbound_requests_total",
                &labels(&[("controller", &c.name), ("outcome", outcome.label())]),
                count,
            );
        }
    }

    header(
        &mut out,
        "leasehold_outbound_request_seconds",
        "histogram",
        "Time from sending an outbound HTTP request to its response head (or its failure on the \
         wire).",
    );
    for (c, totals) in controllers.iter().zip(&outbound) {
        let name = "leasehold_outbound_request_seconds";
        for (bound, cumulative) in &totals.buckets {
            let le = if bound.is_finite() {
                format!("{bound}")
            } else {
                "+Inf".to_string()
            };
            sample(
                &mut out,
                &format!("{name}_bucket"),
                &labels(&[("controller", &c.name), ("le", &le)]),
                cumulative,
            );
        }
        let plain = labels(&[("controller", &c.name)]);
        sample(&mut out, &format!("{name}_sum"), &plain, totals.sum);
        sample(&mut out, &format!("{name}_count"), &plain, totals.count);
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
    fn outbound_requests_are_exported_per_controller_and_outcome() {
        use crate::outbound::{OutboundCounters, Outcome};
        let status = Status::new(
            "c1".into(),
            "host-a".into(),
            &["caller".to_string(), "quiet".to_string()],
        );
        let caller = status.controller("caller").expect("configured");
        let counters = std::sync::Arc::new(OutboundCounters::default());
        for _ in 0..3 {
            counters.count(Outcome::Sent);
        }
        counters.count(Outcome::RefusedAfterLoss);
        counters.observe(std::time::Duration::from_millis(3));
        counters.observe(std::time::Duration::from_secs(20));
        caller.metrics.outbound.attach(counters);
        let text = render(&status);
        let has = |line: &str| text.lines().any(|l| l == line);
        for line in [
            "# TYPE leasehold_outbound_requests_total counter",
            "leasehold_outbound_requests_total{controller=\"caller\",outcome=\"sent\"} 3",
            "leasehold_outbound_requests_total{controller=\"caller\",outcome=\"refused_after_loss\"} 1",
            "# TYPE leasehold_outbound_request_seconds histogram",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"0.0025\"} 0",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"0.005\"} 1",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"10\"} 1",
            "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"+Inf\"} 2",
            "leasehold_outbound_request_seconds_sum{controller=\"caller\"} 20.003",
            "leasehold_outbound_request_seconds_count{controller=\"caller\"} 2",
            // A controller that never sent anything shows zeros, not nothing.
            "leasehold_outbound_request_seconds_bucket{controller=\"quiet\",le=\"+Inf\"} 0",
            "leasehold_outbound_request_seconds_count{controller=\"quiet\"} 0",
        ] {
            assert!(has(line), "missing {line:?} in\n{text}");
        }
        // Every outcome, zero included, for every controller.
        for controller in ["caller", "quiet"] {
            for outcome in Outcome::ALL {
                let prefix = format!(
                    "leasehold_outbound_requests_total{{controller=\"{controller}\",outcome=\"{}\"}} ",
                    outcome.label()
                );
                assert_eq!(
                    text.lines().filter(|l| l.starts_with(&prefix)).count(),
                    1,
                    "{prefix} in\n{text}"
                );
            }
        }
        assert!(has(
            "leasehold_outbound_requests_total{controller=\"quiet\",outcome=\"denied\"} 0"
        ));
        // Exactly one +Inf bucket (the counters' own last bound).
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with(
                    "leasehold_outbound_request_seconds_bucket{controller=\"caller\",le=\"+Inf\"}"
                ))
                .count(),
            1
        );
        assert!(!text.contains("le=\"inf\""), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(labels(&[("controller", "x\"y")]), "{controller=\"x\\\"y\"}");
    }
}
