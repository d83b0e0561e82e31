//! The rollout controller's behaviour against the SDK's fake host.
// The fake host exists on native targets only; these tests are what
// `cargo test` runs there.
#![cfg(not(target_arch = "wasm32"))]

use std::time::Duration;

use leasehold_guest::{At, Context, Controller, FakeHost, Fault, Op, Reply};
use rollout::{
    COMPLETE, CONFLICT_RETRY_AFTER, FAILED, MAX_CONFLICT_RETRIES, MAX_STEPS, Plan, Rollout,
    SERVICES, STEP_INTERVAL, STEPPED, Service,
};
use serde_json::{Value, json};

fn service(host: &FakeHost, current: &str, desired: &str) -> u64 {
    host.seed(
        SERVICES,
        "web",
        &json!({
            "current": current,
            "desired": desired,
            "steps": ["v1", "v2", "v3"],
            "owner": "team-a",
        }),
    )
}

fn web(host: &FakeHost) -> Value {
    host.object::<Value>(SERVICES, "web")
        .expect("web exists")
        .value
}

/// The `from -> to` of every `Stepped` event, in order.
fn steps_taken(host: &FakeHost) -> Vec<String> {
    host.events_with_reason(STEPPED)
        .into_iter()
        .map(|e| e.message.split(';').next().unwrap().to_string())
        .collect()
}

fn reconcile(host: &FakeHost) -> Reply {
    host.reconcile(&Rollout, SERVICES, "web")
}

fn failed_with(reply: &Reply) -> (&str, Option<Duration>) {
    match reply {
        Reply::Failed {
            message,
            retry_after,
        } => (message, *retry_after),
        other => panic!("expected a failed reconcile, got {other:?}"),
    }
}

#[test]
fn describes_services_with_a_resync() {
    let description = Rollout.describe();
    assert_eq!(description.watches, [SERVICES]);
    assert_eq!(description.resync, Some(rollout::RESYNC_PERIOD));
}

#[test]
fn rolls_forward_one_step_per_reconcile_with_an_event_each() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");

    assert_eq!(reconcile(&host), Reply::RequeueAfter(STEP_INTERVAL));
    assert_eq!(web(&host)["current"], "v2");
    assert_eq!(web(&host)["phase"], "Progressing");

    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(
        web(&host),
        json!({
            "current": "v3",
            "desired": "v3",
            "steps": ["v1", "v2", "v3"],
            "owner": "team-a",
            "phase": "Complete",
        })
    );
    assert_eq!(steps_taken(&host), ["v1 -> v2", "v2 -> v3"]);
    assert_eq!(host.events_with_reason(COMPLETE).len(), 1);

    // Each step is one conditional update with its events.
    let commits = host.commits();
    assert_eq!(commits.len(), 2);
    for commit in &commits {
        assert!(
            matches!(commit.ops.as_slice(), [Op::Update { .. }]),
            "{commit:?}"
        );
    }
    assert_eq!(commits[1].events.len(), 2, "the last step also completes");

    // Done is done: nothing more is written.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.commits().len(), 2);
}

#[test]
fn rolls_back_through_the_steps_in_reverse() {
    let host = FakeHost::new();
    service(&host, "v3", "v1");
    assert_eq!(reconcile(&host), Reply::RequeueAfter(STEP_INTERVAL));
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(steps_taken(&host), ["v3 -> v2", "v2 -> v1"]);
    assert_eq!(web(&host)["current"], "v1");
}

#[test]
fn a_conflict_is_re_read_and_the_step_replanned() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    // A user lowers the target while the first step is being committed.
    host.before_commit(1, |host| {
        service(host, "v1", "v2");
    });

    assert_eq!(reconcile(&host), Reply::Done, "v2 is now the last step");

    assert_eq!(host.pending_faults(), 0, "the concurrent write happened");
    assert_eq!(host.calls().commit, 2, "one conflict, one retry");
    assert_eq!(steps_taken(&host), ["v1 -> v2"]);
    assert_eq!(
        web(&host)["desired"],
        "v2",
        "the retry kept the user's change"
    );
    assert_eq!(web(&host)["phase"], "Complete");
}

#[test]
fn a_step_raced_by_the_same_step_lands_once() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    // Another run of the very same reconcile commits first; ours was
    // planned from the version before it.
    host.before_commit(1, |_| {
        let other = Rollout;
        other
            .reconcile(&Context::new(), SERVICES, "web")
            .expect("the other run commits");
    });

    assert_eq!(reconcile(&host), Reply::Done);

    assert_eq!(host.pending_faults(), 0);
    assert_eq!(
        steps_taken(&host),
        ["v1 -> v2", "v2 -> v3"],
        "the raced step is not repeated; the loser moved on to the next"
    );
    assert_eq!(web(&host)["current"], "v3");
}

#[test]
fn conflict_retries_are_bounded_then_requeued_soon() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    let attempts = u64::from(MAX_CONFLICT_RETRIES) + 1;
    for n in 1..=attempts {
        host.fail(At::Commit(n), Fault::Conflict);
    }

    let reply = reconcile(&host);

    let (message, retry_after) = failed_with(&reply);
    assert!(message.contains("conflict"), "{message}");
    assert_eq!(retry_after, Some(CONFLICT_RETRY_AFTER));
    assert_eq!(host.calls().commit, attempts);
    assert!(host.commits().is_empty());
    assert_eq!(web(&host)["current"], "v1");
}

#[test]
fn a_fenced_commit_stops_without_retrying() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    host.fail_next_commit(Fault::Fenced);

    assert_eq!(reconcile(&host), Reply::Fenced);

    assert_eq!(host.calls().commit, 1);
    assert!(host.events().is_empty());
    assert_eq!(web(&host)["current"], "v1");
}

#[test]
fn a_revoked_lease_stops_before_any_write() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    host.revoke();
    assert_eq!(reconcile(&host), Reply::Fenced);
    assert_eq!(host.calls().commit, 0);
}

#[test]
fn an_unavailable_store_fails_for_backoff_and_recovers() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    host.set_unavailable(true);

    let reply = reconcile(&host);
    let (message, retry_after) = failed_with(&reply);
    assert!(message.contains("unavailable"), "{message}");
    assert_eq!(retry_after, None, "the host's exponential backoff decides");
    assert!(host.commits().is_empty());

    host.set_unavailable(false);
    assert_eq!(reconcile(&host), Reply::RequeueAfter(STEP_INTERVAL));
    assert_eq!(steps_taken(&host), ["v1 -> v2"]);
}

#[test]
fn a_successor_re_running_after_a_lost_reply_does_not_repeat_the_step() {
    let host = FakeHost::new();
    service(&host, "v1", "v3");
    // The first step lands, but the guest never hears back.
    host.fail_next_commit(Fault::LostReply);
    let reply = reconcile(&host);
    assert!(matches!(reply, Reply::Failed { .. }), "{reply:?}");
    assert_eq!(web(&host)["current"], "v2");

    // A successor: a new tenure and a fresh controller re-run the same
    // reconcile.
    host.new_tenure();
    let successor = Rollout;
    assert_eq!(
        host.reconcile(&successor, SERVICES, "web"),
        Reply::Done,
        "it takes the next step, not the same one again"
    );

    assert_eq!(steps_taken(&host), ["v1 -> v2", "v2 -> v3"]);
    let epochs: Vec<u64> = host.commits().iter().map(|c| c.epoch).collect();
    assert_eq!(epochs, [1, 2]);
    assert_eq!(host.reconcile(&successor, SERVICES, "web"), Reply::Done);
    assert_eq!(host.commits().len(), 2);
}

#[test]
fn a_bad_spec_is_marked_failed_once_and_resumes_when_fixed() {
    let host = FakeHost::new();
    service(&host, "v1", "v9");

    assert_eq!(reconcile(&host), Reply::Done);
    let web_now = web(&host);
    assert_eq!(web_now["phase"], "Failed");
    assert!(
        web_now["message"].as_str().unwrap().contains("v9"),
        "{web_now}"
    );
    assert_eq!(host.events_with_reason(FAILED).len(), 1);

    // Its own status write wakes the watch: that reconcile writes nothing.
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.commits().len(), 1);

    // Fixed by a user (who keeps the status fields): the rollout proceeds
    // and the failure is cleared.
    let mut fixed = web(&host);
    fixed["desired"] = json!("v2");
    host.seed(SERVICES, "web", &fixed);
    assert_eq!(reconcile(&host), Reply::Done);
    let web_now = web(&host);
    assert_eq!(
        (web_now["current"].as_str(), web_now["phase"].as_str()),
        (Some("v2"), Some("Complete"))
    );
    assert!(web_now.get("message").is_none(), "{web_now}");
}

#[test]
fn a_service_already_at_its_desired_version_is_marked_complete_once() {
    let host = FakeHost::new();
    service(&host, "v2", "v2");
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(web(&host)["phase"], "Complete");
    assert_eq!(host.events_with_reason(COMPLETE).len(), 1);
    assert!(steps_taken(&host).is_empty());
    assert_eq!(reconcile(&host), Reply::Done);
    assert_eq!(host.commits().len(), 1);
}

#[test]
fn a_malformed_service_fails_and_is_retried_with_backoff() {
    let host = FakeHost::new();
    host.seed(
        SERVICES,
        "web",
        &json!({ "current": "v1", "steps": "v1,v2" }),
    );
    let reply = reconcile(&host);
    let (message, retry_after) = failed_with(&reply);
    assert!(message.contains("services/web"), "{message}");
    assert_eq!(retry_after, None);
    assert!(host.commits().is_empty());
}

#[test]
fn a_deleted_service_needs_no_write() {
    let host = FakeHost::new();
    assert_eq!(reconcile(&host), Reply::Done);
    assert!(host.commits().is_empty());
}

fn spec(current: &str, desired: &str, steps: &[&str]) -> Service {
    serde_json::from_value(json!({ "current": current, "desired": desired, "steps": steps }))
        .unwrap()
}

#[test]
fn plans_reject_specs_that_cannot_be_rolled_out() {
    let invalid = |s: &Service| match rollout::plan(s) {
        Plan::Invalid(why) => why,
        other => panic!("expected Invalid, got {other:?}"),
    };
    assert!(invalid(&spec("v1", "v1", &[])).contains("empty"));
    assert!(invalid(&spec("v1", "v2", &["v1", "v2", "v1"])).contains("twice"));
    assert!(invalid(&spec("v0", "v2", &["v1", "v2"])).contains("current version v0"));
    assert!(invalid(&spec("v1", "v5", &["v1", "v2"])).contains("desired version v5"));
    let many: Vec<String> = (0..=MAX_STEPS).map(|i| format!("v{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(invalid(&spec("v0", "v1", &many)).contains("limit"));
    assert_eq!(
        rollout::plan(&spec("v2", "v2", &["v1", "v2"])),
        Plan::Complete
    );
}
