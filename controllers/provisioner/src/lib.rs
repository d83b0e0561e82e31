//! The example provisioner: makes buckets in an external "cloud" API match
//! the `buckets` objects in the store, over fenced outbound HTTP, and
//! deletes a bucket at the cloud before its object goes.
//!
//! It is the example of a controller whose effects leave the store: the
//! store's fence cannot undo a request a deposed leader already sent, so
//! the provisioner and the cloud split the work by the **fenced-receiver
//! rule** (see [`leasehold_guest::http`]): the host stamps every request
//! with the lease and epoch, the cloud refuses a lower epoch than it has
//! accepted (409) and deduplicates by `Idempotency-Key`, and the
//! provisioner names each effect by a key that a retry and a successor
//! re-derive identically. `leasehold-receiver` (the workspace's `receiver/`
//! crate) is such a cloud.
//!
//! # Objects
//!
//! `buckets/NAME`, whose value is the user's:
//!
//! ```json
//! { "spec": { "size_gb": 10, "region": "eu" }, "endpoint": "http://127.0.0.1:9000" }
//! ```
//!
//! `spec` is what the user asks for and `endpoint` the cloud's base URL
//! (which must be in the controller's `http_allow`); other fields are
//! ignored, and the provisioner never writes the value. Its own record is
//! the object's **status** ([`BucketStatus`]), written with
//! `update_status`, which keeps the object's generation:
//!
//! ```json
//! {
//!   "phase": "Ready",
//!   "applied_spec": { "size_gb": 10, "region": "eu" },
//!   "cloud_generation": 1,
//!   "observed_generation": 2,
//!   "incarnation": 2,
//!   "message": "applied by the cloud at generation 1 (epoch 3)",
//!   "conditions": [ { "type": "Ready", "status": "True", "reason": "Provisioned",
//!                     "message": "applied by the cloud at generation 1 (epoch 3)",
//!                     "observed_generation": 2,
//!                     "last_transition_time": "2026-01-01T00:00:00Z" } ]
//! }
//! ```
//!
//! The object carries the finalizer [`BUCKET_FINALIZER`] from the
//! provisioner's first look on, so a user's `DELETE` only marks it, and
//! the provisioner deletes the bucket at the cloud before letting it go
//! ([`leasehold_guest::finalizer`]).
//!
//! # One effect, one key: the generation (and the incarnation)
//!
//! When the status's `applied_spec` differs from `spec`, the provisioner
//! records `Pending` (the `Ready` condition `Unknown`, reason
//! [`PROVISIONING`]), then sends `PUT {endpoint}/buckets/NAME` with the
//! spec and the key [`IdempotencyKey::for_action`]`("buckets", NAME,
//! generation, "put-INCARNATION")`, where `generation` is the object's
//! generation as read. On a 2xx it records the status (phase `Ready`, the
//! spec applied, the cloud's generation, `Ready` `True`) with a
//! `Provisioned` event.
//!
//! The **incarnation** tells apart objects that had the same name: a
//! generation starts at 1 again when an object is deleted and created
//! anew, so the generation alone would give a new bucket object its
//! predecessor's keys, and the cloud would replay the old answers and
//! create nothing. It is the object's version when the provisioner first
//! records its status (versions are never reused), kept in the status
//! from then on (`incarnation`), so every key of one object carries it. A
//! user who clears the status starts a new incarnation: the spec is sent
//! once more, under a new key. The Python provisioner
//! (`controllers/provisioner-py`) derives the same keys.
//!
//! - **A lost answer is applied once.** After a timeout or a dropped
//!   connection the provisioner does not know whether the cloud applied
//!   the spec; it writes nothing more and fails (the host retries with
//!   backoff). The retry, or the next leader's first reconcile, reads the
//!   same generation (status writes, `Pending` included, never change it;
//!   they do change the version, which is why the key is not built from
//!   the version), sends the same key, and the cloud answers with the
//!   stored result instead of applying again.
//! - **A status never describes a spec it was not computed from.** Every
//!   status write is conditional on the generation read: a user who
//!   changed the spec meanwhile makes it conflict, and the reconcile
//!   requeues after [`CONFLICT_RETRY_AFTER`] and decides again, with the
//!   new generation's key.
//! - **A stale leader stops.** A `409 {"error": "stale epoch"}` means a
//!   newer tenure of this lease has acted at the cloud: this guest is
//!   deposed and about to be fenced, so the reconcile ends as fenced. The
//!   host refuses the guest's requests by itself once the lease is lost
//!   ([`HttpError::Fenced`], also returned as fenced).
//! - **A refusal is recorded, not retried.** Any other 4xx (an invalid
//!   spec, say) is recorded as phase `Failed` (`Ready` `False`, reason
//!   [`PROVISION_FAILED`], and a `Warning` event) with the spec refused
//!   and the cloud's message, and the bucket waits for the spec to change.
//!   Anything else (5xx, 429, connection failures, timeouts, host limits)
//!   is a failure the host retries with backoff.
//!
//! # Deletion
//!
//! A user deletes the object (`DELETE /v1/objects/buckets/NAME`); the
//! finalizer turns that into a mark. The provisioner then sends `DELETE
//! {endpoint}/buckets/NAME` with the key `("buckets", NAME, generation,
//! "delete-INCARNATION")` (the marked object's generation: the mark set
//! it, and nothing changes it afterwards; the incarnation from the status,
//! or the marked object's version if it has none), and on a 2xx or 404
//! removes its
//! finalizer with a `Deprovisioned` event, in one commit conditional on
//! the version read: the object goes with it. It sends the `DELETE` even
//! for a bucket it never provisioned: a deposed leader's `PUT` may still be
//! on its way, and the `DELETE` at the current epoch makes the cloud refuse
//! it. Any other refusal keeps the object marked and is retried after
//! [`DELETE_REFUSED_RETRY_AFTER`]. An object deleted before the provisioner
//! ever saw it has no finalizer and goes at once: no `PUT` was ever sent
//! for it.
//!
//! A resync does not call the cloud for buckets in sync: drift made at the
//! cloud behind the provisioner's back is not corrected. Changing
//! `endpoint` alone does not move a bucket. An object whose `endpoint` is
//! not a URL is skipped with a warning, also when marked for deletion:
//! it stays marked until its endpoint is fixed.

#![warn(missing_docs)]

use std::time::Duration;

use leasehold_guest::http::{HttpError, IdempotencyKey, Request, Response};
use leasehold_guest::{
    Condition, ConditionStatus, Context, Controller, Description, Error, EventType, FinalizerError,
    Object, Outcome, Retry, StoreError, Transaction, finalizer, set_condition,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kind of the bucket objects.
pub const BUCKETS: &str = "buckets";
/// The finalizer that holds a bucket object until its bucket is deleted
/// at the cloud.
pub const BUCKET_FINALIZER: &str = "provisioner/bucket";
/// The condition type that says whether the cloud holds the bucket's spec.
pub const READY: &str = "Ready";
/// The reason of the `Ready` condition while a spec is on its way.
pub const PROVISIONING: &str = "Provisioning";
/// The reason of the event (and of the `Ready` condition) recorded when
/// the cloud applied a spec.
pub const PROVISIONED: &str = "Provisioned";
/// The reason of the warning (and of the `Ready` condition) recorded when
/// the cloud refused a spec.
pub const PROVISION_FAILED: &str = "ProvisionFailed";
/// The reason of the event recorded when a bucket was deleted at the cloud
/// and its object let go.
pub const DEPROVISIONED: &str = "Deprovisioned";
/// The action name of the `PUT` in its idempotency key, followed by
/// `-INCARNATION` ([`action`]).
pub const PUT_ACTION: &str = "put";
/// The action name of the `DELETE` in its idempotency key, followed by
/// `-INCARNATION` ([`action`]).
pub const DELETE_ACTION: &str = "delete";
/// What a fenced receiver's 409 body says when the epoch is stale.
pub const STALE_EPOCH: &str = "stale epoch";

/// How often every bucket is looked at again without a change (buckets in
/// sync cost no request).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(60);
/// The first-byte timeout asked of the host for each request (the host
/// caps it at its own bound).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The requeue delay after a commit conflicted: short, since the object
/// changed and must be looked at again, but not zero.
pub const CONFLICT_RETRY_AFTER: Duration = Duration::from_millis(200);
/// How long a marked bucket whose `DELETE` the cloud refused (a 4xx other
/// than 404 and 409) waits before the provisioner asks again.
pub const DELETE_REFUSED_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Longest status message or event message built from a cloud's answer.
pub const MAX_MESSAGE_BYTES: usize = 512;

/// What the user asks for; sent to the cloud as the `PUT` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketSpec {
    /// Size in GB.
    pub size_gb: u32,
    /// Where the bucket lives.
    pub region: String,
}

/// Where a bucket stands, as far as the provisioner knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The cloud holds `applied_spec`, and it is the object's spec.
    Ready,
    /// A spec is on its way to the cloud (an object without a status is
    /// pending too).
    Pending,
    /// The cloud refused `rejected_spec`; nothing is retried until the spec
    /// changes.
    Failed,
}

/// The provisioner's record of a bucket: the object's status part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStatus {
    /// Where it stands.
    pub phase: Phase,
    /// The spec the cloud last confirmed it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_spec: Option<BucketSpec>,
    /// The cloud's generation of the bucket after that application (the
    /// cloud's count, not the object's generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_generation: Option<u64>,
    /// The object's generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<u64>,
    /// Which object of this name the status belongs to: the object's
    /// version when the provisioner first recorded its status. Part of
    /// every idempotency key (see [`action`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
    /// The spec the cloud refused, with phase `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_spec: Option<BucketSpec>,
    /// For people: what happened last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The [`READY`] condition, at the object's generation it describes.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl BucketStatus {
    /// The status of a bucket the cloud has not answered for yet.
    pub fn pending() -> Self {
        Self {
            phase: Phase::Pending,
            applied_spec: None,
            cloud_generation: None,
            observed_generation: None,
            incarnation: None,
            rejected_spec: None,
            message: None,
            conditions: Vec::new(),
        }
    }
}

/// A bucket object's value: the user's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// What the user asks for.
    pub spec: BucketSpec,
    /// The cloud's base URL, e.g. `http://127.0.0.1:9000`.
    pub endpoint: String,
}

/// The action of an idempotency key: `put-INCARNATION` or
/// `delete-INCARNATION`. The incarnation tells apart objects that had the
/// same name, whose generations both started at 1.
pub fn action(name: &str, incarnation: u64) -> String {
    format!("{name}-{incarnation}")
}

/// Whether the cloud needs a `PUT` of `spec`, given the provisioner's
/// `status`: the spec is neither confirmed applied nor already refused.
pub fn needs_put(spec: &BucketSpec, status: Option<&BucketStatus>) -> bool {
    match status {
        None => true,
        Some(status) => {
            status.applied_spec.as_ref() != Some(spec)
                && !(status.phase == Phase::Failed && status.rejected_spec.as_ref() == Some(spec))
        }
    }
}

/// The URL of bucket `name` at `endpoint`; an error message if the
/// endpoint is not an `http`/`https` base URL.
pub fn bucket_url(endpoint: &str, name: &str) -> Result<String, String> {
    let base = endpoint.trim_end_matches('/');
    let has_scheme = ["http://", "https://"].iter().any(|scheme| {
        base.len() > scheme.len() && base[..scheme.len()].eq_ignore_ascii_case(scheme)
    });
    if !has_scheme || base.contains(['?', '#']) || base.chars().any(char::is_whitespace) {
        return Err(format!(
            "endpoint {endpoint:?} is not an http:// or https:// base URL"
        ));
    }
    Ok(format!("{base}/{BUCKETS}/{name}"))
}

/// The provisioner controller.
#[derive(Debug, Default)]
pub struct Provisioner;

leasehold_guest::export_controller!(Provisioner);

impl Controller for Provisioner {
    fn describe(&self) -> Description {
        Description::watching([BUCKETS]).resync_every(RESYNC_PERIOD)
    }

    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
        if kind != BUCKETS {
            leasehold_guest::warn!("asked to reconcile {kind}/{name}, a kind not watched");
            return Ok(Outcome::Done);
        }
        let Some(object) = ctx.api::<Value>(BUCKETS).get(name)? else {
            return Ok(Outcome::Done);
        };
        // The endpoint is all a deletion needs; a live bucket needs its
        // spec too. A change to the object wakes us again: retrying the
        // same value would fail the same way.
        let url = match endpoint_url(&object) {
            Ok(url) => url,
            Err(why) => {
                leasehold_guest::warn!("skipping {}: {why}", object.key());
                return Ok(Outcome::Done);
            }
        };
        if !object.is_deleting()
            && let Err(error) = object.decode::<Bucket>()
        {
            leasehold_guest::warn!("skipping {}: {error}", object.key());
            return Ok(Outcome::Done);
        }
        let key = object.key();
        let finalized = finalizer(
            object,
            BUCKET_FINALIZER,
            |object| apply(ctx, object, &url),
            |object| cleanup(ctx, object, &url),
        );
        match finalized {
            Ok(outcome) => Ok(outcome),
            // The object changed between our read and the commit adding or
            // removing the finalizer: nothing was written; decide again
            // from a fresh read.
            Err(
                FinalizerError::AddFinalizer(StoreError::Conflict(_) | StoreError::NotFound(_))
                | FinalizerError::RemoveFinalizer(StoreError::Conflict(_) | StoreError::NotFound(_)),
            ) => {
                leasehold_guest::info!("{key} changed since it was read; looking again");
                Ok(Outcome::RequeueAfter(CONFLICT_RETRY_AFTER))
            }
            // Fenced (the store's or the cloud's 409): stop. Anything else:
            // the error policy.
            Err(error) => Err(error.into()),
        }
    }

    fn error_policy(&self, _: &Context, _: &str, _: &str, error: &Error) -> Retry {
        match (error.store_error(), error.retry_hint()) {
            // The object changed under us: look again soon.
            (Some(StoreError::Conflict(_) | StoreError::NotFound(_)), _) => {
                Retry::After(CONFLICT_RETRY_AFTER)
            }
            // The cloud said when (Retry-After), or refused a delete.
            (_, Some(delay)) => Retry::After(delay),
            // Timeouts, dropped connections, 5xx, host limits, an
            // unavailable store: the host's exponential backoff.
            _ => Retry::Backoff,
        }
    }
}

/// The URL of the object's bucket at its `endpoint`.
fn endpoint_url(object: &Object<Value>) -> Result<String, String> {
    let endpoint = object
        .value
        .get("endpoint")
        .and_then(Value::as_str)
        .ok_or("it has no endpoint")?;
    bucket_url(endpoint, &object.name)
}

/// While the object lives (with the finalizer on): `PUT` the spec if the
/// cloud does not hold it yet.
fn apply(ctx: &Context, object: &Object<Value>, url: &str) -> Result<Outcome, Error> {
    let bucket = object.decode::<Bucket>()?;
    let status = match bucket.status::<BucketStatus>() {
        Ok(status) => status,
        Err(error) => {
            // A status someone else wrote badly: start again from nothing.
            leasehold_guest::warn!("{}: ignoring its status: {error}", bucket.key());
            None
        }
    };
    if !needs_put(&bucket.value.spec, status.as_ref()) {
        return Ok(Outcome::Done);
    }
    provision(
        ctx,
        &bucket,
        status.unwrap_or_else(BucketStatus::pending),
        url,
    )
}

/// Record that the spec is on its way, `PUT` it, and record what the cloud
/// said.
fn provision(
    ctx: &Context,
    bucket: &Object<Bucket>,
    mut status: BucketStatus,
    url: &str,
) -> Result<Outcome, Error> {
    let generation = bucket.generation;
    // This object's incarnation: kept in the status from its first write.
    let incarnation = status.incarnation.unwrap_or(bucket.version);
    // The key of this spec: the generation, which the status writes below
    // leave as it is, and the incarnation.
    let key = IdempotencyKey::for_action(
        BUCKETS,
        &bucket.name,
        generation,
        &action(PUT_ACTION, incarnation),
    );
    let before = status.clone();
    let message = format!("sending the spec of generation {generation} to the cloud");
    status.phase = Phase::Pending;
    status.observed_generation = Some(generation);
    status.incarnation = Some(incarnation);
    status.message = Some(message.clone());
    let sending = Condition::new(READY, ConditionStatus::Unknown, PROVISIONING, message)
        .with_generation(generation);
    set_condition(&mut status.conditions, sending);
    if status != before {
        let recorded = Transaction::new().update_status(bucket, &status).commit();
        if let Some(outcome) = settled(bucket, recorded.map(|_| ()), "pending")? {
            return Ok(outcome);
        }
    }
    let response = Request::put(url)
        .json(&bucket.value.spec)?
        .idempotency_key(&key)
        .timeout(REQUEST_TIMEOUT)
        .send()?;
    let epoch = ctx.fence().epoch;
    if response.is_success() {
        let cloud_generation = response
            .json::<Value>()
            .ok()
            .and_then(|body| body.get("generation").and_then(Value::as_u64));
        let replayed = response.header("idempotency-replayed") == Some("true");
        let message = format!(
            "applied by the cloud{} (epoch {epoch}{})",
            cloud_generation
                .map(|g| format!(" at generation {g}"))
                .unwrap_or_default(),
            if replayed {
                "; the answer to an earlier attempt, replayed"
            } else {
                ""
            },
        );
        status.phase = Phase::Ready;
        status.observed_generation = Some(generation);
        status.applied_spec = Some(bucket.value.spec.clone());
        status.cloud_generation = cloud_generation;
        status.rejected_spec = None;
        status.message = Some(message.clone());
        let ready = Condition::new(READY, ConditionStatus::True, PROVISIONED, message.as_str())
            .with_generation(generation);
        set_condition(&mut status.conditions, ready);
        return record(bucket, &status, EventType::Normal, PROVISIONED, &message);
    }
    refused(&response, url)?;
    // A definite refusal of this spec: record it, do not retry it.
    let message = clip(format!(
        "the cloud refused the spec with {}: {}",
        response.status,
        answer_text(&response)
    ));
    status.phase = Phase::Failed;
    status.observed_generation = Some(generation);
    status.rejected_spec = Some(bucket.value.spec.clone());
    status.message = Some(message.clone());
    let failed = Condition::new(
        READY,
        ConditionStatus::False,
        PROVISION_FAILED,
        message.as_str(),
    )
    .with_generation(generation);
    set_condition(&mut status.conditions, failed);
    leasehold_guest::warn!("{}: {message}", bucket.key());
    record(
        bucket,
        &status,
        EventType::Warning,
        PROVISION_FAILED,
        &message,
    )
}

/// Once the object is marked for deletion: `DELETE` the bucket at the
/// cloud; on success, the event that goes with the finalizer's removal.
fn cleanup(ctx: &Context, object: &Object<Value>, url: &str) -> Result<Transaction, Error> {
    // The marked object's generation: the mark set it, and nothing moves
    // it until the object goes, so every retry sends this key; and its
    // incarnation (the marked version if it never had a status).
    let incarnation = object
        .status::<BucketStatus>()
        .ok()
        .flatten()
        .and_then(|status| status.incarnation)
        .unwrap_or(object.version);
    let key = IdempotencyKey::for_action(
        BUCKETS,
        &object.name,
        object.generation,
        &action(DELETE_ACTION, incarnation),
    );
    let response = Request::delete(url)
        .idempotency_key(&key)
        .timeout(REQUEST_TIMEOUT)
        .send()?;
    if !response.is_success() && response.status != 404 {
        refused(&response, url)?;
        // Another refusal: the object stays, marked, and we ask again
        // later (the finalizer is kept).
        let message = clip(format!(
            "the cloud refused the delete with {}: {}",
            response.status,
            answer_text(&response)
        ));
        leasehold_guest::warn!("{}: {message}", object.key());
        return Err(Error::retry_after(message, DELETE_REFUSED_RETRY_AFTER));
    }
    let message = format!(
        "deleted at the cloud ({}, epoch {})",
        if response.status == 404 {
            "it was not there"
        } else {
            "confirmed"
        },
        ctx.fence().epoch
    );
    leasehold_guest::info!("{}: {message}", object.key());
    Ok(Transaction::new().event_of_type(
        BUCKETS,
        object.name.as_str(),
        EventType::Normal,
        DEPROVISIONED,
        message,
    ))
}

/// The error for an answer that is not a definite refusal of the request:
/// a stale epoch (fenced), or one worth retrying (5xx, 429, 408, 1xx/3xx).
/// `Ok(())` for the other 4xx, which refuse the request itself.
fn refused(response: &Response, url: &str) -> Result<(), Error> {
    let status = response.status;
    if status == 409 && is_stale_epoch(response) {
        let highest = response
            .json::<Value>()
            .ok()
            .and_then(|body| body.get("highest").and_then(Value::as_u64));
        return Err(HttpError::Fenced(format!(
            "{url} refused epoch {} as stale (highest accepted: {}): a newer tenure has acted",
            leasehold_guest::fence().epoch,
            highest.map_or_else(|| "not given".to_string(), |h| h.to_string()),
        ))
        .into());
    }
    let retry = |why: String| -> Error {
        match retry_after(response) {
            Some(delay) => Error::retry_after(why, delay),
            None => Error::failed(why),
        }
    };
    match status {
        400..=499 if !matches!(status, 408 | 409 | 425 | 429) => Ok(()),
        _ => Err(retry(clip(format!(
            "{url} answered {status}: {}; retrying",
            answer_text(response)
        )))),
    }
}

fn is_stale_epoch(response: &Response) -> bool {
    response
        .json::<Value>()
        .ok()
        .and_then(|body| {
            body.get("error")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .is_some_and(|error| error == STALE_EPOCH)
}

/// `Retry-After` in seconds, bounded to an hour.
fn retry_after(response: &Response) -> Option<Duration> {
    let seconds: u64 = response.header("retry-after")?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds.min(3600)))
}

/// The answer's `error` field, or its text.
fn answer_text(response: &Response) -> String {
    if let Ok(body) = response.json::<Value>()
        && let Some(error) = body.get("error").and_then(Value::as_str)
    {
        return error.to_string();
    }
    match response.text() {
        Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
        Ok(_) => "no body".to_string(),
        Err(_) => "a body that is not text".to_string(),
    }
}

/// Record `status` (conditional on the generation read) with an event.
fn record(
    bucket: &Object<Bucket>,
    status: &BucketStatus,
    event_type: EventType,
    reason: &str,
    message: &str,
) -> Result<Outcome, Error> {
    let committed = Transaction::new()
        .update_status(bucket, status)
        .event_of_type(BUCKETS, bucket.name.as_str(), event_type, reason, message)
        .commit();
    Ok(settled(bucket, committed.map(|_| ()), message)?.unwrap_or(Outcome::Done))
}

/// What a status commit's result means: `None` if it landed (logged),
/// a requeue if the object changed since it was read, the error otherwise.
fn settled(
    bucket: &Object<Bucket>,
    committed: Result<(), StoreError>,
    what: &str,
) -> Result<Option<Outcome>, Error> {
    match committed {
        Ok(()) => {
            leasehold_guest::info!("{}: {what}", bucket.key());
            Ok(None)
        }
        // The spec changed (or the object went) since it was read: what to
        // do is decided again from a fresh read, with the key of the new
        // generation.
        Err(StoreError::Conflict(key) | StoreError::NotFound(key)) => {
            leasehold_guest::info!("{key} changed since it was read; looking again");
            Ok(Some(Outcome::RequeueAfter(CONFLICT_RETRY_AFTER)))
        }
        // Fenced: stop. Unavailable: the commit may have landed; the
        // retry re-reads and, if it did not, sends the same key again.
        Err(error) => Err(error.into()),
    }
}

/// `text` cut to [`MAX_MESSAGE_BYTES`] at a character boundary.
fn clip(mut text: String) -> String {
    if text.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_urls() {
        assert_eq!(
            bucket_url("http://127.0.0.1:9000", "a").as_deref(),
            Ok("http://127.0.0.1:9000/buckets/a")
        );
        assert_eq!(
            bucket_url("https://cloud.test/v1/", "a").as_deref(),
            Ok("https://cloud.test/v1/buckets/a")
        );
        for bad in [
            "",
            "http://",
            "ftp://x",
            "cloud.test",
            "http://x?y=1",
            "http://x y",
        ] {
            assert!(bucket_url(bad, "a").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn messages_are_clipped_at_a_character_boundary() {
        let clipped = clip("é".repeat(MAX_MESSAGE_BYTES));
        assert!(clipped.len() <= MAX_MESSAGE_BYTES);
        assert!(clipped.ends_with("..."));
        assert_eq!(clip("short".into()), "short");
    }
}
