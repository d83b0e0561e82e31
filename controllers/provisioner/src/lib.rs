//! The example provisioner: makes buckets in an external "cloud" API match
//! the `buckets` objects in the store, over fenced outbound HTTP.
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
//! `buckets/NAME`:
//!
//! ```json
//! {
//!   "spec": { "size_gb": 10, "region": "eu" },
//!   "endpoint": "http://127.0.0.1:9000",
//!   "status": {
//!     "phase": "Ready",
//!     "applied_spec": { "size_gb": 10, "region": "eu" },
//!     "observed_generation": 1,
//!     "message": "applied by the cloud at generation 1 (epoch 3)"
//!   },
//!   "deleting": false
//! }
//! ```
//!
//! `spec` and `endpoint` (the cloud's base URL, which must be in the
//! controller's `http_allow`) are the user's; `status` is the provisioner's
//! and absent until the cloud has answered; `deleting: true` asks for the
//! bucket to be deleted at the cloud and then the object removed. Every
//! other field is kept as is.
//!
//! # One effect, one key, and status only after the answer
//!
//! When `status.applied_spec` differs from `spec`, the provisioner sends
//! `PUT {endpoint}/buckets/NAME` with the spec and the key
//! [`IdempotencyKey::for_action`]`("buckets", NAME, version, "put")`, where
//! `version` is the object's version as read. On a 2xx it records the
//! status (phase `Ready`, the spec applied, the cloud's generation) in one
//! fenced commit conditional on that version, with a `Provisioned` event.
//!
//! - **A lost answer is applied once.** After a timeout or a dropped
//!   connection the provisioner does not know whether the cloud applied
//!   the spec; it writes nothing and fails (the host retries with backoff).
//!   The object's version has not changed, so the retry — or the next
//!   leader's first reconcile — sends the same key, and the cloud answers
//!   with the stored result instead of applying again.
//! - **Nothing is written before the answer.** A `Pending` status written
//!   before the request would change the object's version, and with it the
//!   key of the retry: a lost answer would then be applied twice. An object
//!   without a status is pending.
//! - **A stale leader stops.** A `409 {"error": "stale epoch"}` means a
//!   newer tenure of this lease has acted at the cloud: this guest is
//!   deposed and about to be fenced, so the reconcile ends as fenced. The
//!   host refuses the guest's requests by itself once the lease is lost
//!   ([`HttpError::Fenced`], also returned as fenced).
//! - **A refusal is recorded, not retried.** Any other 4xx (an invalid
//!   spec, say) is recorded as phase `Failed` with the spec refused and
//!   the cloud's message, and the bucket waits for the spec to change.
//!   Anything else (5xx, 429, connection failures, timeouts, host limits)
//!   is a failure the host retries with backoff.
//! - **A status commit that conflicts** (someone changed the object since
//!   it was read) is not retried blindly: the reconcile requeues after
//!   [`CONFLICT_RETRY_AFTER`] and the next one re-reads. If the spec
//!   changed, that is a new decision with a new key.
//!
//! # Deletion
//!
//! With `deleting: true` the provisioner sends `DELETE
//! {endpoint}/buckets/NAME` with the key `("buckets", NAME, version,
//! "delete")`, and on a 2xx or 404 deletes the object (conditional on the
//! version read) with a `Deprovisioned` event. It sends the `DELETE` even
//! for a bucket it never provisioned: a deposed leader's `PUT` may still be
//! on its way, and the `DELETE` at the current epoch makes the cloud refuse
//! it. Deleting the object directly instead leaves the bucket at the cloud.
//!
//! A resync does not call the cloud for buckets in sync: drift made at the
//! cloud behind the provisioner's back is not corrected. Changing
//! `endpoint` alone does not move a bucket.

#![warn(missing_docs)]

use std::time::Duration;

use leasehold_guest::http::{HttpError, IdempotencyKey, Request, Response};
use leasehold_guest::{
    Context, Controller, Description, Error, Object, Outcome, Retry, StoreError, Transaction,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The kind of the bucket objects.
pub const BUCKETS: &str = "buckets";
/// The reason of the event recorded when the cloud applied a spec.
pub const PROVISIONED: &str = "Provisioned";
/// The reason of the event recorded when the cloud refused a spec.
pub const PROVISION_FAILED: &str = "ProvisionFailed";
/// The reason of the event recorded when a bucket was deleted at the cloud
/// and its object removed.
pub const DEPROVISIONED: &str = "Deprovisioned";
/// The action name of the `PUT` in its idempotency key.
pub const PUT_ACTION: &str = "put";
/// The action name of the `DELETE` in its idempotency key.
pub const DELETE_ACTION: &str = "delete";
/// What a fenced receiver's 409 body says when the epoch is stale.
pub const STALE_EPOCH: &str = "stale epoch";

/// How often every bucket is looked at again without a change (buckets in
/// sync cost no request).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(60);
/// The first-byte timeout asked of the host for each request (the host
/// caps it at its own bound).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The requeue delay after a status commit conflicted: short, since the
/// object changed and must be looked at again, but not zero.
pub const CONFLICT_RETRY_AFTER: Duration = Duration::from_millis(200);
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
    /// Not written by the provisioner (an object without a status is
    /// pending); accepted on read, so a user may set it.
    Pending,
    /// The cloud refused `rejected_spec`; nothing is retried until the spec
    /// changes.
    Failed,
}

/// The provisioner's part of a bucket object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStatus {
    /// Where it stands.
    pub phase: Phase,
    /// The spec the cloud last confirmed it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_spec: Option<BucketSpec>,
    /// The cloud's generation of the bucket after that application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<u64>,
    /// The spec the cloud refused, with phase `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_spec: Option<BucketSpec>,
    /// For people: what happened last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A bucket object's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// What the user asks for.
    pub spec: BucketSpec,
    /// The cloud's base URL, e.g. `http://127.0.0.1:9000`.
    pub endpoint: String,
    /// The provisioner's status; absent until the cloud first answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BucketStatus>,
    /// Delete the bucket at the cloud, then the object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
    /// Every other field, kept as is.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Bucket {
    /// Whether the cloud needs a `PUT`: the spec is neither confirmed
    /// applied nor already refused.
    pub fn needs_put(&self) -> bool {
        match &self.status {
            None => true,
            Some(status) => {
                status.applied_spec.as_ref() != Some(&self.spec)
                    && !(status.phase == Phase::Failed
                        && status.rejected_spec.as_ref() == Some(&self.spec))
            }
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
        let bucket = match object.decode::<Bucket>() {
            Ok(bucket) => bucket,
            Err(error) => {
                // A change to the object wakes us again; retrying the same
                // value would fail the same way.
                leasehold_guest::warn!("skipping {}: {error}", object.key());
                return Ok(Outcome::Done);
            }
        };
        let url = match bucket_url(&bucket.value.endpoint, name) {
            Ok(url) => url,
            Err(why) => {
                leasehold_guest::warn!("skipping {}: {why}", object.key());
                return Ok(Outcome::Done);
            }
        };
        if bucket.value.deleting {
            deprovision(ctx, &bucket, &url)
        } else if bucket.value.needs_put() {
            provision(ctx, &bucket, &url)
        } else {
            Ok(Outcome::Done)
        }
    }

    fn error_policy(&self, _: &Context, _: &str, _: &str, error: &Error) -> Retry {
        match (error.store_error(), error.retry_hint()) {
            // The object changed under us: look again soon.
            (Some(StoreError::Conflict(_) | StoreError::NotFound(_)), _) => {
                Retry::After(CONFLICT_RETRY_AFTER)
            }
            // The cloud said when (Retry-After).
            (_, Some(delay)) => Retry::After(delay),
            // Timeouts, dropped connections, 5xx, host limits, an
            // unavailable store: the host's exponential backoff.
            _ => Retry::Backoff,
        }
    }
}

/// `PUT` the spec and record what the cloud said.
fn provision(ctx: &Context, bucket: &Object<Bucket>, url: &str) -> Result<Outcome, Error> {
    let key = IdempotencyKey::for_action(BUCKETS, &bucket.name, bucket.version, PUT_ACTION);
    let response = Request::put(url)
        .json(&bucket.value.spec)?
        .idempotency_key(&key)
        .timeout(REQUEST_TIMEOUT)
        .send()?;
    let epoch = ctx.fence().epoch;
    if response.is_success() {
        let generation = response
            .json::<Value>()
            .ok()
            .and_then(|body| body.get("generation").and_then(Value::as_u64));
        let replayed = response.header("idempotency-replayed") == Some("true");
        let message = format!(
            "applied by the cloud{} (epoch {epoch}{})",
            generation
                .map(|g| format!(" at generation {g}"))
                .unwrap_or_default(),
            if replayed {
                "; the answer to an earlier attempt, replayed"
            } else {
                ""
            },
        );
        let status = BucketStatus {
            phase: Phase::Ready,
            applied_spec: Some(bucket.value.spec.clone()),
            observed_generation: generation,
            rejected_spec: None,
            message: Some(message.clone()),
        };
        return record(bucket, status, PROVISIONED, &message);
    }
    refused(&response, url)?;
    // A definite refusal of this spec: record it, do not retry it.
    let message = clip(format!(
        "the cloud refused the spec with {}: {}",
        response.status,
        answer_text(&response)
    ));
    let previous = bucket.value.status.as_ref();
    let status = BucketStatus {
        phase: Phase::Failed,
        applied_spec: previous.and_then(|s| s.applied_spec.clone()),
        observed_generation: previous.and_then(|s| s.observed_generation),
        rejected_spec: Some(bucket.value.spec.clone()),
        message: Some(message.clone()),
    };
    leasehold_guest::warn!("{}: {message}", bucket.key());
    record(bucket, status, PROVISION_FAILED, &message)
}

/// `DELETE` the bucket at the cloud, then the object.
fn deprovision(ctx: &Context, bucket: &Object<Bucket>, url: &str) -> Result<Outcome, Error> {
    let key = IdempotencyKey::for_action(BUCKETS, &bucket.name, bucket.version, DELETE_ACTION);
    let response = Request::delete(url)
        .idempotency_key(&key)
        .timeout(REQUEST_TIMEOUT)
        .send()?;
    if !response.is_success() && response.status != 404 {
        refused(&response, url)?;
        // Another refusal: the object stays, marked, for a person to look
        // at; retrying would be refused the same way.
        let message = clip(format!(
            "the cloud refused the delete with {}: {}",
            response.status,
            answer_text(&response)
        ));
        leasehold_guest::warn!("{}: {message}", bucket.key());
        return Ok(Outcome::Done);
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
    let committed = Transaction::new()
        .delete(bucket)
        .event(BUCKETS, bucket.name.as_str(), DEPROVISIONED, &message)
        .commit();
    finish(bucket, committed.map(|_| ()), &message)
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

/// Record `status` in the object (conditional on the version read) with
/// an event.
fn record(
    bucket: &Object<Bucket>,
    status: BucketStatus,
    reason: &str,
    message: &str,
) -> Result<Outcome, Error> {
    let updated = Bucket {
        status: Some(status),
        ..bucket.value.clone()
    };
    let committed = Transaction::new()
        .update(bucket, &updated)
        .event(BUCKETS, bucket.name.as_str(), reason, message)
        .commit();
    finish(bucket, committed.map(|_| ()), message)
}

fn finish(
    bucket: &Object<Bucket>,
    committed: Result<(), StoreError>,
    message: &str,
) -> Result<Outcome, Error> {
    match committed {
        Ok(()) => {
            leasehold_guest::info!("{}: {message}", bucket.key());
            Ok(Outcome::Done)
        }
        // Changed (or removed) since it was read: what to do is decided
        // again from a fresh read, with the key of the new version.
        Err(StoreError::Conflict(key) | StoreError::NotFound(key)) => {
            leasehold_guest::info!("{key} changed since it was read; looking again");
            Ok(Outcome::RequeueAfter(CONFLICT_RETRY_AFTER))
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
