//! `/v1/objects`: versioned user writes and reads.
//!
//! Writes here are the "versioned API writes" of the store: not fenced
//! (users hold no lease), but optionally conditional on the version read,
//! which is how a user edits an object a controller may also be changing.
//!
//! Every failed precondition is 409 `conflict` (the project's contract; RFC
//! 9110 would say 412), whether the object is at another version or absent:
//! `If-Match: 7` on an absent object is a failed precondition, not a 404.
//! Only a request without a precondition gets 404 for an absent object.
//! `If-Match: *` means "must exist" and behaves the same on every backend
//! under contention: writers racing on an existing object all succeed, one
//! after the other, as they would without the header.

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Grant;
use super::error::ApiError;
use super::page::{self, ListPage};
use crate::limits::{HTTP_BODY_BYTES, PUT_ATTEMPTS};
use crate::names::check_label;
use crate::store::{ApiWrite, Metadata, Object, ObjectKey, Selector, StoreError, Written};
use crate::telemetry::{self, TraceParent};
use leasehold_model::json;
use tracing::Instrument;

/// Longest an `If-Match: *` write keeps retrying while other writers keep
/// changing the object. Each retry follows another writer's commit (so
/// writers as a whole always progress), and the memory backend never
/// retries at all; this only bounds one request under endless contention.
/// The same bound as any single database statement.
const EXISTS_RETRY_BUDGET: std::time::Duration = crate::timeouts::DATABASE_STATEMENT;

/// An object as the API shows it: `value` and `status` are the stored JSON
/// itself.
#[derive(Debug, Serialize)]
pub(super) struct ObjectView {
    kind: String,
    name: String,
    version: u64,
    value: serde_json::Value,
    generation: u64,
    labels: std::collections::BTreeMap<String, String>,
    owner: Option<ObjectKey>,
    finalizers: Vec<String>,
    deleting_since: Option<String>,
    status: serde_json::Value,
}

/// The media type of a `PUT` body that carries metadata beside the value.
pub(super) const OBJECT_MEDIA_TYPE: &str = "application/vnd.leasehold.object+json";

/// A `PUT` body of [`OBJECT_MEDIA_TYPE`]: the value and the whole metadata
/// (absent fields are empty).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectBody {
    value: serde_json::Value,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    owner: Option<OwnerBody>,
    #[serde(default)]
    finalizers: Vec<String>,
}

/// An owner reference in a request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnerBody {
    kind: String,
    name: String,
}

impl TryFrom<Object> for ObjectView {
    type Error = ApiError;

    fn try_from(object: Object) -> Result<Self, ApiError> {
        let corrupt = |part: &str, e: serde_json::Error| {
            ApiError::internal(format!(
                "stored {part} of {}/{} is not JSON ({e}); the store is corrupt",
                object.kind, object.name
            ))
        };
        let value = serde_json::from_str(&object.value).map_err(|e| corrupt("value", e))?;
        let status = match &object.status {
            Some(text) => serde_json::from_str(text).map_err(|e| corrupt("status", e))?,
            None => serde_json::Value::Null,
        };
        Ok(Self {
            kind: object.kind,
            name: object.name,
            version: object.version,
            value,
            generation: object.generation,
            labels: object.meta.labels,
            owner: object.meta.owner,
            finalizers: object.meta.finalizers,
            deleting_since: object
                .deleting_since
                .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
            status,
        })
    }
}

/// The object with its version as a strong `ETag`, which `If-Match`
/// accepts back as it is.
fn respond(status: StatusCode, object: Object) -> Result<Response, ApiError> {
    let etag = HeaderValue::from_str(&format!("\"{}\"", object.version))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let view = ObjectView::try_from(object)?;
    Ok((status, [(header::ETAG, etag)], Json(view)).into_response())
}

fn key(path: Result<Path<(String, String)>, PathRejection>) -> Result<ObjectKey, ApiError> {
    let Path((kind, name)) = path.map_err(|e| ApiError::invalid(e.body_text()))?;
    check_label("object kind", &kind)?;
    check_label("object name", &name)?;
    Ok(ObjectKey { kind, name })
}

/// A write's condition on the current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precondition {
    /// None given.
    Any,
    /// The object must be at this version; 0 means it must not exist.
    Version(u64),
    /// The object must exist (`If-Match: *`).
    Exists,
}

fn one_header(headers: &HeaderMap, name: header::HeaderName) -> Result<Option<&str>, ApiError> {
    let mut values = headers.get_all(&name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid(format!("give {name} once")));
    }
    let text = first
        .to_str()
        .map_err(|_| ApiError::invalid(format!("{name} must be ASCII")))?;
    Ok(Some(text.trim()))
}

fn precondition(headers: &HeaderMap) -> Result<Precondition, ApiError> {
    let if_match = one_header(headers, header::IF_MATCH)?;
    let if_none_match = one_header(headers, header::IF_NONE_MATCH)?;
    match (if_match, if_none_match) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "give If-Match or If-None-Match, not both",
        )),
        (None, None) => Ok(Precondition::Any),
        (None, Some("*")) => Ok(Precondition::Version(0)),
        (None, Some(other)) => Err(ApiError::invalid(format!(
            "If-None-Match {other:?} is not supported; only `*` (create only if absent)"
        ))),
        (Some("*"), None) => Ok(Precondition::Exists),
        (Some(text), None) => {
            // Versions are strong validators: a weak `W/"7"` does not
            // identify one version and is refused.
            let unquoted = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(text);
            unquoted
                .parse::<u64>()
                .map(Precondition::Version)
                .map_err(|_| {
                    ApiError::invalid(format!(
                        "If-Match {text:?} is not a version; give one version number such as 7 or \"7\", or *"
                    ))
                })
        }
    }
}

pub(super) async fn get(
    State(shared): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let key = key(path)?;
    match shared.api.store.get(&shared.api.cluster, &key).await? {
        Some(object) => respond(StatusCode::OK, object),
        None => Err(ApiError::not_found(format!("{key} not found"))),
    }
}

/// The query of `GET /v1/objects/{kind}`: paging, and a selector.
#[derive(Debug, Default)]
struct ListQuery {
    after: Option<String>,
    limit: Option<String>,
    selector: Selector,
}

impl ListQuery {
    /// Read from the query's pairs (percent-decoded, in order): `after`,
    /// `limit` and `contains` at most once each, `label=KEY=VALUE` any
    /// number of times with each key once. Other parameters are ignored,
    /// as by every list of the API. The selector's bounds and label syntax
    /// are the store's to check (the same 400 whichever backend).
    fn parse(pairs: Vec<(String, String)>) -> Result<Self, ApiError> {
        let mut query = ListQuery::default();
        let mut contains: Option<String> = None;
        for (name, text) in pairs {
            match name.as_str() {
                "after" => page::set_once(&mut query.after, &name, text)?,
                "limit" => page::set_once(&mut query.limit, &name, text)?,
                "contains" => page::set_once(&mut contains, &name, text)?,
                "label" => {
                    let Some((key, value)) = text.split_once('=') else {
                        return Err(ApiError::invalid(format!(
                            "label {:?} must be KEY=VALUE (an empty VALUE selects the label set \
                             to the empty string)",
                            shown(&text)
                        )));
                    };
                    if query.selector.labels.contains_key(key) {
                        return Err(ApiError::invalid(format!(
                            "label {:?} is selected more than once",
                            shown(key)
                        )));
                    }
                    query
                        .selector
                        .labels
                        .insert(key.to_string(), value.to_string());
                }
                _ => {}
            }
        }
        // The request line's own bound keeps the text short; its size as
        // compact JSON and its depth are the store's to check.
        if let Some(text) = contains {
            // The store's JSON rules, before the text becomes a value: an
            // integer beyond 64 bits would otherwise be rounded unseen.
            let value = json::parse(&text).map_err(|refusal| match refusal {
                json::Refusal::NotJson(e) => ApiError::invalid(format!(
                    "contains must be JSON (URL-encoded), such as {{\"status\":\"pending\"}}: {e}"
                )),
                other => ApiError::invalid(format!("contains {other}")),
            })?;
            query.selector.contains = Some(value);
        }
        Ok(query)
    }
}

/// Text quoted into an error, cut short so a huge input stays out of it.
fn shown(text: &str) -> String {
    text.chars().take(80).collect()
}

/// `GET /v1/objects/{kind}`: one page of objects, by name.
pub(super) type ObjectsPage = ListPage<ObjectView, String>;

/// `GET /v1/objects/{kind}[?after=NAME][&limit=N][&label=KEY=VALUE...][&contains=JSON]`:
/// one page of the kind's objects that carry every label given and whose
/// value contains `contains` ([`Selector`]), in name order.
pub(super) async fn list(
    State(shared): State<AppState>,
    kind: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<ObjectsPage>, ApiError> {
    let Path(kind) = kind.map_err(|e| ApiError::invalid(e.body_text()))?;
    let Query(pairs) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    check_label("object kind", &kind)?;
    let query = ListQuery::parse(pairs)?;
    if let Some(after) = query.after.as_deref() {
        check_label("object name (after)", after)?;
    }
    let limit = page::limit(query.limit.as_deref())?;
    let page = shared
        .api
        .store
        .list_selected(
            &shared.api.cluster,
            &kind,
            &query.selector,
            query.after.as_deref(),
            limit,
        )
        .await?;
    let items = page
        .objects
        .into_iter()
        .map(ObjectView::try_from)
        .collect::<Result<_, _>>()?;
    Ok(Json(ListPage {
        items,
        next: page.next,
    }))
}

/// A request body as JSON under the store's rules
/// ([`leasehold_model::json`]): not JSON, a wide integer or a NUL
/// character is 400, as the store would answer, never a value rounded or
/// a backend's failure.
fn body_json(body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::invalid(format!("the body is not JSON: {e}")))?;
    json::parse(text).map_err(|refusal| ApiError::invalid(format!("the body {refusal}")))
}

fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(format!(
            "the request body is larger than {HTTP_BODY_BYTES} bytes"
        ))
    } else {
        ApiError::invalid(format!(
            "cannot read the request body: {}",
            rejection.body_text()
        ))
    }
}

/// The kind and name a write's path gives, for its span.
fn object_names(path: &Result<Path<(String, String)>, PathRejection>) -> Option<(String, String)> {
    path.as_ref().ok().map(|Path(names)| names.clone())
}

/// Run an API write (`method` on the object `names`), recorded as made by
/// `token` (the name of the token the request carried), inside its
/// `api.write` span, with the trace context the store records beside its
/// changes: that span's when traces are exported, else the request's own
/// `traceparent` as it came (so a leader exporting traces still joins the
/// caller's trace). A missing, repeated or malformed `traceparent` is no
/// context, never an error.
async fn traced(
    token: Option<String>,
    method: &'static str,
    names: Option<(String, String)>,
    headers: &HeaderMap,
    write: impl std::future::Future<Output = Result<Response, ApiError>>,
) -> Result<Response, ApiError> {
    let mut values = headers.get_all(telemetry::TRACEPARENT).iter();
    let parent = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().and_then(TraceParent::parse),
        _ => None,
    };
    let span = match &names {
        Some((kind, name)) => telemetry::api_write_span(method, kind, name, parent.as_ref()),
        None => tracing::Span::none(),
    };
    let context = TraceParent::of_span(&span).or(parent);
    let result = telemetry::with_write_context(context, crate::store::with_api_token(token, write))
        .instrument(span.clone())
        .await;
    let status = match &result {
        Ok(response) => response.status(),
        Err(error) => error.status,
    };
    span.record("http.status", status.as_u16());
    result
}

pub(super) async fn put(
    State(shared): State<AppState>,
    grant: Option<Extension<Grant>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let names = object_names(&path);
    traced(
        grant.map(|Extension(g)| g.name.to_string()),
        "PUT",
        names,
        &headers,
        put_untraced(&shared, path, &headers, body),
    )
    .await
}

async fn put_untraced(
    shared: &AppState,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = key(path)?;
    let condition = precondition(headers)?;
    let body = body.map_err(body_error)?;
    if carries_metadata(headers)? {
        return put_with_metadata(shared, key, condition, &body).await;
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "the body must be the object's JSON value, e.g. {\"capacity\": 2}",
        ));
    }
    let text = body_json(&body)?.to_string();
    let store = &shared.api.store;
    let cluster = &shared.api.cluster;

    let created = |object| respond(StatusCode::CREATED, object);
    let replaced = |object| respond(StatusCode::OK, object);
    match condition {
        Precondition::Version(0) => {
            let object = store.put(cluster, &key, &text, Some(0)).await?;
            created(object)
        }
        Precondition::Version(version) => {
            let object = store
                .put(cluster, &key, &text, Some(version))
                .await
                .map_err(|e| absent_is_a_conflict(e, version))?;
            replaced(object)
        }
        Precondition::Exists => replaced(put_existing(store.as_ref(), cluster, &key, &text).await?),
        Precondition::Any => {
            // Write conditionally on the version just read, so the answer
            // can say truthfully whether this request created the object.
            for _ in 0..PUT_ATTEMPTS {
                let expected = store.get(cluster, &key).await?.map_or(0, |o| o.version);
                match store.put(cluster, &key, &text, Some(expected)).await {
                    Ok(object) if expected == 0 => return created(object),
                    Ok(object) => return replaced(object),
                    // Someone wrote in between: read again.
                    Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let object = store.put(cluster, &key, &text, None).await?;
            replaced(object)
        }
    }
}

/// Whether a `PUT` body is [`OBJECT_MEDIA_TYPE`] (parameters such as
/// `charset` aside) rather than the bare value.
fn carries_metadata(headers: &HeaderMap) -> Result<bool, ApiError> {
    let Some(media) = one_header(headers, header::CONTENT_TYPE)? else {
        return Ok(false);
    };
    let essence = media.split(';').next().unwrap_or_default().trim();
    Ok(essence.eq_ignore_ascii_case(OBJECT_MEDIA_TYPE))
}

/// `PUT` of `{"value", "labels", "owner", "finalizers"}`: value and
/// metadata in one write. 201 created, 200 replaced, 204 when the write
/// removed the last finalizer of an object marked for deletion (it is
/// gone).
async fn put_with_metadata(
    shared: &AppState,
    key: ObjectKey,
    condition: Precondition,
    body: &[u8],
) -> Result<Response, ApiError> {
    // The whole body under the store's JSON rules first: the value is
    // read into a `serde_json::Value`, which would round a wide integer.
    body_json(body)?;
    let parsed: ObjectBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(format!(
            "a {OBJECT_MEDIA_TYPE} body is {{\"value\", \"labels\", \"owner\", \"finalizers\"}}: {e}"
        ))
    })?;
    let meta = Metadata {
        labels: parsed.labels,
        owner: parsed.owner.map(|o| ObjectKey {
            kind: o.kind,
            name: o.name,
        }),
        finalizers: parsed.finalizers,
    };
    let value = parsed.value.to_string();
    let store = &shared.api.store;
    let cluster = &shared.api.cluster;
    let write = |expected_version| ApiWrite::Put {
        key: key.clone(),
        value: value.clone(),
        meta: Some(meta.clone()),
        expected_version,
    };
    let written = match condition {
        Precondition::Any => store.write(cluster, &write(None)).await?,
        Precondition::Version(0) => store.write(cluster, &write(Some(0))).await?,
        Precondition::Version(version) => store
            .write(cluster, &write(Some(version)))
            .await
            .map_err(|e| absent_is_a_conflict(e, version))?,
        Precondition::Exists => {
            let started = tokio::time::Instant::now();
            loop {
                let Some(current) = store.get(cluster, &key).await? else {
                    return Err(must_exist(&key));
                };
                match store.write(cluster, &write(Some(current.version))).await {
                    Ok(written) => break written,
                    Err(StoreError::NotFound { .. }) => return Err(must_exist(&key)),
                    Err(StoreError::Conflict { .. }) if started.elapsed() < EXISTS_RETRY_BUDGET => {
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    answer(written)
}

/// The answer to a write: 201 created, 200 replaced, 202 marked for
/// deletion (finalizers hold it), 204 removed.
fn answer(written: Written) -> Result<Response, ApiError> {
    match written {
        Written::Created(object) => respond(StatusCode::CREATED, object),
        Written::Replaced(object) => respond(StatusCode::OK, object),
        Written::Marked(object) => respond(StatusCode::ACCEPTED, object),
        Written::Removed => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

fn must_exist(key: &ObjectKey) -> ApiError {
    ApiError::conflict(format!(
        "{key} does not exist, and If-Match: * requires that it does"
    ))
}

#[derive(Debug, Deserialize)]
pub(super) struct StatusQuery {
    generation: Option<String>,
}

/// `PUT /v1/objects/{kind}/{name}/status`: write the status part (any
/// JSON; `null` clears it), leaving value, metadata and generation as they
/// are; with `?generation=G` only while the object is at generation `G`.
pub(super) async fn put_status(
    State(shared): State<AppState>,
    grant: Option<Extension<Grant>>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<StatusQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let names = object_names(&path);
    traced(
        grant.map(|Extension(g)| g.name.to_string()),
        "PUT",
        names,
        &headers,
        put_status_untraced(&shared, path, query, &headers, body),
    )
    .await
}

async fn put_status_untraced(
    shared: &AppState,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<StatusQuery>, QueryRejection>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = key(path)?;
    // A status write's one precondition is the generation it was computed
    // from (as a guest's): a version precondition it would not honour is
    // refused, never ignored.
    if precondition(headers)? != Precondition::Any {
        return Err(ApiError::invalid(
            "a status write is conditional on the generation only: give ?generation=G; \
             If-Match and If-None-Match are refused here",
        ));
    }
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let expected_generation = query
        .generation
        .as_deref()
        .map(|text| {
            text.parse::<u64>().ok().filter(|g| *g >= 1).ok_or_else(|| {
                ApiError::invalid(format!(
                    "generation {text:?} is not a generation; give a number from 1, as an object's `generation` shows it"
                ))
            })
        })
        .transpose()?;
    let body = body.map_err(body_error)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "the body must be the status as JSON, e.g. {\"ready\": true}, or null to clear it",
        ));
    }
    let status = body_json(&body)?;
    let status = (!status.is_null()).then(|| status.to_string());
    let written = shared
        .api
        .store
        .write(
            &shared.api.cluster,
            &ApiWrite::Status {
                key,
                status,
                expected_generation,
            },
        )
        .await?;
    answer(written)
}

/// `If-Match: *`: replace `key` only if it exists. Each attempt writes
/// conditionally on the version just read, so the write that lands proves
/// the object existed when it committed; a version conflict means another
/// writer committed in between (the object still existed), so read again.
/// Absent, now or at the write: 409.
async fn put_existing(
    store: &dyn crate::store::Store,
    cluster: &str,
    key: &ObjectKey,
    text: &str,
) -> Result<Object, ApiError> {
    let absent = || {
        ApiError::conflict(format!(
            "{key} does not exist, and If-Match: * requires that it does; create it without \
             If-Match (or with If-None-Match: *)"
        ))
    };
    let started = tokio::time::Instant::now();
    loop {
        let Some(current) = store.get(cluster, key).await? else {
            return Err(absent());
        };
        match store.put(cluster, key, text, Some(current.version)).await {
            Ok(object) => return Ok(object),
            Err(StoreError::NotFound { .. }) => return Err(absent()),
            Err(StoreError::Conflict { .. }) if started.elapsed() < EXISTS_RETRY_BUDGET => {}
            Err(StoreError::Conflict { .. }) => {
                return Err(ApiError::conflict(format!(
                    "{key} kept changing for {} while this If-Match: * write retried; try again",
                    humantime::format_duration(EXISTS_RETRY_BUDGET)
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A write conditional on `version` that found no object failed its
/// precondition: 409 like any other, not 404.
fn absent_is_a_conflict(error: StoreError, version: u64) -> ApiError {
    match error {
        StoreError::NotFound { key } => ApiError::conflict(format!(
            "{key} does not exist, and If-Match: {version} requires version {version}; read it \
             again (GET) before writing"
        )),
        other => other.into(),
    }
}

pub(super) async fn delete(
    State(shared): State<AppState>,
    grant: Option<Extension<Grant>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let names = object_names(&path);
    traced(
        grant.map(|Extension(g)| g.name.to_string()),
        "DELETE",
        names,
        &headers,
        delete_untraced(&shared, path, &headers),
    )
    .await
}

async fn delete_untraced(
    shared: &AppState,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let key = key(path)?;
    let condition = precondition(headers)?;
    let expected = match condition {
        Precondition::Any | Precondition::Exists => None,
        Precondition::Version(0) => {
            return Err(ApiError::invalid(
                "If-Match: 0 / If-None-Match: * mean \"must not exist\", which a DELETE cannot meet",
            ));
        }
        Precondition::Version(version) => Some(version),
    };
    let deleted = shared
        .api
        .store
        .write(
            &shared.api.cluster,
            &ApiWrite::Delete {
                key,
                expected_version: expected,
            },
        )
        .await;
    match (deleted, condition) {
        (Ok(written), _) => answer(written),
        (Err(e), Precondition::Version(version)) => Err(absent_is_a_conflict(e, version)),
        (Err(StoreError::NotFound { key }), Precondition::Exists) => Err(must_exist(&key)),
        (Err(e), _) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn preconditions_parse_from_headers() {
        assert_eq!(precondition(&headers(&[])), Ok(Precondition::Any));
        assert_eq!(
            precondition(&headers(&[(header::IF_MATCH, "7")])),
            Ok(Precondition::Version(7))
        );
        assert_eq!(
            precondition(&headers(&[(header::IF_MATCH, "\"7\"")])),
            Ok(Precondition::Version(7))
        );
        assert_eq!(
            precondition(&headers(&[(header::IF_MATCH, "0")])),
            Ok(Precondition::Version(0))
        );
        assert_eq!(
            precondition(&headers(&[(header::IF_NONE_MATCH, "*")])),
            Ok(Precondition::Version(0))
        );
        assert_eq!(
            precondition(&headers(&[(header::IF_MATCH, "*")])),
            Ok(Precondition::Exists)
        );
        for bad in [
            vec![(header::IF_MATCH, "W/\"7\"")],
            vec![(header::IF_MATCH, "7, 8")],
            vec![(header::IF_MATCH, "seven")],
            vec![(header::IF_MATCH, "7"), (header::IF_MATCH, "8")],
            vec![(header::IF_NONE_MATCH, "7")],
            vec![(header::IF_MATCH, "7"), (header::IF_NONE_MATCH, "*")],
        ] {
            let error = precondition(&headers(&bad)).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
