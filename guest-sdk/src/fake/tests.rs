//! The fake must hold controllers to the host's rules: if it were laxer,
//! a controller could pass its unit tests and fail against the host. The
//! store's rules are the conformance table's (`conformance.rs` runs it);
//! these tests hold what only the fake has: lowered limits, the call's
//! payload, faults, hooks, records, and driving a controller.

use std::cell::Cell;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::controller::{Context, Description, Outcome, Retry};
use crate::error::Error;
use crate::limits::{
    MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES, MAX_EVENTS_PER_COMMIT, MAX_OPS_PER_COMMIT,
    MAX_VALUE_BYTES,
};
use crate::object::Api;
use crate::sys::{self, Op, WireError};
use crate::transaction::Transaction;

fn values() -> Api<Value> {
    Api::new("things")
}

fn invalid<T: std::fmt::Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Invalid(why)) => why,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// A call made straight through the seam: the wire error's message.
fn invalid_wire<T: std::fmt::Debug>(result: Result<T, WireError>) -> String {
    match result {
        Err(WireError::Invalid(why)) => why,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn store_error<T: std::fmt::Debug>(result: Result<T, Error>) -> StoreError {
    match result {
        Err(Error::Store(error)) => error,
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[test]
fn values_must_be_json_within_the_size_limit() {
    let host = FakeHost::with_limits(Limits {
        max_value_bytes: 10,
        ..Limits::default()
    });
    let why = invalid_wire(sys::commit(
        &[Op::Create {
            key: ObjectKey::new("things", "a"),
            value: "{not json".into(),
        }],
        &[],
    ));
    assert!(why.contains("not JSON"), "{why}");
    let why = invalid(
        Transaction::new()
            .create("things", "a", "0123456789")
            .commit(),
    );
    assert!(why.contains("the limit is 10"), "{why}");
    Transaction::new()
        .create("things", "a", "01234567")
        .commit()
        .unwrap();
    assert_eq!(host.commits().len(), 1);
}

#[test]
fn commits_are_bounded_in_ops_events_and_payload() {
    let host = FakeHost::new();
    let many = |n: usize| {
        (0..n).fold(Transaction::new(), |tx, i| {
            tx.create("things", format!("t{i}"), &i)
        })
    };
    invalid(many(MAX_OPS_PER_COMMIT + 1).commit());
    many(MAX_OPS_PER_COMMIT).commit().unwrap();

    let events = |n: usize| {
        (0..n).fold(Transaction::new(), |tx, _| {
            tx.event("things", "a", "Seen", "")
        })
    };
    invalid(events(MAX_EVENTS_PER_COMMIT + 1).commit());
    events(MAX_EVENTS_PER_COMMIT).commit().unwrap();

    invalid(Transaction::new().commit());
    for bad in ["", "seen", "Not Seen", "Sé", "A-b"] {
        invalid(Transaction::new().event("things", "a", bad, "").commit());
    }
    invalid(
        Transaction::new()
            .event("things", "a", "Seen", "nul\0")
            .commit(),
    );
    invalid(
        Transaction::new()
            .event("things", "a", "R".repeat(MAX_EVENT_REASON_BYTES + 1), "")
            .commit(),
    );
    invalid(
        Transaction::new()
            .event(
                "things",
                "a",
                "Seen",
                "m".repeat(MAX_EVENT_MESSAGE_BYTES + 1),
            )
            .commit(),
    );

    // Normalizing can grow a value past the limit: `1e9` is stored as
    // `1000000000.0`.
    let growing = format!("[{}]", vec!["1e9"; MAX_VALUE_BYTES / 4 - 1].join(","));
    let why = invalid_wire(sys::commit(
        &[Op::Create {
            key: ObjectKey::new("things", "grows"),
            value: growing,
        }],
        &[],
    ));
    assert!(why.contains("once normalized"), "{why}");

    // Twenty values, each within its own limit, are too much for one call.
    let big = "x".repeat(MAX_VALUE_BYTES - 2);
    let why = invalid(
        (0..20)
            .fold(Transaction::new(), |tx, i| {
                tx.create("big", format!("b{i}"), &big)
            })
            .commit(),
    );
    assert!(why.contains("payload"), "{why}");
    assert_eq!(host.commits().len(), 2);
}

#[test]
fn call_faults_count_every_sort_of_call() {
    let host = FakeHost::new();
    host.fail(At::Call(3), Fault::Unavailable);
    values().get("a").unwrap();
    values().list(None, 1).unwrap();
    let result = Transaction::new().create("things", "a", &1).commit();
    assert!(matches!(result, Err(StoreError::Unavailable(_))));
    assert!(host.object::<u32>("things", "a").is_none());
    Transaction::new()
        .create("things", "a", &1)
        .commit()
        .unwrap();
    assert_eq!(host.pending_faults(), 0);
}

#[test]
fn commit_faults_skip_reads() {
    let host = FakeHost::new();
    host.fail(At::Commit(1), Fault::Conflict);
    values().get("a").unwrap();
    values().list(None, 1).unwrap();
    let result = Transaction::new().create("things", "a", &1).commit();
    assert_eq!(
        result,
        Err(StoreError::Conflict(ObjectKey::new("things", "a")))
    );
    assert!(host.commits().is_empty());
}

#[test]
fn a_fenced_fault_ends_the_tenure_for_good() {
    let host = FakeHost::new();
    host.fail(At::Call(1), Fault::Fenced);
    assert!(store_error(values().get("a")).is_fenced());
    assert!(store_error(values().get("a")).is_fenced());
    assert!(
        Transaction::new()
            .create("things", "a", &1)
            .commit()
            .unwrap_err()
            .is_fenced()
    );
    assert!(host.commits().is_empty());
    host.new_tenure();
    values().get("a").unwrap();
}

#[test]
fn unavailable_backend_fails_every_call_until_it_is_back() {
    let host = FakeHost::new();
    host.set_unavailable(true);
    assert!(matches!(
        store_error(values().get("a")),
        StoreError::Unavailable(_)
    ));
    assert!(matches!(
        Transaction::new().create("things", "a", &1).commit(),
        Err(StoreError::Unavailable(_))
    ));
    assert!(host.commits().is_empty());
    host.set_unavailable(false);
    Transaction::new()
        .create("things", "a", &1)
        .commit()
        .unwrap();
}

#[test]
fn a_lost_reply_still_lands() {
    let host = FakeHost::new();
    host.fail_next_commit(Fault::LostReply);
    let result = Transaction::new()
        .create("things", "a", &1)
        .event("things", "a", "Made", "")
        .commit();
    assert!(matches!(result, Err(StoreError::Unavailable(_))));
    assert_eq!(host.commits().len(), 1);
    assert_eq!(host.events().len(), 1);
}

#[test]
fn before_commit_writes_land_before_the_commit_is_checked() {
    let host = FakeHost::new();
    let version = host.seed("things", "a", &1);
    host.before_commit(2, |host| {
        host.seed("things", "a", &5);
    });
    Transaction::new()
        .create("things", "b", &1)
        .commit()
        .unwrap();
    assert_eq!(
        host.pending_faults(),
        1,
        "not yet: it is for the second commit"
    );
    let result = Transaction::new()
        .update_if_version("things", "a", version, &2)
        .commit();
    assert_eq!(
        result,
        Err(StoreError::Conflict(ObjectKey::new("things", "a")))
    );
    assert_eq!(host.pending_faults(), 0);
}

#[test]
#[should_panic(expected = "commits only")]
fn commit_only_faults_cannot_be_aimed_at_reads() {
    FakeHost::new().fail(At::Call(1), Fault::LostReply);
}

#[test]
#[should_panic(expected = "no FakeHost on this thread")]
fn store_calls_without_a_fake_host_say_what_to_do() {
    let _ = values().get("a");
}

#[test]
fn long_log_lines_are_truncated_on_a_char_boundary() {
    let host = FakeHost::with_limits(Limits {
        log_line_bytes: 4,
        ..Limits::default()
    });
    crate::info!("abé€");
    assert_eq!(host.logs()[0].message, "abé");
}

#[test]
fn records_carry_the_epoch_of_their_tenure() {
    let host = FakeHost::new();
    Transaction::new()
        .event("things", "a", "One", "")
        .commit()
        .unwrap();
    host.new_tenure();
    Transaction::new()
        .event("things", "a", "Two", "")
        .commit()
        .unwrap();
    crate::info!("after");
    let epochs: Vec<u64> = host.commits().iter().map(|c| c.epoch).collect();
    assert_eq!(epochs, [1, 2]);
    assert_eq!(host.events()[1].epoch, 2);
    assert_eq!(host.logs()[0].epoch, 2);
}

struct Scripted {
    result: fn() -> Result<Outcome, Error>,
    policy_calls: Cell<u32>,
}

impl Scripted {
    fn new(result: fn() -> Result<Outcome, Error>) -> Self {
        Self {
            result,
            policy_calls: Cell::new(0),
        }
    }
}

impl Controller for Scripted {
    fn describe(&self) -> Description {
        Description::watching(["things"])
    }

    fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
        (self.result)()
    }

    fn error_policy(&self, _: &Context, _: &str, _: &str, _: &Error) -> Retry {
        self.policy_calls.set(self.policy_calls.get() + 1);
        Retry::After(Duration::from_secs(9))
    }
}

#[test]
fn fenced_errors_reach_the_host_as_fenced_whatever_the_policy() {
    let host = FakeHost::new();
    let controller = Scripted::new(|| Err(StoreError::Fenced("gone".into()).into()));
    assert_eq!(host.reconcile(&controller, "things", "a"), Reply::Fenced);
    assert_eq!(controller.policy_calls.get(), 0);
}

#[test]
fn other_errors_reach_the_host_with_the_policys_delay() {
    let host = FakeHost::new();
    let controller = Scripted::new(|| Err(StoreError::Unavailable("down".into()).into()));
    let reply = host.reconcile(&controller, "things", "a");
    let Reply::Failed {
        message,
        retry_after,
    } = reply
    else {
        panic!("expected Failed, got {reply:?}");
    };
    assert!(message.contains("store unavailable: down"), "{message}");
    assert_eq!(retry_after, Some(Duration::from_secs(9)));
    assert_eq!(controller.policy_calls.get(), 1);
}

#[test]
fn outcomes_reach_the_host_unchanged() {
    let host = FakeHost::new();
    let done = Scripted::new(|| Ok(Outcome::Done));
    let later = Scripted::new(|| Ok(Outcome::RequeueAfter(Duration::from_millis(250))));
    assert_eq!(host.reconcile(&done, "things", "a"), Reply::Done);
    assert_eq!(
        host.reconcile(&later, "things", "a"),
        Reply::RequeueAfter(Duration::from_millis(250))
    );
}

/// Records the reason of every call, and the one its error policy saw.
#[derive(Default)]
struct ReasonRecorder {
    seen: std::cell::RefCell<Vec<(String, crate::controller::Reason)>>,
}

impl Controller for ReasonRecorder {
    fn describe(&self) -> Description {
        Description::watching(["things"])
    }

    fn reconcile(&self, ctx: &Context, _: &str, name: &str) -> Result<Outcome, Error> {
        self.seen
            .borrow_mut()
            .push((name.to_string(), ctx.reason()));
        if name == "fails" {
            return Err(Error::failed("always"));
        }
        Ok(Outcome::Done)
    }

    fn error_policy(&self, ctx: &Context, _: &str, name: &str, _: &Error) -> Retry {
        self.seen
            .borrow_mut()
            .push((format!("{name} policy"), ctx.reason()));
        Retry::Backoff
    }
}

#[test]
fn each_way_of_driving_a_controller_tells_its_reason() {
    use crate::controller::Reason;

    let host = FakeHost::new();
    host.seed("things", "a", &1);
    host.seed("things", "b", &2);
    let recorder = ReasonRecorder::default();
    host.reconcile(&recorder, "things", "a");
    for reason in [
        Reason::Change,
        Reason::Requeue,
        Reason::Resync,
        Reason::Retry,
    ] {
        host.reconcile_because(&recorder, "things", "a", reason);
    }
    host.resync(&recorder);
    host.reconcile_because(&recorder, "things", "fails", Reason::Retry);
    let seen: Vec<(String, &str)> = recorder
        .seen
        .take()
        .into_iter()
        .map(|(name, reason)| (name, reason.as_str()))
        .collect();
    let expected: Vec<(String, &str)> = [
        ("a", "change"),
        ("a", "change"),
        ("a", "requeue"),
        ("a", "resync"),
        ("a", "retry"),
        ("a", "resync"),
        ("b", "resync"),
        ("fails", "retry"),
        ("fails policy", "retry"),
    ]
    .into_iter()
    .map(|(name, reason)| (name.to_string(), reason))
    .collect();
    assert_eq!(seen, expected);
}

#[test]
fn typed_reads_name_the_object_that_does_not_decode() {
    let host = FakeHost::new();
    host.seed("things", "a", &json!({ "not": "a number" }));
    let result = Api::<u32>::new("things").get("a");
    let Err(Error::Decode { key, .. }) = result else {
        panic!("expected a decode error, got {result:?}");
    };
    assert_eq!(key, ObjectKey::new("things", "a"));
}

#[test]
fn an_injected_quota_refusal_is_typed_and_writes_nothing() {
    let host = FakeHost::new();
    host.fail_next_commit(Fault::QuotaExceeded(crate::error::Quota::CreatesPerSecond));
    let result = Transaction::new().create("things", "a", &1).commit();
    let Err(StoreError::QuotaExceeded(refusal)) = result else {
        panic!("expected a quota refusal, got {result:?}");
    };
    assert_eq!(refusal.quota, crate::error::Quota::CreatesPerSecond);
    assert_eq!(refusal.controller, host.fence().lease);
    assert_eq!(refusal.limit, 100);
    assert_eq!(refusal.retry_after, Some(Duration::from_millis(10)));
    assert!(
        refusal
            .message
            .starts_with(crate::error::QUOTA_EXCEEDED_PREFIX),
        "{}",
        refusal.message
    );
    assert!(host.object::<u32>("things", "a").is_none());
    assert!(host.commits().is_empty());
    // It fires once.
    Transaction::new()
        .create("things", "a", &1)
        .commit()
        .unwrap();
    assert_eq!(host.pending_faults(), 0);
}

#[test]
#[should_panic(expected = "commits only")]
fn quota_faults_cannot_be_aimed_at_reads() {
    FakeHost::new().fail(
        At::Call(1),
        Fault::QuotaExceeded(crate::error::Quota::ObjectsPerKind),
    );
}

/// A controller that creates one object per reconcile, with the default
/// error policy.
struct Creator;

impl Controller for Creator {
    fn describe(&self) -> Description {
        Description::watching(["things"])
    }

    fn reconcile(&self, _: &Context, _: &str, name: &str) -> Result<Outcome, Error> {
        Transaction::new()
            .create("made", name, &json!({}))
            .commit()?;
        Ok(Outcome::Done)
    }
}

#[test]
fn the_default_policy_waits_as_long_as_the_rate_refusal_asks() {
    let host = FakeHost::new();
    host.fail_next_commit(Fault::QuotaExceeded(crate::error::Quota::CreatesPerSecond));
    let reply = host.reconcile(&Creator, "things", "a");
    let Reply::Failed {
        message,
        retry_after,
    } = reply
    else {
        panic!("expected Failed, got {reply:?}");
    };
    assert!(message.starts_with("quota exceeded: "), "{message}");
    assert_eq!(retry_after, Some(Duration::from_millis(10)));
    // The cap on objects has no wait to give: the host backs off.
    host.fail_next_commit(Fault::QuotaExceeded(crate::error::Quota::ObjectsPerKind));
    let reply = host.reconcile(&Creator, "things", "a");
    assert!(
        matches!(
            reply,
            Reply::Failed {
                retry_after: None,
                ..
            }
        ),
        "{reply:?}"
    );
    assert_eq!(host.reconcile(&Creator, "things", "a"), Reply::Done);
}

/// The seam hands out the installed host without keeping it borrowed, so a
/// write scheduled before a call can itself go through the SDK: here a
/// competing reconcile (which re-installs the fake and commits) runs inside
/// the guest's own commit, which then meets a real conflict.
#[test]
fn a_write_before_a_call_may_run_a_controller_through_the_sdk() {
    let host = FakeHost::new();
    host.before_commit(1, |host| {
        assert_eq!(host.reconcile(&Creator, "things", "x"), Reply::Done);
    });
    let result = Transaction::new().create("made", "x", &1).commit();
    assert_eq!(
        result,
        Err(StoreError::Conflict(ObjectKey::new("made", "x")))
    );
    assert_eq!(host.pending_faults(), 0);
    assert_eq!(host.commits().len(), 1, "only the competing reconcile's");
    assert_eq!(host.calls().commit, 2);
}

/// A counter that counts the attempts `retry_on_conflict` makes and fails
/// each with the next scripted error.
fn scripted_attempts(attempts: u32, errors: Vec<StoreError>) -> (Result<u32, Error>, u32) {
    let made = Cell::new(0);
    let mut errors = errors.into_iter();
    let result = crate::retry::retry_on_conflict(attempts, || {
        made.set(made.get() + 1);
        match errors.next() {
            Some(error) => Err(error.into()),
            None => Ok(made.get()),
        }
    });
    (result, made.get())
}

fn conflict() -> StoreError {
    StoreError::Conflict(ObjectKey::new("things", "a"))
}

#[test]
fn retry_on_conflict_retries_failed_preconditions_and_logs_each() {
    let host = FakeHost::new();
    let gone = StoreError::NotFound(ObjectKey::new("things", "b"));
    let (result, made) = scripted_attempts(5, vec![conflict(), gone]);
    assert_eq!(result.unwrap(), 3);
    assert_eq!(made, 3);
    let lines: Vec<String> = host.logs().into_iter().map(|l| l.message).collect();
    assert_eq!(
        lines,
        [
            "things/a changed since it was read; reading again (attempt 2 of 5)",
            "things/b changed since it was read; reading again (attempt 3 of 5)",
        ]
    );
}

#[test]
fn retry_on_conflict_gives_up_after_its_attempts_with_the_conflict() {
    let _host = FakeHost::new();
    let (result, made) = scripted_attempts(3, vec![conflict(); 10]);
    assert_eq!(made, 3);
    assert_eq!(result.unwrap_err().store_error(), Some(&conflict()));
    // Zero attempts still makes one.
    let (result, made) = scripted_attempts(0, vec![conflict()]);
    assert_eq!(made, 1);
    assert!(result.is_err());
}

#[test]
fn retry_on_conflict_returns_other_errors_at_once() {
    let _host = FakeHost::new();
    for error in [
        StoreError::Fenced("gone".into()),
        StoreError::Unavailable("down".into()),
        StoreError::Invalid("bad".into()),
    ] {
        let (result, made) = scripted_attempts(5, vec![error.clone()]);
        assert_eq!(made, 1, "{error:?} must not be retried");
        assert_eq!(result.unwrap_err().store_error(), Some(&error));
    }
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Gauge {
    level: u32,
}

impl crate::object::Kind for Gauge {
    const KIND: &'static str = "gauges";
}

#[test]
fn typed_writes_go_to_the_types_kind_only() {
    let host = FakeHost::new();
    Transaction::new()
        .create_typed("g", &Gauge { level: 1 })
        .commit()
        .unwrap();
    let gauges = Api::<Gauge>::typed();
    assert_eq!(gauges.kind(), "gauges");
    let gauge = gauges.get("g").unwrap().unwrap();
    assert_eq!(gauge.value, Gauge { level: 1 });
    Transaction::new()
        .update_typed(&gauge, &Gauge { level: 2 })
        .commit()
        .unwrap();
    assert_eq!(host.object::<Gauge>("gauges", "g").unwrap().value.level, 2);

    // A gauge-shaped object of another kind is not written as a gauge,
    // and the host is not called.
    host.seed("things", "x", &json!({ "level": 7 }));
    let stray = Api::<Gauge>::new("things").get("x").unwrap().unwrap();
    let commits = host.calls().commit;
    let why = invalid(
        Transaction::new()
            .update_typed(&stray, &Gauge { level: 8 })
            .commit(),
    );
    assert!(why.contains("kind gauges, not things"), "{why}");
    assert!(why.contains("things/x"), "{why}");
    assert_eq!(host.calls().commit, commits);
    assert_eq!(host.object::<Gauge>("things", "x").unwrap().value.level, 7);
}
