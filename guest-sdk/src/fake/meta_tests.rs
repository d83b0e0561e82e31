//! What the fake adds around the host store's rules of metadata, status
//! and deletion: its clock stamps deletion marks, users' deletes through
//! [`FakeHost::remove`], and the SDK's finalizer helpers over it. The rules
//! themselves are the conformance table's (`tests/conformance/store/`),
//! which every store and fake runs (`conformance.rs`).

use serde_json::{Value, json};

use super::*;
use crate::limits::MAX_VALUE_BYTES;
use crate::object::Api;
use crate::transaction::Transaction;

fn tasks() -> Api<Value> {
    Api::new("tasks")
}

fn read(kind: &str, name: &str) -> Object<Value> {
    Api::<Value>::new(kind)
        .get(name)
        .expect("read")
        .unwrap_or_else(|| panic!("{kind}/{name} should exist"))
}

fn invalid<T: std::fmt::Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Invalid(why)) => why,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn a_delete_of_an_object_with_finalizers_marks_it_until_the_last_is_removed() {
    let host = FakeHost::new();
    let meta = Metadata::new().finalizer("example.com/a").finalizer("b");
    Transaction::new()
        .create_with("tasks", "t", &json!({ "n": 1 }), &meta)
        .commit()
        .unwrap();
    let task = read("tasks", "t");
    assert_eq!((task.generation, task.is_deleting()), (1, false));

    let marked_at = Transaction::new().delete(&task).commit().unwrap().revision;
    let task = read("tasks", "t");
    assert!(task.is_deleting(), "held by its finalizers");
    assert_eq!(task.deleting_since, Some(host.now()));
    assert_eq!(task.version, marked_at);
    assert_eq!(task.generation, 2, "a deletion mark is a change");
    assert_eq!(
        task.value,
        json!({ "n": 1 }),
        "its last value stays readable"
    );

    // A second delete request writes nothing to it.
    host.advance(std::time::Duration::from_secs(5));
    Transaction::new().delete(&task).commit().unwrap();
    let again = read("tasks", "t");
    assert_eq!(
        (again.version, again.deleting_since),
        (task.version, task.deleting_since)
    );

    // It can still be written, but cannot gain finalizers.
    let why = invalid(Transaction::new().add_finalizer(&again, "c").commit());
    assert!(why.contains("marked for deletion"), "{why}");
    Transaction::new()
        .update_status(&again, &json!({ "cleaning": true }))
        .commit()
        .unwrap();

    let task = read("tasks", "t");
    Transaction::new()
        .remove_finalizer(&task, "example.com/a")
        .commit()
        .unwrap();
    let task = read("tasks", "t");
    assert_eq!(task.finalizers(), ["b"]);
    Transaction::new()
        .remove_finalizer(&task, "b")
        .commit()
        .unwrap();
    assert!(
        tasks().get("t").unwrap().is_none(),
        "the last finalizer went"
    );
}

#[test]
fn a_users_delete_marks_too_and_removing_the_last_finalizer_by_replace_removes_it() {
    let host = FakeHost::new();
    host.seed_with("tasks", "t", &1, &Metadata::new().finalizer("f"));
    assert!(host.remove("tasks", "t"));
    let task = read("tasks", "t");
    assert!(task.is_deleting());
    Transaction::new()
        .set_metadata(&task, &Metadata::new().label("done", "yes"))
        .commit()
        .unwrap();
    assert!(host.object::<Value>("tasks", "t").is_none());
}

#[test]
fn statuses_are_json_within_the_value_limit() {
    let _host = FakeHost::new();
    Transaction::new()
        .create("tasks", "t", &1)
        .commit()
        .unwrap();
    let big = "x".repeat(MAX_VALUE_BYTES);
    let result = Transaction::new()
        .write_status("tasks", "t", None, &big)
        .commit();
    let why = invalid(result);
    assert!(why.contains("status of tasks/t"), "{why}");
}

#[test]
fn finalizer_helpers_write_nothing_when_there_is_nothing_to_change() {
    let host = FakeHost::new();
    host.seed_with("tasks", "t", &1, &Metadata::new().finalizer("f"));
    let task = read("tasks", "t");
    let tx = Transaction::new().add_finalizer(&task, "f");
    assert!(
        matches!(tx.ops(), [Op::Check { expected_version, .. }] if *expected_version == task.version)
    );
    tx.commit().unwrap();
    let tx = Transaction::new().remove_finalizer(&task, "g");
    assert!(matches!(tx.ops(), [Op::Check { .. }]));
    tx.commit().unwrap();
    assert_eq!(read("tasks", "t").version, task.version);
    // A stale read still conflicts.
    host.seed("tasks", "t", &2);
    let stale = Transaction::new().add_finalizer(&task, "f").commit();
    assert_eq!(
        stale,
        Err(StoreError::Conflict(ObjectKey::new("tasks", "t")))
    );
}
