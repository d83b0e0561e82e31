//! Liveness and readiness.
//!
//! Readiness combines what the supervisors last saw (the database identity
//! check, the holder claim and each controller's state in
//! [`Status`](crate::status::Status)) with a cheap live probe of the
//! database, so a replica whose database went away or refuses writes stops
//! being ready within about a second, and becomes ready again on recovery
//! without a restart, whatever the supervisors are doing at that moment.
//!
//! Four named checks, each `{"ok": bool, ...}` under `checks`, all of which
//! must pass: `database` (reachable, the verified one, not a standby),
//! `writes` (a session opened now is not read-only), `holder` (no other
//! live host runs as this holder) and `controllers` (none is failing, i.e.
//! unable to lead or stand by). `failed` lists the names of those that do
//! not pass.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::AppState;
use crate::authority::claim::ClaimState;
use crate::authority::{Authority, DatabaseIdentity};
use crate::status::{ControllerState, DatabaseState};
use crate::supervisor::identity::read_only_reason;

/// What `/readyz` says about the in-memory backend, every time, so nobody
/// mistakes a throwaway host for a deployment.
pub(super) const MEMORY_WARNING: &str = "in-memory backend (url = \"memory:\"): SINGLE PROCESS \
ONLY and NOT DURABLE; every lease, object and event is lost when this process exits, and \
another replica would lead the same controllers against its own separate memory. Remove \
[database] url for the durable embedded backend, or set a PostgreSQL URL.";

/// What `/readyz` says about the embedded backend's reach: durable, but
/// one machine's.
pub(super) const EMBEDDED_NOTE: &str = "embedded backend: SQLite in the data directory, durable; \
shared by the hosts of this machine only (for more than one machine, use PostgreSQL).";

/// `GET /healthz`: the process is up and serving.
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// The live database probe: one `identity()` round trip, bounded by a
/// timeout, its result reused for `max_age`. The lock is held across the
/// probe on purpose: concurrent readiness requests wait for the one probe
/// in flight instead of each sending their own.
pub(super) struct Probe {
    timeout: Duration,
    max_age: Duration,
    last: Mutex<Option<(Instant, Result<DatabaseIdentity, String>)>>,
}

impl Probe {
    pub(super) fn new(timeout: Duration, max_age: Duration) -> Self {
        Self {
            timeout,
            max_age,
            last: Mutex::new(None),
        }
    }

    async fn check(&self, authority: &dyn Authority) -> Result<DatabaseIdentity, String> {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = last.as_ref()
            && at.elapsed() < self.max_age
        {
            return result.clone();
        }
        let result = match tokio::time::timeout(self.timeout, authority.identity()).await {
            Ok(Ok(identity)) => Ok(identity),
            Ok(Err(e)) => Err(format!("the database does not answer: {e}")),
            Err(_) => Err(format!(
                "the database did not answer within {}",
                humantime::format_duration(self.timeout)
            )),
        };
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

/// The database check: whether it passes, and its JSON; with the identity
/// the live probe just read, when it ran and answered.
async fn database(shared: &AppState) -> (bool, Value, Option<DatabaseIdentity>) {
    let (ok, json) = match shared.api.status.database() {
        DatabaseState::Memory => (
            true,
            json!({
                "ok": true,
                "state": "memory",
                "durable": false,
                "warning": MEMORY_WARNING,
            }),
        ),
        DatabaseState::Embedded {
            database_id,
            endpoint,
        } => {
            let live = shared.probe.check(shared.api.authority.as_ref()).await;
            let problem = match &live {
                Err(reason) => Some(reason.clone()),
                Ok(now) if now.database_id.to_string() != database_id => Some(format!(
                    "the data directory's database now has id {}, but {database_id} was \
                     opened; it was replaced",
                    now.database_id
                )),
                Ok(_) => None,
            };
            let json = match &problem {
                None => json!({
                    "ok": true,
                    "state": "embedded",
                    "durable": true,
                    "database_id": database_id,
                    "endpoint": endpoint,
                    "note": EMBEDDED_NOTE,
                }),
                Some(reason) => json!({
                    "ok": false,
                    "state": "failing",
                    "reason": reason,
                    "endpoint": endpoint,
                }),
            };
            return (problem.is_none(), json, live.ok());
        }
        DatabaseState::Unknown => (
            false,
            json!({
                "ok": false,
                "state": "unknown",
                "reason": "the database identity has not been checked yet (starting up)",
            }),
        ),
        DatabaseState::Failing { reason } => (
            false,
            json!({ "ok": false, "state": "failing", "reason": reason }),
        ),
        DatabaseState::Verified {
            database_id,
            system_identifier,
            endpoint,
        } => {
            let live = shared.probe.check(shared.api.authority.as_ref()).await;
            let problem = match &live {
                Err(reason) => Some(reason.clone()),
                Ok(now) if now.in_recovery => Some(format!(
                    "the server at {} is now in recovery (a standby); leases need the primary",
                    now.endpoint
                )),
                Ok(now) if now.database_id.to_string() != database_id => Some(format!(
                    "the database at {} now has id {}, but {database_id} was verified; \
                     it was replaced or the URL points elsewhere",
                    now.endpoint, now.database_id
                )),
                Ok(_) => None,
            };
            let tls = tls(shared);
            let (ok, json) = match problem {
                None => (
                    true,
                    json!({
                        "ok": true,
                        "state": "verified",
                        "database_id": database_id,
                        "system_identifier": system_identifier,
                        "endpoint": endpoint,
                        "tls": tls,
                    }),
                ),
                Some(reason) => (
                    false,
                    json!({
                        "ok": false,
                        "state": "failing",
                        "reason": reason,
                        "endpoint": endpoint,
                    }),
                ),
            };
            return (ok, json, live.ok());
        }
    };
    (ok, json, None)
}

/// Whether the database sessions are encrypted: `{"encrypted", "mode"}`
/// of the main pool (`encrypted` null before its first session), and
/// `sessions_encrypted` for the dedicated sessions.
fn tls(shared: &AppState) -> Value {
    let pools = shared.host.pool_stats();
    match pools.first() {
        Some(main) => json!({
            "encrypted": main.encrypted,
            "sessions_encrypted": main.session_encrypted,
            "mode": main.tls,
        }),
        None => Value::Null,
    }
}

/// The controllers whose reconciles keep failing, by name, with their run
/// of failures and last error (readiness is not affected: the replica
/// still serves and leads).
fn degraded(shared: &AppState) -> Value {
    let now = tokio::time::Instant::now();
    shared
        .api
        .status
        .controllers()
        .iter()
        .filter_map(|c| {
            let degraded = c.metrics.health.degraded(now)?;
            Some((c.name.clone(), json!(degraded)))
        })
        .collect::<serde_json::Map<String, Value>>()
        .into()
}

/// The writes check: a session opened now accepts writes. Read from the
/// live probe (its session is a fresh one whenever a read-only answer
/// retired the older ones, see [`crate::session`]).
fn writes(memory: bool, live: Option<&DatabaseIdentity>) -> (bool, Value) {
    match live {
        _ if memory => (true, json!({ "ok": true, "state": "accepted" })),
        Some(identity) if identity.read_only => (
            false,
            json!({
                "ok": false,
                "state": "refused",
                "sqlstate": "25006",
                "reason": read_only_reason(&identity.endpoint),
            }),
        ),
        Some(_) => (true, json!({ "ok": true, "state": "accepted" })),
        None => (
            false,
            json!({
                "ok": false,
                "state": "unknown",
                "reason": "whether the database accepts writes is unknown while the database check fails",
            }),
        ),
    }
}

/// The holder check: no other live host runs as this holder.
fn holder(claim: Option<ClaimState>) -> (bool, Value) {
    match claim {
        None => (
            true,
            json!({
                "ok": true,
                "state": "not_needed",
                "reason": "the backend serves one process; no other host can run as this holder",
            }),
        ),
        Some(ClaimState::Claimed) => (true, json!({ "ok": true, "state": "claimed" })),
        Some(ClaimState::Pending) => (
            false,
            json!({
                "ok": false,
                "state": "pending",
                "reason": "the holder name is being claimed (starting up)",
            }),
        ),
        Some(ClaimState::Taken { reason }) => (
            false,
            json!({ "ok": false, "state": "taken", "reason": reason }),
        ),
        Some(ClaimState::Unreachable { reason }) => (
            false,
            json!({ "ok": false, "state": "unclaimed", "reason": reason }),
        ),
        Some(ClaimState::WrongDatabase { reason }) => (
            false,
            json!({ "ok": false, "state": "wrong_database", "reason": reason }),
        ),
    }
}

/// The controllers check: none is failing (unable to lead or stand by).
fn controllers_check(states: &[(String, ControllerState)]) -> (bool, Value) {
    let failing: serde_json::Map<String, Value> = states
        .iter()
        .filter_map(|(name, state)| match state {
            ControllerState::Failing { reason } => Some((name.clone(), json!(reason))),
            _ => None,
        })
        .collect();
    if failing.is_empty() {
        (true, json!({ "ok": true }))
    } else {
        let names: Vec<&str> = failing.keys().map(String::as_str).collect();
        (
            false,
            json!({
                "ok": false,
                "reason": format!("controllers that cannot lead: {}", names.join(", ")),
                "failing": failing,
            }),
        )
    }
}

/// `GET /readyz`: 200 when the database check passes, else 503; the body
/// names every check (see the module documentation of [`super`]).
pub(super) async fn readyz(State(shared): State<AppState>) -> (StatusCode, Json<Value>) {
    let (database_ok, database, live) = database(&shared).await;
    let memory = matches!(shared.api.status.database(), DatabaseState::Memory);
    let (writes_ok, writes) = writes(memory, live.as_ref());
    let (holder_ok, holder) = holder(shared.api.status.holder_claim());
    let states: Vec<(String, ControllerState)> = shared
        .api
        .status
        .controllers()
        .iter()
        .map(|controller| (controller.name.clone(), controller.get()))
        .collect();
    let (controllers_ok, controllers_check) = controllers_check(&states);
    let controllers: serde_json::Map<String, Value> = states
        .into_iter()
        .map(|(name, state)| {
            let state = serde_json::to_value(state)
                .unwrap_or_else(|e| json!({ "state": "unknown", "reason": e.to_string() }));
            (name, state)
        })
        .collect();
    let failed: Vec<&str> = [
        ("database", database_ok),
        ("writes", writes_ok),
        ("holder", holder_ok),
        ("controllers", controllers_ok),
    ]
    .into_iter()
    .filter_map(|(name, ok)| (!ok).then_some(name))
    .collect();
    let ready = failed.is_empty();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({
            "ready": ready,
            "failed": failed,
            "cluster": shared.api.cluster,
            "holder": shared.api.holder,
            "database": database,
            "checks": {
                "database": database,
                "writes": writes,
                "holder": holder,
                "controllers": controllers_check,
            },
            "controllers": controllers,
            "degraded": degraded(&shared),
        })),
    )
}
