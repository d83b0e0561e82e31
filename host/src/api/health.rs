//! Liveness and readiness.
//!
//! Readiness combines what the supervisors last saw (the database identity
//! check in [`Status`](crate::status::Status)) with a cheap live probe of
//! the database, so a replica whose database went away stops being ready
//! within about a second, and becomes ready again on recovery without a
//! restart, whatever the supervisors are doing at that moment.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::AppState;
use crate::authority::{Authority, DatabaseIdentity};
use crate::status::DatabaseState;

/// What `/readyz` says about the embedded backend, every time, so nobody
/// mistakes a development host for a deployment.
pub(super) const EMBEDDED_WARNING: &str = "embedded in-memory backend: SINGLE PROCESS ONLY and NOT \
DURABLE; every lease, object and event is lost when this process exits, and another replica \
would lead the same controllers against its own separate memory. Configure [database] url for \
anything but development.";

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

/// The database check: whether it passes, and its JSON.
async fn database(shared: &AppState) -> (bool, Value) {
    match shared.api.status.database() {
        DatabaseState::Embedded => (
            true,
            json!({
                "ok": true,
                "state": "embedded",
                "durable": false,
                "warning": EMBEDDED_WARNING,
            }),
        ),
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
            match problem {
                None => (
                    true,
                    json!({
                        "ok": true,
                        "state": "verified",
                        "database_id": database_id,
                        "system_identifier": system_identifier,
                        "endpoint": endpoint,
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
            }
        }
    }
}

/// `GET /readyz`: 200 when the database check passes, else 503; the body
/// names every check (see the module documentation of [`super`]).
pub(super) async fn readyz(State(shared): State<AppState>) -> (StatusCode, Json<Value>) {
    let (ready, database) = database(&shared).await;
    let controllers: serde_json::Map<String, Value> = shared
        .api
        .status
        .controllers()
        .iter()
        .map(|controller| {
            let state = serde_json::to_value(controller.get())
                .unwrap_or_else(|e| json!({ "state": "unknown", "reason": e.to_string() }));
            (controller.name.clone(), state)
        })
        .collect();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({
            "ready": ready,
            "cluster": shared.api.cluster,
            "holder": shared.api.holder,
            "database": database,
            "controllers": controllers,
        })),
    )
}
