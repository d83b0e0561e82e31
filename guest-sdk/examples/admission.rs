//! Admission: the guide's example controller (see the README).
//!
//! It watches `jobs`; a job in state `new` is admitted — its state set to
//! `admitted`, stamped with a ticket unique to this tenure — together with
//! an `Admitted` event, in one fenced commit.

use std::time::Duration;

use leasehold_guest::{Context, Controller, Description, Error, Outcome, StoreError};
use serde::{Deserialize, Serialize};

/// A job's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// `new`, then `admitted`.
    pub state: String,
    /// Who admitted it: cluster, lease, epoch and job name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
}

/// Re-reads after a conflict before the reconcile gives up and is retried.
const MAX_ATTEMPTS: u32 = 3;

/// The controller. It keeps no state: everything it needs is in the store.
#[derive(Debug, Default)]
pub struct Admission;

leasehold_guest::export_controller!(Admission);

impl Controller for Admission {
    fn describe(&self) -> Description {
        Description::watching(["jobs"]).resync_every(Duration::from_secs(60))
    }

    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
        let jobs = ctx.api::<Job>(kind);
        for _ in 0..MAX_ATTEMPTS {
            // Deleted, or already admitted (perhaps by a predecessor whose
            // reply was lost): nothing to do.
            let Some(job) = jobs.get(name)? else {
                return Ok(Outcome::Done);
            };
            if job.value.state != "new" {
                return Ok(Outcome::Done);
            }
            let admitted = Job {
                state: "admitted".into(),
                ticket: Some(ctx.fence().idempotency_key(name)),
            };
            let result = ctx
                .transaction()
                .update(&job, &admitted)
                .event(kind, name, "Admitted", "admitted")
                .commit();
            match result {
                Ok(_) => {
                    leasehold_guest::info!("admitted {kind}/{name}");
                    return Ok(Outcome::Done);
                }
                // Changed since we read it: read again and decide again.
                Err(StoreError::Conflict(_)) => continue,
                // Fenced: stop (the host hears `fenced`). Unavailable: the
                // host retries with backoff, and the next attempt re-reads.
                Err(other) => return Err(other.into()),
            }
        }
        Err(Error::retry_after(
            format!("{kind}/{name} keeps changing"),
            Duration::from_secs(1),
        ))
    }
}

// The fake host exists on native targets: tests run there.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use leasehold_guest::{FakeHost, Fault, Reply};
    use serde_json::json;

    use super::*;

    #[test]
    fn admits_a_new_job_once() {
        let host = FakeHost::new();
        host.seed("jobs", "j1", &json!({ "state": "new" }));

        assert_eq!(host.reconcile(&Admission, "jobs", "j1"), Reply::Done);
        assert_eq!(host.reconcile(&Admission, "jobs", "j1"), Reply::Done);

        let job = host.object::<Job>("jobs", "j1").unwrap();
        assert_eq!(job.value.state, "admitted");
        assert_eq!(job.value.ticket.as_deref(), Some("test/controller/1/j1"));
        assert_eq!(host.events_with_reason("Admitted").len(), 1);
    }

    #[test]
    fn stops_when_fenced() {
        let host = FakeHost::new();
        host.seed("jobs", "j1", &json!({ "state": "new" }));
        host.fail_next_commit(Fault::Fenced);

        assert_eq!(host.reconcile(&Admission, "jobs", "j1"), Reply::Fenced);
        assert!(host.commits().is_empty());
    }

    #[test]
    fn a_successor_does_not_admit_twice_after_a_lost_reply() {
        let host = FakeHost::new();
        host.seed("jobs", "j1", &json!({ "state": "new" }));
        host.fail_next_commit(Fault::LostReply);
        assert!(matches!(
            host.reconcile(&Admission, "jobs", "j1"),
            Reply::Failed { .. }
        ));

        host.new_tenure();
        assert_eq!(host.reconcile(&Admission, "jobs", "j1"), Reply::Done);
        assert_eq!(host.events_with_reason("Admitted").len(), 1);
    }
}
