//! `GET /v1/leases` and `GET /v1/leases/{name}/history`.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::{AppState, rfc3339};
use crate::authority::{LeaseRecord, TenureRecord};
use crate::fence::LeaseKey;
use crate::limits::MAX_HISTORY;
use crate::names::check_label;
use crate::status::Status;

/// One lease in `GET /v1/leases`.
#[derive(Debug, Serialize)]
pub(super) struct LeaseView {
    name: String,
    holder: String,
    epoch: u64,
    acquired_at: String,
    expires_at: String,
    /// This replica holds it now: its own supervisor leads this lease at
    /// this epoch (never inferred from the holder name, which another host
    /// might share).
    held_here: bool,
    /// Someone holds it now: not released and not expired.
    active: bool,
}

impl LeaseView {
    fn new(record: LeaseRecord, status: &Status) -> Self {
        Self {
            held_here: record.active && status.leads_at(&record.name, record.epoch.0),
            active: record.active,
            name: record.name,
            holder: record.holder,
            epoch: record.epoch.0,
            acquired_at: rfc3339(record.acquired_at),
            expires_at: rfc3339(record.expires_at),
        }
    }
}

pub(super) async fn list(State(shared): State<AppState>) -> Result<Json<Vec<LeaseView>>, ApiError> {
    let mut records = shared.api.authority.observe(&shared.api.cluster).await?;
    records.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(
        records
            .into_iter()
            .map(|r| LeaseView::new(r, &shared.api.status))
            .collect(),
    ))
}

/// One tenure in `GET /v1/leases/{name}/history`.
#[derive(Debug, Serialize)]
pub(super) struct TenureView {
    epoch: u64,
    holder: String,
    endpoint: String,
    acquired_at: String,
    ended_at: Option<String>,
    end_reason: Option<&'static str>,
    writes: u64,
    last_write_at: Option<String>,
}

impl From<TenureRecord> for TenureView {
    fn from(t: TenureRecord) -> Self {
        Self {
            epoch: t.epoch.0,
            holder: t.holder,
            endpoint: t.endpoint,
            acquired_at: rfc3339(t.acquired_at),
            ended_at: t.ended_at.map(rfc3339),
            end_reason: t.end_reason.map(|r| r.as_str()),
            writes: t.writes,
            last_write_at: t.last_write_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct HistoryQuery {
    limit: Option<String>,
}

pub(super) async fn history(
    State(shared): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<Vec<TenureView>>, ApiError> {
    let Path(name) = name.map_err(|e| ApiError::invalid(e.body_text()))?;
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    check_label("lease", &name)?;
    let limit = match query.limit.as_deref() {
        None => MAX_HISTORY,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_HISTORY).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(format!(
                    "limit {text:?} must be a number from 1 to {MAX_HISTORY}"
                )));
            }
        },
    };
    let key = LeaseKey::new(shared.api.cluster.clone(), name);
    let tenures = shared.api.authority.history(&key, limit).await?;
    Ok(Json(tenures.into_iter().map(TenureView::from).collect()))
}
