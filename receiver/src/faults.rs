//! TEST/DEMO ONLY: faults in how the receiver *answers*, enabled by
//! `--test-hooks` or [`crate::ReceiverConfig::test_hooks`].
//!
//! A fault never changes what the receiver decides or applies: the request
//! is judged, applied (or refused) and recorded first, then the fault
//! shapes the delivery of the answer. So "the effect happened but the
//! client never heard" (a lost reply) is exactly what `hang` and
//! `drop_after_apply` produce, and a retry with the same idempotency key
//! must come back as a replay.
//!
//! A fault set with `POST /_faults` (or
//! [`crate::RunningReceiver::set_fault`]) replaces any fault still pending
//! and is consumed by the next `requests` requests to the resource API
//! (`/buckets…`, reads included), whatever they are decided to be.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most requests one fault may be set for.
pub const MAX_FAULT_REQUESTS: u32 = 1_000_000;
/// Longest `delay_ms` and `chunk_interval_ms` accepted.
pub const MAX_FAULT_DELAY: Duration = Duration::from_secs(3600);

/// How the answer to a request is (mis)delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Wait `delay_ms` after deciding (and applying) before answering.
    Delay {
        /// The wait, in milliseconds.
        delay_ms: u64,
    },
    /// Decide and apply, then never answer: the connection stays open
    /// until the client gives up or the receiver stops. A reply lost
    /// after the effect, or a first-byte timeout.
    Hang,
    /// Answer with the decided status and a body that never ends: the
    /// decided JSON followed by spaces forever, a chunk every
    /// `chunk_interval_ms` (0: as fast as the client reads). A response
    /// body bound, or a between-bytes timeout.
    EndlessBody {
        /// Pause between chunks, in milliseconds.
        #[serde(default)]
        chunk_interval_ms: u64,
    },
    /// Decide and apply, then close the connection without a response.
    DropAfterApply,
}

impl Fault {
    /// The name recorded with each request it shaped.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Delay { .. } => "delay",
            Fault::Hang => "hang",
            Fault::EndlessBody { .. } => "endless_body",
            Fault::DropAfterApply => "drop_after_apply",
        }
    }

    /// The fields of its JSON form besides `kind`.
    fn fields(&self) -> &'static [&'static str] {
        match self {
            Fault::Delay { .. } => &["delay_ms"],
            Fault::EndlessBody { .. } => &["chunk_interval_ms"],
            Fault::Hang | Fault::DropAfterApply => &[],
        }
    }

    fn check(&self) -> Result<(), String> {
        let too_long = |ms: u64| Duration::from_millis(ms) > MAX_FAULT_DELAY;
        match *self {
            Fault::Delay { delay_ms } if too_long(delay_ms) => Err(format!(
                "delay_ms {delay_ms} is over {} ms",
                MAX_FAULT_DELAY.as_millis()
            )),
            Fault::EndlessBody { chunk_interval_ms } if too_long(chunk_interval_ms) => {
                Err(format!(
                    "chunk_interval_ms {chunk_interval_ms} is over {} ms",
                    MAX_FAULT_DELAY.as_millis()
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A fault and how many requests it shapes: the body of `POST /_faults`,
/// e.g. `{"kind": "hang", "requests": 1}` or `{"kind": "delay",
/// "delay_ms": 500, "requests": 3}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
pub struct FaultSpec {
    /// The fault.
    #[serde(flatten)]
    pub fault: Fault,
    /// How many of the next requests it shapes (default 1).
    #[serde(default = "one")]
    pub requests: u32,
}

fn one() -> u32 {
    1
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for FaultSpec {
    type Error = String;

    /// `requests` is taken out and the rest must be exactly one [`Fault`]:
    /// serde's `flatten` would let a misspelt field through silently.
    fn try_from(mut fields: serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        let requests = match fields.remove("requests") {
            None => one(),
            Some(value) => value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("requests must be a count, not {value}"))?,
        };
        let fault: Fault = serde_json::from_value(serde_json::Value::Object(fields.clone()))
            .map_err(|error| error.to_string())?;
        // serde ignores extra fields next to a unit variant's tag.
        let known = fault.fields();
        if let Some(unknown) = fields
            .keys()
            .find(|k| k.as_str() != "kind" && !known.contains(&k.as_str()))
        {
            return Err(format!(
                "unknown field {unknown:?} for a {} fault (it takes {known:?} and requests)",
                fault.name()
            ));
        }
        Ok(Self { fault, requests })
    }
}

impl FaultSpec {
    /// `fault` for the next request only.
    pub fn once(fault: Fault) -> Self {
        Self { fault, requests: 1 }
    }

    /// `fault` for the next `requests` requests.
    pub fn times(fault: Fault, requests: u32) -> Self {
        Self { fault, requests }
    }

    /// Whether the spec is within bounds; the reason if not.
    pub fn validate(&self) -> Result<(), String> {
        if self.requests == 0 || self.requests > MAX_FAULT_REQUESTS {
            return Err(format!(
                "requests must be 1 to {MAX_FAULT_REQUESTS}, not {}",
                self.requests
            ));
        }
        self.fault.check()
    }
}

/// The pending fault and how many requests it has left.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    current: Option<(Fault, u32)>,
}

impl Pending {
    pub(crate) fn set(&mut self, spec: FaultSpec) {
        self.current = Some((spec.fault, spec.requests));
    }

    pub(crate) fn clear(&mut self) {
        self.current = None;
    }

    /// The fault for the request being decided, if any, counting it.
    pub(crate) fn take(&mut self) -> Option<Fault> {
        let (fault, left) = self.current.as_mut()?;
        let fault = *fault;
        *left -= 1;
        if *left == 0 {
            self.current = None;
        }
        Some(fault)
    }

    /// What is pending, for `GET /_faults`.
    pub(crate) fn peek(&self) -> Option<FaultSpec> {
        self.current
            .map(|(fault, requests)| FaultSpec { fault, requests })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_shapes_exactly_its_count_of_requests() {
        let mut pending = Pending::default();
        pending.set(FaultSpec::times(Fault::Hang, 2));
        assert_eq!(pending.take(), Some(Fault::Hang));
        assert_eq!(pending.take(), Some(Fault::Hang));
        assert_eq!(pending.take(), None);
        pending.set(FaultSpec::once(Fault::DropAfterApply));
        // Setting replaces what is pending.
        pending.set(FaultSpec::once(Fault::Delay { delay_ms: 5 }));
        assert_eq!(pending.take(), Some(Fault::Delay { delay_ms: 5 }));
        assert_eq!(pending.take(), None);
    }

    #[test]
    fn specs_read_as_documented() {
        let spec: FaultSpec = serde_json::from_str(r#"{"kind":"hang"}"#).unwrap();
        assert_eq!(spec, FaultSpec::once(Fault::Hang));
        let spec: FaultSpec =
            serde_json::from_str(r#"{"kind":"delay","delay_ms":500,"requests":3}"#).unwrap();
        assert_eq!(spec, FaultSpec::times(Fault::Delay { delay_ms: 500 }, 3));
        let spec: FaultSpec = serde_json::from_str(r#"{"kind":"endless_body"}"#).unwrap();
        assert_eq!(
            spec.fault,
            Fault::EndlessBody {
                chunk_interval_ms: 0
            }
        );
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"explode"}"#).is_err());
        // A field of another fault, or a misspelt one, is refused.
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"hang","delay_ms":5}"#).is_err());
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"delay","delay":5}"#).is_err());
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"hang","requests":-1}"#).is_err());
        // What is serialized reads back.
        let spec = FaultSpec::times(
            Fault::EndlessBody {
                chunk_interval_ms: 7,
            },
            4,
        );
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<FaultSpec>(&text).unwrap(), spec);
        assert!(FaultSpec::times(Fault::Hang, 0).validate().is_err());
        assert!(
            FaultSpec::once(Fault::Delay { delay_ms: u64::MAX })
                .validate()
                .is_err()
        );
    }
}
