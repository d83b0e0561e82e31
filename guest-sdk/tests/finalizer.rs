//! `finalizer()`, conditions and typed events against the fake host, which
//! keeps the store's finalizer, generation and event rules.

use std::cell::Cell;
use std::time::Duration;

use leasehold_guest::http::HttpError;
use leasehold_guest::{
    Api, Condition, ConditionStatus, Context, Controller, Description, Error, EventType, FakeHost,
    Fault, FinalizerError, MAX_EVENT_MESSAGE_BYTES, Metadata, Object, Op, Outcome, Reply,
    StoreError, Transaction, finalizer, get_condition, set_condition,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const OURS: &str = "example.com/ours";
const THEIRS: &str = "example.com/theirs";

fn read(name: &str) -> Object {
    Api::<Value>::new("things")
        .get(name)
        .expect("a read")
        .expect("the object exists")
}

/// What the closures saw and did.
#[derive(Default)]
struct Calls {
    applied: Cell<u32>,
    cleaned: Cell<u32>,
}

fn run(
    object: Object,
    calls: &Calls,
    cleanup: impl FnOnce(&Object) -> Result<Transaction, Error>,
) -> Result<Outcome, FinalizerError> {
    finalizer(
        object,
        OURS,
        |_| {
            calls.applied.set(calls.applied.get() + 1);
            Ok(Outcome::RequeueAfter(Duration::from_secs(7)))
        },
        |object| {
            calls.cleaned.set(calls.cleaned.get() + 1);
            cleanup(object)
        },
    )
}

fn released(object: &Object) -> Result<Transaction, Error> {
    Ok(Transaction::new().event("things", object.name.as_str(), "Released", "let go"))
}

#[test]
fn a_new_object_gets_the_finalizer_then_apply_sees_it_as_written() {
    let host = FakeHost::new();
    host.seed_with(
        "things",
        "a",
        &json!({ "n": 1 }),
        &Metadata::new().label("k", "v"),
    );
    let before = read("a");

    let seen = Cell::new(None);
    let outcome = finalizer(
        before.clone(),
        OURS,
        |object| {
            seen.set(Some(object.clone()));
            Ok(Outcome::Done)
        },
        |_| unreachable!("not marked"),
    )
    .unwrap();
    assert_eq!(outcome, Outcome::Done);

    // One commit: the finalizer, conditional on the version read.
    let commits = host.commits();
    assert_eq!(commits.len(), 1);
    match &commits[0].ops[..] {
        [
            Op::Replace {
                key,
                expected_version,
                value: None,
                meta: Some(meta),
            },
        ] => {
            assert_eq!(key, &before.key());
            assert_eq!(*expected_version, before.version);
            assert_eq!(meta.finalizers, [OURS]);
            assert_eq!(meta.labels["k"], "v", "the rest of the metadata is kept");
        }
        other => panic!("expected the finalizer's metadata write, got {other:?}"),
    }
    // Apply saw exactly what a read now gives: the new version, the next
    // generation, the finalizer.
    let applied = seen.take().expect("apply ran");
    assert_eq!(applied, read("a"));
    assert_eq!(applied.generation, before.generation + 1);
    assert!(applied.has_finalizer(OURS));

    // With the finalizer on, only apply runs, and the helper writes nothing.
    let calls = Calls::default();
    assert_eq!(
        run(read("a"), &calls, released),
        Ok(Outcome::RequeueAfter(Duration::from_secs(7))),
        "apply's outcome is the reconcile's"
    );
    assert_eq!((calls.applied.get(), calls.cleaned.get()), (1, 0));
    assert_eq!(host.commits().len(), 1);
}

#[test]
fn adding_the_finalizer_to_an_object_changed_since_the_read_conflicts_and_apply_does_not_run() {
    let host = FakeHost::new();
    host.seed("things", "a", &json!({ "n": 1 }));
    let stale = read("a");
    host.seed("things", "a", &json!({ "n": 2 }));

    let calls = Calls::default();
    let result = run(stale, &calls, released);
    assert_eq!(
        result,
        Err(FinalizerError::AddFinalizer(StoreError::Conflict(
            leasehold_guest::ObjectKey::new("things", "a")
        )))
    );
    assert_eq!(calls.applied.get(), 0);
    assert!(!read("a").has_finalizer(OURS));
    // `?` keeps the conflict a conflict, for retry_on_conflict.
    let error: Error = result.unwrap_err().into();
    assert!(error.store_error().is_some_and(StoreError::is_conflict));
}

#[test]
fn a_marked_object_is_cleaned_up_and_let_go_in_one_commit() {
    let host = FakeHost::new();
    host.seed_with("things", "a", &json!({}), &Metadata::new().finalizer(OURS));
    host.remove("things", "a");
    let marked = read("a");
    assert!(marked.is_deleting());

    let calls = Calls::default();
    assert_eq!(run(marked.clone(), &calls, released), Ok(Outcome::Done));
    assert_eq!((calls.applied.get(), calls.cleaned.get()), (0, 1));
    assert!(
        Api::<Value>::new("things").get("a").unwrap().is_none(),
        "its last finalizer gone, the object is gone"
    );
    let commits = host.commits();
    assert_eq!(
        commits.len(),
        1,
        "the cleanup's event and the removal together"
    );
    assert_eq!(commits[0].events[0].reason, "Released");
    match &commits[0].ops[..] {
        [
            Op::Replace {
                expected_version,
                meta: Some(meta),
                ..
            },
        ] => {
            assert_eq!(*expected_version, marked.version, "conditional on the read");
            assert!(meta.finalizers.is_empty());
        }
        other => panic!("expected the finalizer's removal, got {other:?}"),
    }
}

#[test]
fn another_finalizer_keeps_the_object_marked_without_ours() {
    let host = FakeHost::new();
    let meta = Metadata::new().finalizer(THEIRS).finalizer(OURS);
    host.seed_with("things", "a", &json!({}), &meta);
    host.remove("things", "a");

    let calls = Calls::default();
    assert_eq!(run(read("a"), &calls, released), Ok(Outcome::Done));
    let left = read("a");
    assert!(left.is_deleting());
    assert_eq!(left.finalizers(), [THEIRS]);

    // Ours is gone: a marked object without it calls nothing, writes nothing.
    let calls = Calls::default();
    assert_eq!(run(left, &calls, released), Ok(Outcome::Done));
    assert_eq!((calls.applied.get(), calls.cleaned.get()), (0, 0));
    assert_eq!(host.commits().len(), 1);
}

#[test]
fn a_failed_cleanup_keeps_the_finalizer_and_writes_nothing() {
    let host = FakeHost::new();
    host.seed_with("things", "a", &json!({}), &Metadata::new().finalizer(OURS));
    host.remove("things", "a");

    let calls = Calls::default();
    let result = run(read("a"), &calls, |_| {
        Err(Error::retry_after(
            "the cloud is busy",
            Duration::from_secs(3),
        ))
    });
    assert!(
        matches!(&result, Err(FinalizerError::Cleanup(Error::Failed { message, .. })) if message == "the cloud is busy"),
        "{result:?}"
    );
    assert!(read("a").has_finalizer(OURS));
    assert!(host.commits().is_empty());
    // The retry delay the cleanup asked for survives `?`.
    let error: Error = result.unwrap_err().into();
    assert_eq!(error.retry_hint(), Some(Duration::from_secs(3)));
}

#[test]
fn a_removal_that_conflicts_writes_none_of_the_cleanup() {
    let host = FakeHost::new();
    host.seed_with("things", "a", &json!({}), &Metadata::new().finalizer(OURS));
    host.remove("things", "a");
    let marked = read("a");
    // A status write by someone else between the read and the removal.
    host.set_status("things", "a", &json!({ "phase": "going" }));

    let calls = Calls::default();
    let result = run(marked, &calls, released);
    assert!(
        matches!(
            result,
            Err(FinalizerError::RemoveFinalizer(StoreError::Conflict(_)))
        ),
        "{result:?}"
    );
    assert!(read("a").has_finalizer(OURS));
    assert!(host.events().is_empty(), "the cleanup's event went nowhere");
}

#[test]
fn a_cleanup_that_writes_the_object_itself_is_refused_before_anything_is_sent() {
    let host = FakeHost::new();
    host.seed_with("things", "a", &json!({}), &Metadata::new().finalizer(OURS));
    host.remove("things", "a");

    let calls = Calls::default();
    let result = run(read("a"), &calls, |object| {
        Ok(Transaction::new().update_status(object, &json!({ "phase": "gone" })))
    });
    assert!(
        matches!(&result, Err(FinalizerError::Cleanup(Error::Store(StoreError::Invalid(why)))) if why.contains("things/a")),
        "{result:?}"
    );
    assert_eq!(host.calls().commit, 0);
    assert!(read("a").has_finalizer(OURS));
}

#[test]
fn an_apply_failure_is_told_apart() {
    let host = FakeHost::new();
    host.seed_with("things", "a", &json!({}), &Metadata::new().finalizer(OURS));
    let result = finalizer(
        read("a"),
        OURS,
        |_| Err(Error::failed("no room")),
        |_| unreachable!("not marked"),
    );
    assert_eq!(result, Err(FinalizerError::Apply(Error::failed("no room"))));
    assert_eq!(
        result.unwrap_err().to_string(),
        "apply failed: no room",
        "the step is named"
    );
}

/// Whether `things/a` carries our finalizer, read as the test (not the
/// guest, whose tenure may be fenced).
fn held(host: &FakeHost) -> bool {
    host.object::<Value>("things", "a")
        .is_some_and(|object| object.has_finalizer(OURS))
}

/// A controller that reconciles `things` through `finalizer()`, its
/// cleanup calling out: what the host hears is what `?` makes of each
/// step's error.
#[derive(Default)]
struct Releaser;

impl Controller for Releaser {
    fn describe(&self) -> Description {
        Description::watching(["things"])
    }

    fn reconcile(&self, _: &Context, _: &str, name: &str) -> Result<Outcome, Error> {
        let Some(object) = Api::<Value>::new("things").get(name)? else {
            return Ok(Outcome::Done);
        };
        Ok(finalizer(
            object,
            OURS,
            |_| Ok(Outcome::Done),
            |object| {
                leasehold_guest::http::Request::delete(format!(
                    "http://cloud.test/things/{}",
                    object.name
                ))
                .send()?;
                released(object)
            },
        )?)
    }
}

#[test]
fn a_fenced_store_or_request_at_any_step_ends_the_reconcile_as_fenced() {
    // Adding the finalizer.
    let host = FakeHost::new();
    host.seed("things", "a", &json!({}));
    host.fail_next_commit(Fault::Fenced);
    assert_eq!(host.reconcile(&Releaser, "things", "a"), Reply::Fenced);

    // The cleanup's request (a fenced call fences the tenure for good:
    // each step runs in a successor's).
    host.new_tenure();
    assert_eq!(host.reconcile(&Releaser, "things", "a"), Reply::Done);
    assert!(held(&host));
    host.remove("things", "a");
    host.allow_http(["http://cloud.test"]);
    host.fail_next_http(leasehold_guest::HttpFault::Fenced);
    assert_eq!(host.reconcile(&Releaser, "things", "a"), Reply::Fenced);
    assert!(held(&host));

    // Removing the finalizer.
    host.new_tenure();
    host.fail_next_commit(Fault::Fenced);
    assert_eq!(host.reconcile(&Releaser, "things", "a"), Reply::Fenced);
    assert!(held(&host));

    host.new_tenure();
    assert_eq!(host.reconcile(&Releaser, "things", "a"), Reply::Done);
    assert!(host.object::<Value>("things", "a").is_none());
    assert!(
        FinalizerError::Cleanup(Error::Http(HttpError::Fenced("gone".into()))).is_fenced(),
        "as the host heard it"
    );
}

/// A status with conditions, as a controller keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Status {
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[test]
fn conditions_round_trip_through_a_status_and_move_their_time_only_on_a_new_status() {
    let host = FakeHost::new();
    host.seed("things", "a", &json!({}));
    let started = host.now();

    let write = |condition: Condition| {
        let object = read("a");
        let mut status = object.status::<Status>().unwrap().unwrap_or_default();
        if set_condition(&mut status.conditions, condition) {
            Transaction::new()
                .update_status(&object, &status)
                .commit()
                .unwrap();
        }
    };
    write(
        Condition::new("Ready", ConditionStatus::Unknown, "Provisioning", "sent")
            .with_generation(1),
    );
    let stored = host
        .object::<Value>("things", "a")
        .unwrap()
        .status_json
        .unwrap();
    assert_eq!(
        stored["conditions"][0],
        json!({
            "type": "Ready", "status": "Unknown", "reason": "Provisioning", "message": "sent",
            "observed_generation": 1, "last_transition_time": "2026-01-01T00:00:00Z",
        })
    );

    // The same status later: the time stays; an unchanged condition is
    // not written again.
    host.advance(Duration::from_secs(90));
    let commits = host.commits().len();
    write(
        Condition::new("Ready", ConditionStatus::Unknown, "Provisioning", "sent")
            .with_generation(1),
    );
    assert_eq!(
        host.commits().len(),
        commits,
        "nothing changed, nothing written"
    );
    write(
        Condition::new(
            "Ready",
            ConditionStatus::Unknown,
            "Provisioning",
            "still waiting",
        )
        .with_generation(1),
    );
    let status = read("a").status::<Status>().unwrap().unwrap();
    let ready = get_condition(&status.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.message.as_str(), ready.last_transition_time),
        ("still waiting", started)
    );

    // A new status: the time is the clock's now.
    host.advance(Duration::from_secs(30));
    write(Condition::new("Ready", ConditionStatus::True, "Provisioned", "done").with_generation(1));
    let status = read("a").status::<Status>().unwrap().unwrap();
    let ready = get_condition(&status.conditions, "Ready").unwrap();
    assert!(ready.is_true());
    assert_eq!(
        ready.last_transition_time,
        started + Duration::from_secs(120)
    );
}

#[test]
fn typed_events_read_back_with_their_type_and_count_their_prefix() {
    let host = FakeHost::new();
    Transaction::new()
        .event_of_type("things", "a", EventType::Normal, "Started", "started")
        .event_of_type(
            "things",
            "a",
            EventType::Normal,
            "Quoted",
            "Warning: is only a word here",
        )
        .warning("things", "a", "Refused", "the cloud refused")
        .event("things", "a", "Untyped", "as given")
        .commit()
        .unwrap();
    let read: Vec<(EventType, String)> = host
        .events()
        .iter()
        .map(|e| (e.event_type(), e.text().to_string()))
        .collect();
    assert_eq!(
        read,
        [
            (EventType::Normal, "started".to_string()),
            (
                EventType::Normal,
                "Warning: is only a word here".to_string()
            ),
            (EventType::Warning, "the cloud refused".to_string()),
            (EventType::Normal, "as given".to_string()),
        ]
    );

    // The type travels in the message: it counts toward the host's bound.
    let longest = "x".repeat(MAX_EVENT_MESSAGE_BYTES);
    assert!(
        Transaction::new()
            .event("things", "a", "Long", &longest)
            .commit()
            .is_ok()
    );
    let refused = Transaction::new()
        .warning("things", "a", "Long", &longest)
        .commit();
    assert!(
        matches!(refused, Err(StoreError::Invalid(_))),
        "{refused:?}"
    );
}
