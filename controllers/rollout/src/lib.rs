//! The example rollout controller: moves a service from its current
//! version to its desired one, one step at a time, through an ordered list
//! of versions.
//!
//! # Objects
//!
//! `services/NAME`:
//!
//! ```json
//! { "current": "v1", "desired": "v3", "steps": ["v1", "v2", "v3"] }
//! ```
//!
//! `current` and `desired` must both be in `steps` (at most [`MAX_STEPS`]
//! distinct versions). The controller moves `current` one position toward
//! `desired` per reconcile (forward, or backward for a rollback) and keeps
//! its status in the same object: `"phase"` is `"Progressing"`,
//! `"Complete"` or `"Failed"` (with a `"message"` saying why). Every other
//! field is kept as is.
//!
//! # One step, one commit
//!
//! A step is a single commit: the new `current` and phase, conditional on
//! the version the step was planned from, plus a `Stepped` event (and a
//! `RolloutComplete` event when it reaches `desired`). So there is no
//! half-written step in the store: a guest interrupted anywhere — before
//! its commit, or after it but before the host heard back — leaves either
//! the old object (its successor takes the step once) or the new one (its
//! successor sees the step done and plans the next). A successor that
//! re-runs the step from a stale read conflicts instead of repeating it,
//! and a deposed leader's commit is fenced.
//!
//! # Pacing
//!
//! Each step asks to be reconciled again after [`STEP_INTERVAL`]. The step's
//! own event also wakes the controller's watch, so the host may run the
//! next step sooner: the interval bounds the wait between steps, it does
//! not enforce it. A real rollout gates each step on the health of the
//! version it just rolled out, which is an object a step can wait for.

use std::time::Duration;

use leasehold_guest::{
    Context, Controller, Description, Error, Kind, Object, Outcome, Retry, StoreError, Transaction,
    retry_on_conflict,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The kind of the objects rolled out.
pub const SERVICES: &str = "services";
/// The reason of the event recorded with each step.
pub const STEPPED: &str = "Stepped";
/// The reason of the event recorded when `current` reaches `desired`.
pub const COMPLETE: &str = "RolloutComplete";
/// The reason of the event recorded when a service's spec cannot be rolled
/// out.
pub const FAILED: &str = "RolloutFailed";

/// How often every service is looked at again without a change.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(300);
/// The requeue delay after a step that did not reach `desired`.
pub const STEP_INTERVAL: Duration = Duration::from_secs(5);
/// Re-reads after a conflict inside one reconcile before giving up and
/// letting the error policy requeue.
pub const MAX_CONFLICT_RETRIES: u32 = 5;
/// The requeue delay after [`MAX_CONFLICT_RETRIES`] conflicts.
pub const CONFLICT_RETRY_AFTER: Duration = Duration::from_millis(200);
/// Most versions in a service's `steps`.
pub const MAX_STEPS: usize = 64;

/// Where a service's rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// `current` is on its way to `desired`.
    Progressing,
    /// `current` is `desired`.
    Complete,
    /// The spec cannot be rolled out; `message` says why.
    Failed,
}

/// A service's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// The version running now.
    pub current: String,
    /// The version to reach.
    pub desired: String,
    /// The versions to pass through, in order.
    pub steps: Vec<String>,
    /// Where the rollout stands (written by the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Why the rollout failed (written by the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Every other field, kept as is.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Kind for Service {
    const KIND: &'static str = SERVICES;
}

/// What a reconcile should do with a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Move `current` to `to`; `last` when `to` is `desired`.
    Step {
        /// The version it moves from.
        from: String,
        /// The version it moves to.
        to: String,
        /// Whether `to` is the desired version.
        last: bool,
        /// Steps left after this one.
        remaining: usize,
    },
    /// `current` is `desired`.
    Complete,
    /// The spec cannot be rolled out.
    Invalid(String),
}

/// Decide the next step of `service`.
///
/// ```
/// use rollout::{Plan, Service};
///
/// let service: Service = serde_json::from_value(serde_json::json!({
///     "current": "v3", "desired": "v1", "steps": ["v1", "v2", "v3"]
/// }))
/// .unwrap();
/// // A rollback walks the steps backwards.
/// assert!(matches!(rollout::plan(&service), Plan::Step { to, remaining: 1, .. } if to == "v2"));
/// ```
pub fn plan(service: &Service) -> Plan {
    let steps = &service.steps;
    if steps.is_empty() {
        return Plan::Invalid("steps is empty".into());
    }
    if steps.len() > MAX_STEPS {
        return Plan::Invalid(format!(
            "steps has {} versions; the limit is {MAX_STEPS}",
            steps.len()
        ));
    }
    if let Some((i, version)) = steps
        .iter()
        .enumerate()
        .find(|(i, v)| steps[..*i].contains(v))
    {
        return Plan::Invalid(format!("{version} appears twice in steps (again at {i})"));
    }
    let position = |version: &str, what: &str| {
        steps
            .iter()
            .position(|v| v == version)
            .ok_or_else(|| format!("{what} version {version} is not one of the steps"))
    };
    let (from, to) = match (
        position(&service.current, "current"),
        position(&service.desired, "desired"),
    ) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(why), _) | (_, Err(why)) => return Plan::Invalid(why),
    };
    let next = match from.cmp(&to) {
        std::cmp::Ordering::Equal => return Plan::Complete,
        std::cmp::Ordering::Less => from + 1,
        std::cmp::Ordering::Greater => from - 1,
    };
    Plan::Step {
        from: steps[from].clone(),
        to: steps[next].clone(),
        last: next == to,
        remaining: next.abs_diff(to),
    }
}

/// The rollout controller.
#[derive(Debug, Default)]
pub struct Rollout;

leasehold_guest::export_controller!(Rollout);

impl Controller for Rollout {
    fn describe(&self) -> Description {
        Description::watching([SERVICES]).resync_every(RESYNC_PERIOD)
    }

    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
        if kind != Service::KIND {
            leasehold_guest::warn!("asked to reconcile {kind}/{name}, a kind not watched");
            return Ok(Outcome::Done);
        }
        let services = ctx.typed::<Service>();
        // A conflict means the service changed since it was read: read it
        // again and plan again, a bounded number of times. Fenced: stop.
        // Unavailable: the step may have landed; the requeue re-reads and
        // plans from what is there.
        retry_on_conflict(MAX_CONFLICT_RETRIES + 1, || {
            // A service whose value does not fit `Service` fails the
            // reconcile (with backoff) until someone fixes it: there is no
            // spec to act on, and no shape to record a status in.
            let Some(service) = services.get(name)? else {
                return Ok(Outcome::Done);
            };
            let Some((write, outcome)) = next_write(ctx, &service) else {
                return Ok(Outcome::Done);
            };
            write.commit()?;
            Ok(outcome)
        })
    }

    fn error_policy(&self, _: &Context, _: &str, _: &str, error: &Error) -> Retry {
        match error.store_error() {
            Some(StoreError::Conflict(_) | StoreError::NotFound(_)) => {
                Retry::After(CONFLICT_RETRY_AFTER)
            }
            _ => Retry::Backoff,
        }
    }
}

/// The commit that moves `service` on, and the outcome once it lands;
/// `None` when there is nothing to write.
fn next_write(ctx: &Context, service: &Object<Service>) -> Option<(Transaction, Outcome)> {
    let name = service.name.as_str();
    let spec = &service.value;
    let epoch = ctx.fence().epoch;
    match plan(spec) {
        Plan::Step {
            from,
            to,
            last,
            remaining,
        } => {
            let phase = if last {
                Phase::Complete
            } else {
                Phase::Progressing
            };
            let next = Service {
                current: to.clone(),
                phase: Some(phase),
                message: None,
                ..spec.clone()
            };
            let message = format!(
                "{from} -> {to}; {remaining} more step(s) to {} (epoch {epoch})",
                spec.desired
            );
            // The reason (a change, the step timer, a resync, a retry) is
            // for the log only: every step is planned from what is read.
            leasehold_guest::info!("{}: {message} ({})", service.key(), ctx.reason());
            let mut write = Transaction::new()
                .update_typed(service, &next)
                .event(SERVICES, name, STEPPED, message);
            if last {
                write = write.event(SERVICES, name, COMPLETE, format!("running {to}"));
                Some((write, Outcome::Done))
            } else {
                Some((write, Outcome::RequeueAfter(STEP_INTERVAL)))
            }
        }
        // Already there: record it once (a service created at its desired
        // version, or set back by hand).
        Plan::Complete if spec.phase == Some(Phase::Complete) && spec.message.is_none() => None,
        Plan::Complete => {
            let next = Service {
                phase: Some(Phase::Complete),
                message: None,
                ..spec.clone()
            };
            let write = Transaction::new().update_typed(service, &next).event(
                SERVICES,
                name,
                COMPLETE,
                format!("running {}", spec.current),
            );
            Some((write, Outcome::Done))
        }
        // A bad spec is recorded once, not on every reconcile: the status
        // write would otherwise wake the watch again and again.
        Plan::Invalid(why)
            if spec.phase == Some(Phase::Failed) && spec.message.as_deref() == Some(&why) =>
        {
            None
        }
        Plan::Invalid(why) => {
            leasehold_guest::warn!("{} cannot be rolled out: {why}", service.key());
            let next = Service {
                phase: Some(Phase::Failed),
                message: Some(why.clone()),
                ..spec.clone()
            };
            let write = Transaction::new()
                .update_typed(service, &next)
                .event(SERVICES, name, FAILED, why);
            Some((write, Outcome::Done))
        }
    }
}
