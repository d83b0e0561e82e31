//! The simulated services a world's controller may call: the model
//! `fenced-receiver`.
//!
//! A fenced receiver applies `PUT`, `POST`, `PATCH` and `DELETE` at any
//! path under its URL, and follows the fenced receiver rule
//! (docs/contract.md) as `receiver/` does on the wire:
//!
//! - it keeps the highest `Leasehold-Epoch` it accepted per
//!   `Leasehold-Lease` and refuses a lower one with
//!   `409 {"error": "stale epoch", "highest": N}`, applying nothing (stale
//!   first: even a key it knows);
//! - it applies an `Idempotency-Key` once: a repeat gets the stored answer
//!   with `Idempotency-Replayed: true` and applies nothing; a key reused
//!   for another method, path or body is refused with 422;
//! - an applied `PUT`/`POST`/`PATCH` stores the body as the resource at
//!   that path and answers 201 (new) or 200 `{"generation": n}`, `n`
//!   counting the applications at that path; a `DELETE` removes it (200
//!   `{"generation": n, "deleted": true}`) or answers 404 when there is
//!   nothing there, applying nothing; a `GET` answers the resource
//!   `{"generation": n, "body": ...}` or 404;
//! - it records every application: method, path, body (parsed JSON), key
//!   and epoch, the world's `services.<name>.applied`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::outbound::{AllowList, headers};
use crate::runtime::{SimulatedRequest, SimulatedResponse};

/// The only model a world's `[[services]]` may name.
pub const FENCED_RECEIVER: &str = "fenced-receiver";

/// The request header naming one effect.
const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The answer header of a replayed answer.
const REPLAYED: &str = "idempotency-replayed";

/// One application a service recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// `PUT`, `POST`, `PATCH` or `DELETE`.
    pub method: String,
    /// The request's path (without a query).
    pub path: String,
    /// The body, parsed as JSON; a body that is not JSON as a string, an
    /// empty one as null.
    pub body: Value,
    /// The `Idempotency-Key`, if the request had one.
    pub key: Option<String>,
    /// The `Leasehold-Epoch` it carried.
    pub epoch: u64,
    /// The `Leasehold-Lease` it carried.
    pub lease: String,
}

#[derive(Debug, Clone)]
struct Stored {
    method: String,
    path: String,
    body: Vec<u8>,
    answer: SimulatedResponse,
}

#[derive(Debug, Clone)]
struct Resource {
    body: Value,
    generation: u64,
}

/// What a service made of one request.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The answer.
    pub response: SimulatedResponse,
    /// Whether it applied the request (a new entry in `applied`).
    pub applied: bool,
    /// For traces: applied, replayed, stale, refused, read.
    pub outcome: &'static str,
    /// A breach of the fence the service saw (an effect accepted without
    /// the fence, or below an epoch it had accepted): what the property
    /// "no stale effect accepted" reports.
    pub stale: Option<String>,
}

/// One simulated service of the model [`FENCED_RECEIVER`].
#[derive(Debug, Clone)]
pub struct Service {
    /// Its name (`services.<name>`).
    pub name: String,
    base: AllowList,
    marks: BTreeMap<String, u64>,
    keys: BTreeMap<String, Stored>,
    resources: BTreeMap<String, Resource>,
    generations: BTreeMap<String, u64>,
    applied: Vec<Applied>,
}

impl Service {
    /// A service at `url`, which [`AllowList::parse`] accepted.
    pub fn new(name: &str, url: &str) -> Result<Self, String> {
        Ok(Self {
            name: name.to_string(),
            base: AllowList::parse(&[url])?,
            marks: BTreeMap::new(),
            keys: BTreeMap::new(),
            resources: BTreeMap::new(),
            generations: BTreeMap::new(),
            applied: Vec::new(),
        })
    }

    /// Whether `uri` is under this service's URL.
    pub fn serves(&self, uri: &http::Uri) -> bool {
        self.base.check(uri).is_ok()
    }

    /// Every application, in order.
    #[cfg(test)]
    pub fn applied(&self) -> &[Applied] {
        &self.applied
    }

    /// What the world's invariants see of the service: `applied` and
    /// `resources` (path to `{body, generation}`).
    pub fn view(&self) -> Value {
        let applied: Vec<Value> = self
            .applied
            .iter()
            .map(|a| {
                json!({
                    "method": a.method,
                    "path": a.path,
                    "body": a.body,
                    "key": a.key,
                    "epoch": a.epoch,
                })
            })
            .collect();
        let resources: serde_json::Map<String, Value> = self
            .resources
            .iter()
            .map(|(path, r)| {
                (
                    path.clone(),
                    json!({ "body": r.body, "generation": r.generation }),
                )
            })
            .collect();
        json!({ "applied": applied, "resources": resources })
    }

    /// Decide, apply and record `request`.
    pub fn handle(&mut self, request: &SimulatedRequest, path: &str) -> Decision {
        let method = request.method.to_ascii_uppercase();
        if method == "GET" || method == "HEAD" {
            let response = match self.resources.get(path) {
                Some(r) => answer(200, &json!({ "generation": r.generation, "body": r.body })),
                None => answer(404, &json!({ "error": "not found" })),
            };
            return decided(response, false, "read", None);
        }
        if !matches!(method.as_str(), "PUT" | "POST" | "PATCH" | "DELETE") {
            let response = answer(
                405,
                &json!({ "error": format!("method {method} is not allowed") }),
            );
            return decided(response, false, "refused", None);
        }
        let lease = request.header(headers::LEASE).map(str::to_string);
        let epoch = request
            .header(headers::EPOCH)
            .and_then(|e| e.trim().parse::<u64>().ok());
        let (Some(lease), Some(epoch)) = (lease, epoch) else {
            let response = answer(400, &json!({ "error": "the fence headers are missing" }));
            let breach = format!(
                "{method} {path} reached service {} without the fence headers the host sets",
                self.name
            );
            return decided(response, false, "refused", Some(breach));
        };
        // Stale first: a deposed leader is told so even for a key it knows.
        if let Some(&highest) = self.marks.get(&lease)
            && epoch < highest
        {
            let response = answer(
                409,
                &json!({ "error": "stale epoch", "highest": highest, "lease": lease, "epoch": epoch }),
            );
            return decided(response, false, "stale", None);
        }
        let key = request.header(IDEMPOTENCY_KEY).map(str::to_string);
        if let Some(key) = &key
            && let Some(stored) = self.keys.get(key)
        {
            if stored.method != method || stored.path != path || stored.body != request.body {
                let response = answer(
                    422,
                    &json!({ "error": format!(
                        "idempotency key {key:?} was used for {} {} with another body or target",
                        stored.method, stored.path
                    ) }),
                );
                return decided(response, false, "refused", None);
            }
            let mut response = stored.answer.clone();
            response.headers.push((REPLAYED.into(), "true".into()));
            self.raise(&lease, epoch);
            return decided(response, false, "replayed", None);
        }
        let body = parse_body(&request.body);
        let generation = |service: &mut Self| {
            let n = service.generations.entry(path.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        let response = if method == "DELETE" {
            if self.resources.remove(path).is_none() {
                let response = answer(404, &json!({ "error": "not found" }));
                return decided(response, false, "refused", None);
            }
            let n = generation(self);
            answer(200, &json!({ "generation": n, "deleted": true }))
        } else {
            let n = generation(self);
            let created = self
                .resources
                .insert(
                    path.to_string(),
                    Resource {
                        body: body.clone(),
                        generation: n,
                    },
                )
                .is_none();
            answer(if created { 201 } else { 200 }, &json!({ "generation": n }))
        };
        // The model's own rule, checked again from its record: an accepted
        // epoch never goes below one accepted before for the lease.
        let stale = self
            .applied
            .iter()
            .filter(|a| a.lease == lease && a.epoch > epoch)
            .map(|a| a.epoch)
            .max()
            .map(|above| {
                format!(
                    "service {} applied {method} {path} at epoch {epoch} of {lease} after it had \
                     accepted epoch {above}",
                    self.name
                )
            });
        if let Some(key) = &key {
            self.keys.insert(
                key.clone(),
                Stored {
                    method: method.clone(),
                    path: path.to_string(),
                    body: request.body.clone(),
                    answer: response.clone(),
                },
            );
        }
        self.raise(&lease, epoch);
        self.applied.push(Applied {
            method,
            path: path.to_string(),
            body,
            key,
            epoch,
            lease,
        });
        decided(response, true, "applied", stale)
    }

    fn raise(&mut self, lease: &str, epoch: u64) {
        let mark = self.marks.entry(lease.to_string()).or_insert(epoch);
        *mark = (*mark).max(epoch);
    }
}

fn decided(
    response: SimulatedResponse,
    applied: bool,
    outcome: &'static str,
    stale: Option<String>,
) -> Decision {
    Decision {
        response,
        applied,
        outcome,
        stale,
    }
}

fn answer(status: u16, body: &Value) -> SimulatedResponse {
    SimulatedResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

/// A request body as the record shows it: JSON, else text, empty as null.
fn parse_body(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, epoch: u64, key: Option<&str>, body: &str) -> SimulatedRequest {
        let mut headers = vec![
            (headers::LEASE.to_string(), "sim/p".to_string()),
            (headers::EPOCH.to_string(), epoch.to_string()),
            (headers::HOLDER.to_string(), "replica-1".to_string()),
        ];
        if let Some(key) = key {
            headers.push((IDEMPOTENCY_KEY.to_string(), key.to_string()));
        }
        SimulatedRequest {
            method: method.into(),
            url: "http://cloud.sim/buckets/a".into(),
            headers,
            body: body.to_string().into_bytes(),
            first_byte_timeout: None,
        }
    }

    fn body(decision: &Decision) -> Value {
        serde_json::from_slice(&decision.response.body).unwrap()
    }

    /// A key is applied once and replayed after; a lower epoch than one
    /// accepted is refused stale, even for a known key; every application
    /// is recorded with its method, path, parsed body, key and epoch.
    #[test]
    fn a_fenced_receiver_applies_each_key_once_and_refuses_stale_epochs() {
        let mut cloud = Service::new("cloud", "http://cloud.sim").unwrap();
        let path = "/buckets/a";
        let first = cloud.handle(&request("PUT", 1, Some("k1"), r#"{"size":1}"#), path);
        assert_eq!((first.response.status, first.outcome), (201, "applied"));
        assert_eq!(body(&first), json!({ "generation": 1 }));
        let again = cloud.handle(&request("PUT", 2, Some("k1"), r#"{"size":1}"#), path);
        assert_eq!((again.response.status, again.outcome), (201, "replayed"));
        assert!(
            again
                .response
                .headers
                .contains(&(REPLAYED.into(), "true".into()))
        );
        let stale = cloud.handle(&request("PUT", 1, Some("k1"), r#"{"size":1}"#), path);
        assert_eq!((stale.response.status, stale.outcome), (409, "stale"));
        assert_eq!(body(&stale)["highest"], json!(2));
        let reused = cloud.handle(&request("PUT", 2, Some("k1"), r#"{"size":2}"#), path);
        assert_eq!(reused.response.status, 422);
        let next = cloud.handle(&request("PUT", 2, Some("k2"), r#"{"size":2}"#), path);
        assert_eq!(
            (next.response.status, body(&next)),
            (200, json!({ "generation": 2 }))
        );
        assert_eq!(cloud.applied().len(), 2);
        assert_eq!(cloud.applied()[1].body, json!({ "size": 2 }));
        assert_eq!(cloud.applied()[1].key.as_deref(), Some("k2"));
        assert_eq!(cloud.applied()[1].epoch, 2);
        assert_eq!(
            cloud.view()["resources"][path]["body"],
            json!({ "size": 2 })
        );

        let gone = cloud.handle(&request("DELETE", 2, Some("k3"), ""), path);
        assert_eq!(body(&gone), json!({ "generation": 3, "deleted": true }));
        let missing = cloud.handle(&request("DELETE", 2, Some("k4"), ""), path);
        assert_eq!((missing.response.status, missing.applied), (404, false));
        assert!(cloud.view()["resources"].as_object().unwrap().is_empty());
    }

    /// A request without the fence reaches no effect and is reported as a
    /// breach: the host stamps every request, so this is the host failing.
    #[test]
    fn a_request_without_the_fence_is_a_breach() {
        let mut cloud = Service::new("cloud", "http://cloud.sim").unwrap();
        let mut unfenced = request("PUT", 1, Some("k"), "{}");
        unfenced.headers.retain(|(name, _)| name != headers::EPOCH);
        let decision = cloud.handle(&unfenced, "/x");
        assert_eq!(decision.response.status, 400);
        assert!(decision.stale.is_some());
        assert!(cloud.applied().is_empty());
    }
}
