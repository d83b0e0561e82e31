//! Admission: the guide's example controller (see the README).
//!
//! It watches `jobs`; a job in state `new` is admitted — its state set to
//! `admitted`, stamped with a ticket unique to this tenure — together with
//! an `Admitted` event, in one fenced commit.

use std::time::Duration;

use leasehold_guest::{
    Context, Controller, Description, Error, Kind, Outcome, Retry, StoreError, retry_on_conflict,
};
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

/// Jobs are stored under the kind `jobs`: `ctx.typed::<Job>()` reads them,
/// and `update_typed` writes a `Job` nowhere else.
impl Kind for Job {
    const KIND: &'static str = "jobs";
}

/// Reads (and commits) after a conflict before the reconcile gives up and
/// is retried.
const MAX_ATTEMPTS: u32 = 3;

/// The controller. It keeps no state: everything it needs is in the store.
#[derive(Debug, Default)]
pub struct Admission;

leasehold_guest::export_controller!(Admission);

impl Controller for Admission {
    fn describe(&self) -> Description {
        Description::watching([Job::KIND]).resync_every(Duration::from_secs(60))
    }

    fn reconcile(&self, ctx: &Context, kind: &str, name: &str) -> Result<Outcome, Error> {
        let jobs = ctx.typed::<Job>();
        // Changed (or deleted) since we read it: read again and decide
        // again, at most MAX_ATTEMPTS times. Fenced: stop (the host hears
        // `fenced`). Unavailable: the host retries with backoff, and the
        // next reconcile re-reads.
        retry_on_conflict(MAX_ATTEMPTS, || {
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
            ctx.transaction()
                .update_typed(&job, &admitted)
                .event(kind, name, "Admitted", "admitted")
                .commit()?;
            // Why the host called (a change, a resync, ...): for the log.
            leasehold_guest::info!("admitted {kind}/{name} ({})", ctx.reason());
            Ok(Outcome::Done)
        })
    }

    fn error_policy(&self, _: &Context, _: &str, _: &str, error: &Error) -> Retry {
        match error.store_error() {
            // Still changing after MAX_ATTEMPTS reads: look again soon.
            Some(StoreError::Conflict(_)) => Retry::After(Duration::from_secs(1)),
            _ => error.retry_hint().map_or(Retry::Backoff, Retry::After),
        }
    }
}

// The fake host exists on native targets: tests run there.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use leasehold_guest::{At, FakeHost, Fault, Reply};
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
    fn a_job_that_keeps_changing_is_retried_soon() {
        let host = FakeHost::new();
        host.seed("jobs", "j1", &json!({ "state": "new" }));
        for n in 1..=u64::from(MAX_ATTEMPTS) {
            host.fail(At::Commit(n), Fault::Conflict);
        }

        let reply = host.reconcile(&Admission, "jobs", "j1");
        assert!(
            matches!(reply, Reply::Failed { retry_after: Some(d), .. } if d == Duration::from_secs(1)),
            "{reply:?}"
        );
        assert_eq!(host.calls().commit, u64::from(MAX_ATTEMPTS));
        assert_eq!(host.reconcile(&Admission, "jobs", "j1"), Reply::Done);
        assert_eq!(
            host.object::<Job>("jobs", "j1").unwrap().value.state,
            "admitted"
        );
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
