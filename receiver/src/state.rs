//! The receiver's state and its one decision procedure.
//!
//! Every request to the resource API is decided by [`State::decide`] under
//! one lock: parse the fence, compare the epoch with the lease's mark,
//! look up the idempotency key, apply, raise the mark, store the answer
//! under the key, append the record entry (and write it to the record
//! file). Nothing else touches buckets, marks or keys, so the record's
//! `seq` order is the order effects happened in.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;

use axum::http::{HeaderMap, Method};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::faults::{Fault, Pending};
use crate::record::{Outcome, RecordEntry};

/// The request headers of the fence and of idempotency. Part of the
/// receiver's contract; the first three are what the Leasehold host sets
/// on every outbound request.
pub mod headers {
    /// `<cluster>/<lease>` of the tenure that sent the request.
    pub const LEASE: &str = "leasehold-lease";
    /// The tenure's fencing epoch, in decimal.
    pub const EPOCH: &str = "leasehold-epoch";
    /// The replica holding the lease.
    pub const HOLDER: &str = "leasehold-holder";
    /// The client's name for one effect: stable across retries and
    /// tenures.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
    /// Set to `true` on an answer replayed from an earlier application.
    pub const REPLAYED: &str = "idempotency-replayed";
}

/// Longest `Leasehold-Lease`, `Leasehold-Holder` and `Idempotency-Key`
/// value accepted.
pub const MAX_HEADER_VALUE_BYTES: usize = 256;
/// Longest bucket name (a DNS label).
pub const MAX_BUCKET_NAME_LEN: usize = 63;

/// A bucket's spec: what the client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketSpec {
    /// Size in GB.
    pub size_gb: u32,
    /// Where it lives.
    pub region: String,
}

/// A bucket as `GET /buckets/{name}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Its name.
    pub name: String,
    /// The spec last applied.
    pub spec: BucketSpec,
    /// How many effects (puts and deletes) have been applied to this name
    /// so far; it keeps counting across a delete and re-create.
    pub generation: u64,
    /// The epoch of the request that applied the current spec.
    pub applied_epoch: u64,
}

/// The answer decided for one request, before any fault shapes its
/// delivery.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) replayed: bool,
}

impl Answer {
    fn json(status: u16, value: &Value) -> Self {
        Self {
            status,
            body: value.to_string().into_bytes(),
            replayed: false,
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Self {
        Self::json(status, &json!({ "error": message.into() }))
    }
}

/// What a request's body turned out to be (read before the lock is taken).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    /// Read whole, within the bound.
    Read(Vec<u8>),
    /// Over the bound, or unreadable: why.
    Refused { status: u16, why: String },
}

/// One request as the decision procedure needs it.
#[derive(Debug)]
pub(crate) struct Incoming<'a> {
    pub(crate) method: &'a Method,
    /// The URI's path, without the query.
    pub(crate) path: &'a str,
    /// `Some(name)` for `/buckets/{name}`, `None` for `/buckets`.
    pub(crate) bucket: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
    /// `None` for reads, whose bodies are not read.
    pub(crate) body: Option<Body>,
}

/// What was applied under an idempotency key, to replay it.
#[derive(Debug, Clone)]
struct Stored {
    method: String,
    path: String,
    body: Vec<u8>,
    answer: Answer,
    resource: String,
    generation: u64,
}

/// The fence a mutating request carried.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FenceHeaders {
    lease: String,
    epoch: u64,
    holder: String,
}

/// Everything the receiver knows.
#[derive(Debug, Default)]
pub(crate) struct State {
    buckets: BTreeMap<String, Bucket>,
    /// The last generation of every name ever written, surviving deletes.
    generations: HashMap<String, u64>,
    /// Per lease, the highest epoch accepted. The per-lease granularity
    /// fences a whole controller: after its successor's first accepted
    /// request, nothing of the old tenure is accepted for any resource.
    /// (Per resource — a mark per bucket — is the alternative: it lets an
    /// old leader keep writing resources its successor has not touched
    /// yet, which is weaker, but needs no notion of a lease.)
    marks: HashMap<String, u64>,
    keys: HashMap<String, Stored>,
    record: Vec<RecordEntry>,
    pub(crate) faults: Pending,
    record_file: Option<(File, String)>,
}

impl State {
    pub(crate) fn new(record_file: Option<(File, String)>) -> Self {
        Self {
            record_file,
            ..Self::default()
        }
    }

    pub(crate) fn record(&self) -> &[RecordEntry] {
        &self.record
    }

    pub(crate) fn bucket(&self, name: &str) -> Option<&Bucket> {
        self.buckets.get(name)
    }

    pub(crate) fn mark(&self, lease: &str) -> Option<u64> {
        self.marks.get(lease).copied()
    }

    /// Decide, apply and record one request; the answer, the fault that
    /// shapes its delivery, and the entry recorded.
    pub(crate) fn decide(&mut self, request: Incoming<'_>) -> (Answer, Option<Fault>, RecordEntry) {
        let fault = self.faults.take();
        let mut entry = RecordEntry {
            seq: self.record.len() as u64 + 1,
            arrived_at: Utc::now(),
            method: request.method.as_str().to_string(),
            path: request.path.to_string(),
            lease: None,
            epoch: None,
            holder: None,
            idempotency_key: None,
            outcome: Outcome::Rejected,
            status: 0,
            resource: None,
            generation: None,
            detail: None,
            fault: fault.map(|f| f.name().to_string()),
        };
        let answer = self.judge(&request, &mut entry);
        entry.status = answer.status;
        self.append(entry.clone());
        (answer, fault, entry)
    }

    fn append(&mut self, entry: RecordEntry) {
        if let Some((file, path)) = self.record_file.as_mut() {
            let written = serde_json::to_vec(&entry).map(|mut line| {
                line.push(b'\n');
                line
            });
            let result = match written {
                Ok(line) => file.write_all(&line).and_then(|()| file.flush()),
                Err(error) => Err(std::io::Error::other(error)),
            };
            if let Err(error) = result {
                // The in-memory record stays whole; only readers of the
                // file miss this entry, and the log says so.
                tracing::error!(seq = entry.seq, file = %path, %error, "cannot write the record file");
            }
        }
        self.record.push(entry);
    }

    fn judge(&mut self, request: &Incoming<'_>, entry: &mut RecordEntry) -> Answer {
        let method = request.method;
        if *method == Method::GET || *method == Method::HEAD {
            entry.outcome = Outcome::Read;
            // Recorded for people; reads are not fenced.
            let (lease, epoch, holder, key) = (
                single(request.headers, headers::LEASE).ok().flatten(),
                single(request.headers, headers::EPOCH).ok().flatten(),
                single(request.headers, headers::HOLDER).ok().flatten(),
                single(request.headers, headers::IDEMPOTENCY_KEY)
                    .ok()
                    .flatten(),
            );
            entry.lease = lease.map(str::to_string);
            entry.epoch = epoch.and_then(|e| parse_epoch(e).ok());
            entry.holder = holder.map(str::to_string);
            entry.idempotency_key = key.map(str::to_string);
            return self.read(request.bucket);
        }
        if *method != Method::PUT && *method != Method::DELETE {
            entry.detail = Some(format!("method {method} is not allowed"));
            return Answer::error(405, format!("method {method} is not allowed here"));
        }
        let Some(name) = request.bucket else {
            entry.detail = Some("only GET lists buckets".into());
            return Answer::error(405, "only GET is allowed on /buckets");
        };

        // 1. The fence. Each header is recorded if it is well formed, even
        //    when another is not.
        let mut problems = Vec::new();
        let lease = fence_header(request.headers, headers::LEASE, check_lease, &mut problems);
        let epoch = fence_header(request.headers, headers::EPOCH, parse_epoch, &mut problems);
        let holder = fence_header(request.headers, headers::HOLDER, check_text, &mut problems);
        let key = fence_header(
            request.headers,
            headers::IDEMPOTENCY_KEY,
            check_key,
            &mut problems,
        );
        entry.lease = lease.clone();
        entry.epoch = epoch;
        entry.holder = holder.clone();
        entry.idempotency_key = key.clone();
        let (Some(lease), Some(epoch), Some(holder)) = (lease, epoch, holder) else {
            return reject(entry, 400, problems.join("; "));
        };
        let fence = FenceHeaders {
            lease,
            epoch,
            holder,
        };

        // 2. The epoch, before anything else: a stale leader is told it is
        //    stale even when its key was applied (by it or its successor),
        //    so it can never mistake a replay for permission to go on.
        if let Some(highest) = self.mark(&fence.lease)
            && fence.epoch < highest
        {
            entry.outcome = Outcome::Stale;
            entry.detail = Some(format!(
                "epoch {} is below {highest}, the highest accepted for lease {}",
                fence.epoch, fence.lease
            ));
            return Answer::json(
                409,
                &json!({
                    "error": "stale epoch",
                    "highest": highest,
                    "lease": fence.lease,
                    "epoch": fence.epoch,
                }),
            );
        }

        // 3. Idempotency.
        let Some(key) = key else {
            return reject(entry, 400, problems.join("; "));
        };
        let body = match &request.body {
            Some(Body::Read(bytes)) => bytes.as_slice(),
            Some(Body::Refused { status, why }) => return reject(entry, *status, why.clone()),
            None => &[][..],
        };
        if let Some(stored) = self.keys.get(&key) {
            if stored.method != method.as_str()
                || stored.path != request.path
                || stored.body != body
            {
                let message = format!(
                    "idempotency key {key:?} was used for {} {} with a different body or target; \
                     a key names one request",
                    stored.method, stored.path
                );
                return reject(entry, 422, message);
            }
            let mut answer = stored.answer.clone();
            answer.replayed = true;
            entry.outcome = Outcome::Replayed;
            entry.resource = Some(stored.resource.clone());
            entry.generation = Some(stored.generation);
            self.raise(&fence);
            return answer;
        }

        // 4. Validate and apply.
        if let Err(why) = check_bucket_name(name) {
            return reject(entry, 400, why);
        }
        let applied = if *method == Method::PUT {
            let spec: BucketSpec = match serde_json::from_slice(body) {
                Ok(spec) => spec,
                Err(error) => {
                    return reject(
                        entry,
                        400,
                        format!(
                            "the body is not a bucket spec {{\"size_gb\": N, \"region\": \"...\"}}: {error}"
                        ),
                    );
                }
            };
            self.put(name, spec, &fence)
        } else {
            match self.delete(name, &fence) {
                Some(applied) => applied,
                None => return reject(entry, 404, format!("no bucket {name:?}")),
            }
        };
        let (answer, generation) = applied;
        let resource = format!("buckets/{name}");
        self.keys.insert(
            key,
            Stored {
                method: method.as_str().to_string(),
                path: request.path.to_string(),
                body: body.to_vec(),
                answer: answer.clone(),
                resource: resource.clone(),
                generation,
            },
        );
        self.raise(&fence);
        entry.outcome = Outcome::Applied;
        entry.resource = Some(resource);
        entry.generation = Some(generation);
        answer
    }

    fn raise(&mut self, fence: &FenceHeaders) {
        let mark = self.marks.entry(fence.lease.clone()).or_insert(fence.epoch);
        *mark = (*mark).max(fence.epoch);
    }

    fn next_generation(&mut self, name: &str) -> u64 {
        let generation = self.generations.entry(name.to_string()).or_insert(0);
        *generation += 1;
        *generation
    }

    fn put(&mut self, name: &str, spec: BucketSpec, fence: &FenceHeaders) -> (Answer, u64) {
        let generation = self.next_generation(name);
        let bucket = Bucket {
            name: name.to_string(),
            spec,
            generation,
            applied_epoch: fence.epoch,
        };
        let created = self
            .buckets
            .insert(name.to_string(), bucket.clone())
            .is_none();
        tracing::debug!(bucket = name, generation, holder = %fence.holder, "bucket applied");
        let status = if created { 201 } else { 200 };
        (Answer::json(status, &to_value(&bucket)), generation)
    }

    fn delete(&mut self, name: &str, fence: &FenceHeaders) -> Option<(Answer, u64)> {
        let bucket = self.buckets.remove(name)?;
        let generation = self.next_generation(name);
        tracing::debug!(bucket = name, generation, holder = %fence.holder, "bucket deleted");
        let body = json!({
            "name": bucket.name,
            "deleted": true,
            "generation": generation,
            "applied_epoch": fence.epoch,
        });
        Some((Answer::json(200, &body), generation))
    }

    fn read(&self, bucket: Option<&str>) -> Answer {
        match bucket {
            None => {
                let items: Vec<Value> = self.buckets.values().map(to_value).collect();
                Answer::json(200, &json!({ "items": items }))
            }
            Some(name) => match self.buckets.get(name) {
                Some(bucket) => Answer::json(200, &to_value(bucket)),
                None => Answer::error(404, format!("no bucket {name:?}")),
            },
        }
    }
}

fn to_value(bucket: &Bucket) -> Value {
    json!({
        "name": bucket.name,
        "spec": { "size_gb": bucket.spec.size_gb, "region": bucket.spec.region },
        "generation": bucket.generation,
        "applied_epoch": bucket.applied_epoch,
    })
}

fn reject(entry: &mut RecordEntry, status: u16, why: String) -> Answer {
    entry.outcome = Outcome::Rejected;
    entry.detail = Some(why.clone());
    Answer::error(status, why)
}

/// The one value of header `name`: `Ok(None)` if absent, an error if it
/// is repeated or not visible ASCII.
fn single<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, String> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!("{name} is given more than once"));
    }
    let text = value
        .to_str()
        .map_err(|_| format!("{name} is not visible ASCII"))?;
    Ok(Some(text))
}

/// Header `name` parsed by `parse`; a problem is pushed when it is
/// missing or malformed.
fn fence_header<T>(
    headers: &HeaderMap,
    name: &str,
    parse: impl Fn(&str) -> Result<T, String>,
    problems: &mut Vec<String>,
) -> Option<T> {
    let result = match single(headers, name) {
        Ok(Some(text)) => parse(text).map_err(|why| format!("{name} {why}")),
        Ok(None) => Err(format!("{name} is missing")),
        Err(why) => Err(why),
    };
    result.map_err(|problem| problems.push(problem)).ok()
}

fn check_text(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("is empty".into());
    }
    if text.len() > MAX_HEADER_VALUE_BYTES {
        return Err(format!("is longer than {MAX_HEADER_VALUE_BYTES} bytes"));
    }
    if text.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err("has whitespace or control characters".into());
    }
    Ok(text.to_string())
}

fn check_lease(text: &str) -> Result<String, String> {
    let lease = check_text(text)?;
    match lease.split_once('/') {
        Some((cluster, name)) if !cluster.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(lease)
        }
        _ => Err(format!("{text:?} is not <cluster>/<lease>")),
    }
}

fn check_key(text: &str) -> Result<String, String> {
    check_text(text)
}

/// A decimal epoch: digits only, no sign or spaces, within `u64`.
pub(crate) fn parse_epoch(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a decimal number"));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is too large for an epoch"))
}

fn check_bucket_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_BUCKET_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bucket name {name:?} is not a DNS label (1 to {MAX_BUCKET_NAME_LEN} of a-z, 0-9 and \
             '-', not at either end)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn fenced(lease: &str, epoch: u64, key: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(headers::LEASE, HeaderValue::from_str(lease).unwrap());
        headers.insert(headers::EPOCH, HeaderValue::from(epoch));
        headers.insert(headers::HOLDER, HeaderValue::from_static("host-a"));
        headers.insert(
            headers::IDEMPOTENCY_KEY,
            HeaderValue::from_str(key).unwrap(),
        );
        headers
    }

    fn put(
        state: &mut State,
        headers: &HeaderMap,
        name: &str,
        body: &str,
    ) -> (Answer, RecordEntry) {
        let path = format!("/buckets/{name}");
        let (answer, _, entry) = state.decide(Incoming {
            method: &Method::PUT,
            path: &path,
            bucket: Some(name),
            headers,
            body: Some(Body::Read(body.as_bytes().to_vec())),
        });
        (answer, entry)
    }

    const SPEC: &str = r#"{"size_gb":10,"region":"eu"}"#;

    #[test]
    fn the_mark_is_per_lease_and_only_rises() {
        let mut state = State::default();
        let (answer, _) = put(&mut state, &fenced("c/p", 3, "k1"), "a", SPEC);
        assert_eq!(answer.status, 201);
        let (answer, entry) = put(&mut state, &fenced("c/p", 2, "k2"), "b", SPEC);
        assert_eq!((answer.status, entry.outcome), (409, Outcome::Stale));
        // Another lease is not affected by c/p's mark.
        let (answer, _) = put(&mut state, &fenced("c/q", 1, "k3"), "b", SPEC);
        assert_eq!(answer.status, 201);
        assert_eq!(state.mark("c/p"), Some(3));
        assert_eq!(state.mark("c/q"), Some(1));
    }

    #[test]
    fn a_rejected_request_does_not_raise_the_mark() {
        let mut state = State::default();
        let (answer, _) = put(&mut state, &fenced("c/p", 9, "k1"), "a", "not json");
        assert_eq!(answer.status, 400);
        assert_eq!(state.mark("c/p"), None);
        let (answer, _) = put(&mut state, &fenced("c/p", 1, "k2"), "a", SPEC);
        assert_eq!(answer.status, 201);
    }

    #[test]
    fn malformed_epochs_are_refused() {
        for bad in [
            "",
            "+1",
            "-1",
            " 1",
            "1.0",
            "0x1",
            "99999999999999999999999",
        ] {
            assert!(parse_epoch(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_epoch("0"), Ok(0));
        assert_eq!(parse_epoch("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn a_lease_is_cluster_slash_name() {
        assert!(check_lease("demo/provisioner").is_ok());
        for bad in ["provisioner", "/p", "c/", "c/p/q", "c /p"] {
            assert!(check_lease(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn generations_count_every_effect_across_delete() {
        let mut state = State::default();
        put(&mut state, &fenced("c/p", 1, "k1"), "a", SPEC);
        put(&mut state, &fenced("c/p", 1, "k2"), "a", SPEC);
        let (answer, _, entry) = state.decide(Incoming {
            method: &Method::DELETE,
            path: "/buckets/a",
            bucket: Some("a"),
            headers: &fenced("c/p", 1, "k3"),
            body: Some(Body::Read(Vec::new())),
        });
        assert_eq!((answer.status, entry.generation), (200, Some(3)));
        let (answer, entry) = put(&mut state, &fenced("c/p", 1, "k4"), "a", SPEC);
        assert_eq!((answer.status, entry.generation), (201, Some(4)));
        assert_eq!(state.bucket("a").map(|b| b.generation), Some(4));
    }
}
