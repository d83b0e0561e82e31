//! `GET /v1/leases` and `GET /v1/leases/{name}/history`, both in the list
//! envelope of [`super::page`]: leases by name (cursor: the name), tenures
//! newest first (cursor: the epoch, so `after=7` lists epochs below 7);
//! and `GET /v1/leases/{name}`, one lease as the list shows it.
//!
//! The JSON shapes are their own types ([`LeaseView`], [`TenureView`]),
//! apart from the authority's records, so renaming an internal field
//! cannot change the documented contract (`docs/contract.md`); a test
//! pins their field names.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::page::{self, ListPage};
use super::{AppState, rfc3339};
use crate::authority::{LeaseRecord, TenureRecord};
use crate::fence::{Epoch, LeaseKey};
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
    /// How the current tenure may be taken over if its holder dies:
    /// `"session"` or `"ttl"`.
    crash_detection: &'static str,
    /// The holder's liveness session the current grant was made under;
    /// `null` when unknown (a `ttl` grant, or one made before hosts
    /// recorded it).
    holder_session: Option<SessionView>,
    /// The last time lease placement moved this lease, and why; `null` if
    /// it never did.
    last_move: Option<MoveView>,
    /// The sharded controller and the shard this lease is, as this
    /// replica's config runs it; `null` when this replica does not run it
    /// as a shard.
    shard: Option<ShardView>,
}

/// A lease's shard in `GET /v1/leases`.
#[derive(Debug, Serialize)]
pub(super) struct ShardView {
    /// The sharded controller (`NAME` of `NAME-0 …`).
    controller: String,
    /// The shard's index, below `count`.
    index: u32,
    /// How many shards the controller runs as.
    count: u32,
}

/// A lease's last placement move in `GET /v1/leases`.
#[derive(Debug, Serialize)]
pub(super) struct MoveView {
    /// `"over_share"`, `"no_other_host"` or `"lapsed"`.
    reason: &'static str,
    /// When the grant that completed the move was made (database clock).
    at: String,
    /// The holder it moved from; `null` when that grant was its first.
    from: Option<String>,
    /// The holder it moved to.
    to: String,
}

/// A holder's liveness session in `GET /v1/leases`.
#[derive(Debug, Serialize)]
pub(super) struct SessionView {
    /// The session's server process id.
    pid: i32,
    /// When it started; `null` unless its host registered that session.
    backend_start: Option<String>,
}

impl LeaseView {
    fn new(record: LeaseRecord, status: &Status) -> Self {
        Self {
            shard: status
                .shard_of(&record.name)
                .map(|(controller, shard)| ShardView {
                    controller,
                    index: shard.index,
                    count: shard.count,
                }),
            held_here: record.active && status.leads_at(&record.name, record.epoch.0),
            active: record.active,
            name: record.name,
            holder: record.holder,
            epoch: record.epoch.0,
            acquired_at: rfc3339(record.acquired_at),
            expires_at: rfc3339(record.expires_at),
            crash_detection: record.crash_detection.as_str(),
            holder_session: record.holder_session.map(|session| SessionView {
                pid: session.pid,
                backend_start: session.backend_start.map(rfc3339),
            }),
            last_move: record.last_move.map(|moved| MoveView {
                reason: moved.reason.as_str(),
                at: rfc3339(moved.at),
                from: moved.from,
                to: moved.to,
            }),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct LeasesQuery {
    after: Option<String>,
    limit: Option<String>,
}

/// `GET /v1/leases`: one page of leases, by name.
pub(super) type LeasesPage = ListPage<LeaseView, String>;

pub(super) async fn list(
    State(shared): State<AppState>,
    query: Result<Query<LeasesQuery>, QueryRejection>,
) -> Result<Json<LeasesPage>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    if let Some(after) = query.after.as_deref() {
        check_label("lease name (after)", after)?;
    }
    let limit = page::limit(query.limit.as_deref())?;
    // The authority answers every lease of the cluster at once (bounded by
    // the controllers a cluster can run); the page is cut here.
    let mut records = shared.api.authority.observe(&shared.api.cluster).await?;
    records.retain(|r| {
        query
            .after
            .as_deref()
            .is_none_or(|after| r.name.as_str() > after)
    });
    records.sort_by(|a, b| a.name.cmp(&b.name));
    records.truncate(limit + 1);
    let leases = records
        .into_iter()
        .map(|r| LeaseView::new(r, &shared.api.status))
        .collect();
    Ok(Json(ListPage::from_one_more(leases, limit, |l| {
        l.name.clone()
    })))
}

/// `GET /v1/leases/{name}`: one lease, as `GET /v1/leases` lists it; 404
/// for a lease never granted.
pub(super) async fn get(
    State(shared): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<LeaseView>, ApiError> {
    let Path(name) = name.map_err(|e| ApiError::invalid(e.body_text()))?;
    check_label("lease", &name)?;
    let record = shared
        .api
        .authority
        .observe(&shared.api.cluster)
        .await?
        .into_iter()
        .find(|r| r.name == name)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "lease {name} of cluster {} was never granted",
                shared.api.cluster
            ))
        })?;
    Ok(Json(LeaseView::new(record, &shared.api.status)))
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
    outbound_requests: u64,
    last_outbound_at: Option<String>,
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
            outbound_requests: t.outbound_requests,
            last_outbound_at: t.last_outbound_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct HistoryQuery {
    after: Option<String>,
    limit: Option<String>,
}

/// `GET /v1/leases/{name}/history`: one page of tenures, newest first.
pub(super) type HistoryPage = ListPage<TenureView, u64>;

pub(super) async fn history(
    State(shared): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<HistoryPage>, ApiError> {
    let Path(name) = name.map_err(|e| ApiError::invalid(e.body_text()))?;
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    check_label("lease", &name)?;
    let after = page::number_after(query.after.as_deref(), "a tenure's epoch")?;
    let limit = page::limit(query.limit.as_deref())?;
    let key = LeaseKey::new(shared.api.cluster.clone(), name);
    // One more than the page shows, below the cursor's epoch: `next` is
    // null exactly when nothing older exists.
    let tenures = shared
        .api
        .authority
        .history_before(&key, after.map(Epoch), limit + 1)
        .await?;
    let tenures = tenures.into_iter().map(TenureView::from).collect();
    Ok(Json(ListPage::from_one_more(tenures, limit, |t| t.epoch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::{CrashDetection, EndReason, HolderSession, MoveReason, PlacementMove};
    use crate::fence::Epoch;

    fn sorted_keys(value: &serde_json::Value) -> Vec<String> {
        let mut keys: Vec<String> = value
            .as_object()
            .expect("an object")
            .keys()
            .cloned()
            .collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn lease_and_history_json_keep_the_documented_field_names() {
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let status = Status::new("east".into(), "host-a".into(), &["scheduler".to_string()]);
        let lease = LeaseRecord {
            name: "scheduler".into(),
            holder: "host-a".into(),
            epoch: Epoch(7),
            acquired_at: at,
            expires_at: at,
            released: false,
            active: true,
            crash_detection: CrashDetection::Session,
            holder_session: Some(HolderSession {
                pid: 4242,
                backend_start: Some(at),
            }),
            last_move: Some(PlacementMove {
                reason: MoveReason::Lapsed,
                at,
                from: None,
                to: "host-a".into(),
            }),
        };
        let json = serde_json::to_value(LeaseView::new(lease.clone(), &status)).unwrap();
        assert_eq!(
            sorted_keys(&json),
            [
                "acquired_at",
                "active",
                "crash_detection",
                "epoch",
                "expires_at",
                "held_here",
                "holder",
                "holder_session",
                "last_move",
                "name",
                "shard"
            ]
        );
        assert_eq!(
            sorted_keys(&json["last_move"]),
            ["at", "from", "reason", "to"]
        );
        assert_eq!(json["last_move"]["reason"], "lapsed");
        assert_eq!(json["last_move"]["at"], json["acquired_at"]);
        assert!(json["last_move"]["from"].is_null(), "{json}");
        assert_eq!(json["last_move"]["to"], "host-a");
        assert_eq!(json["epoch"], 7);
        assert_eq!(json["crash_detection"], "session");
        assert_eq!(
            sorted_keys(&json["holder_session"]),
            ["backend_start", "pid"]
        );
        assert_eq!(json["holder_session"]["pid"], 4242);
        assert_eq!(json["holder_session"]["backend_start"], json["acquired_at"]);
        let ttl = LeaseRecord {
            crash_detection: CrashDetection::Ttl,
            holder_session: None,
            last_move: None,
            ..lease.clone()
        };
        let json = serde_json::to_value(LeaseView::new(ttl, &status)).unwrap();
        assert_eq!(json["crash_detection"], "ttl");
        assert!(json["holder_session"].is_null(), "{json}");
        assert!(json["last_move"].is_null(), "{json}");
        // Not led by this replica's supervisor, whatever the holder name.
        assert_eq!(json["held_here"], false);
        status
            .controller("scheduler")
            .unwrap()
            .set(crate::status::ControllerState::Leading {
                epoch: 7,
                problem: None,
            });
        let json = serde_json::to_value(LeaseView::new(lease.clone(), &status)).unwrap();
        assert_eq!(json["held_here"], true);

        let tenure = TenureRecord {
            epoch: Epoch(7),
            holder: "host-a".into(),
            endpoint: "postgres://u@db/x".into(),
            acquired_at: at,
            ended_at: None,
            end_reason: Some(EndReason::Lost),
            writes: 3,
            last_write_at: Some(at),
            outbound_requests: 4,
            last_outbound_at: Some(at),
        };
        let json = serde_json::to_value(TenureView::from(tenure)).unwrap();
        assert_eq!(
            sorted_keys(&json),
            [
                "acquired_at",
                "end_reason",
                "ended_at",
                "endpoint",
                "epoch",
                "holder",
                "last_outbound_at",
                "last_write_at",
                "outbound_requests",
                "writes"
            ]
        );
        assert_eq!(json["end_reason"], "lost");
        assert_eq!(json["writes"], 3);
        assert_eq!(json["outbound_requests"], 4);
        assert_eq!(json["last_outbound_at"], json["last_write_at"]);
        assert!(json["last_outbound_at"].is_string());
    }
}
