//! The fake keeps the host store's rules of metadata, status, deletion and
//! checks (the host's `store/plan.rs`), with the same error kinds: a
//! controller that passes these rules here meets the same ones there.

use serde_json::{Value, json};

use super::*;
use crate::error::Error;
use crate::limits::{
    MAX_COLLECTED_PER_COMMIT, MAX_LABELS, MAX_SELECTOR_CONTAINS_BYTES, MAX_SELECTOR_CONTAINS_DEPTH,
    MAX_SELECTOR_LABELS, MAX_VALUE_BYTES,
};
use crate::object::{Api, Selector};
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

fn owned_by(kind: &str, name: &str) -> Metadata {
    Metadata::new().owner(ObjectKey::new(kind, name))
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
fn deleting_an_owner_collects_what_it_owns_transitively_in_the_same_commit() {
    let host = FakeHost::new();
    host.seed("projects", "p", &json!({}));
    host.seed("projects", "other", &json!({}));
    host.seed_with("tasks", "t", &1, &owned_by("projects", "p"));
    host.seed_with("steps", "s", &1, &owned_by("tasks", "t"));
    host.seed_with(
        "tasks",
        "held",
        &1,
        &owned_by("projects", "p").finalizer("f"),
    );
    host.seed_with("tasks", "free", &1, &owned_by("projects", "other"));

    let project = read("projects", "p");
    let revision = Transaction::new()
        .delete(&project)
        .commit()
        .unwrap()
        .revision;
    assert!(host.object::<Value>("projects", "p").is_none());
    assert!(host.object::<Value>("tasks", "t").is_none());
    assert!(host.object::<Value>("steps", "s").is_none(), "transitively");
    let held = read("tasks", "held");
    assert!(held.is_deleting(), "a finalizer holds an owned object too");
    assert_eq!(held.version, revision, "marked by the deleting commit");
    assert!(host.object::<Value>("tasks", "free").is_some());
}

#[test]
fn garbage_collection_is_bounded_per_commit() {
    let host = FakeHost::new();
    host.seed("projects", "p", &json!({}));
    for i in 0..=MAX_COLLECTED_PER_COMMIT {
        host.seed_with("tasks", &format!("t{i}"), &1, &owned_by("projects", "p"));
    }
    let project = read("projects", "p");
    let before = host.revision();
    let why = invalid(Transaction::new().delete(&project).commit());
    assert!(why.contains("owned objects"), "{why}");
    assert_eq!(host.revision(), before, "nothing was written");
    assert!(host.object::<Value>("projects", "p").is_some());
}

#[test]
fn a_commit_that_deletes_an_owner_cannot_write_or_check_what_it_owns() {
    let host = FakeHost::new();
    host.seed("projects", "p", &json!({}));
    host.seed_with("tasks", "t", &1, &owned_by("projects", "p"));
    let project = read("projects", "p");
    let task = read("tasks", "t");
    let why = invalid(
        Transaction::new()
            .delete(&project)
            .update(&task, &2)
            .commit(),
    );
    assert!(why.contains("also writes tasks/t"), "{why}");
    let why = invalid(Transaction::new().delete(&project).check(&task).commit());
    assert!(why.contains("checks tasks/t"), "{why}");
    // Deleting both is fine.
    Transaction::new()
        .delete(&project)
        .delete(&task)
        .commit()
        .unwrap();
    assert!(host.object::<Value>("tasks", "t").is_none());
}

#[test]
fn an_owner_must_exist_unmarked_when_a_write_names_it() {
    let host = FakeHost::new();
    let absent = Transaction::new()
        .create_with("tasks", "t", &1, &owned_by("projects", "nope"))
        .commit();
    assert_eq!(
        absent,
        Err(StoreError::Conflict(ObjectKey::new("tasks", "t"))),
        "the conflict names the written object"
    );

    host.seed_with("projects", "marked", &1, &Metadata::new().finalizer("f"));
    host.remove("projects", "marked");
    let marked = Transaction::new()
        .create_with("tasks", "t", &1, &owned_by("projects", "marked"))
        .commit();
    assert_eq!(
        marked,
        Err(StoreError::Conflict(ObjectKey::new("tasks", "t")))
    );

    // Created by the same commit: fine.
    Transaction::new()
        .create("projects", "new", &1)
        .create_with("tasks", "t", &1, &owned_by("projects", "new"))
        .commit()
        .unwrap();

    // Deleted by the same commit: invalid.
    host.seed("projects", "old", &1);
    let old = read("projects", "old");
    let task = read("tasks", "t");
    let why = invalid(
        Transaction::new()
            .delete(&old)
            .set_metadata(&task, &owned_by("projects", "old"))
            .commit(),
    );
    assert!(why.contains("deletes projects/old"), "{why}");

    // Marking an owner (its finalizer holds it) collects what it owns.
    host.seed_with("projects", "new", &1, &Metadata::new().finalizer("f"));
    host.remove("projects", "new");
    assert!(read("projects", "new").is_deleting());
    assert!(host.object::<Value>("tasks", "t").is_none());
}

#[test]
fn metadata_breaking_the_hosts_rules_is_invalid() {
    let _host = FakeHost::new();
    let many = (0..=MAX_LABELS).fold(Metadata::new(), |m, i| m.label(format!("k{i}"), "v"));
    let bad = [
        many,
        Metadata::new().label("-bad", "v"),
        Metadata::new().label("k", "a b"),
        Metadata::new().label("k", "x".repeat(64)),
        Metadata::new().finalizer("a/b/"),
        Metadata {
            finalizers: vec!["f".into(), "f".into()],
            ..Metadata::default()
        },
        owned_by("tasks", "t"),
        owned_by("Tasks", "x"),
    ];
    for meta in bad {
        let result = Transaction::new()
            .create_with("tasks", "t", &1, &meta)
            .commit();
        assert!(
            matches!(result, Err(StoreError::Invalid(_))),
            "{meta:?}: {result:?}"
        );
    }
    Transaction::new()
        .create_with(
            "tasks",
            "t",
            &1,
            &Metadata::new()
                .label("example.com/team", "a.b_c-d")
                .label("empty", ""),
        )
        .commit()
        .unwrap();
}

#[test]
fn status_writes_keep_the_generation_and_do_not_conflict_with_spec_writes() {
    let host = FakeHost::new();
    host.seed("tasks", "t", &json!({ "image": "v1" }));
    let task = read("tasks", "t");
    assert_eq!(task.generation, 1);

    // Another party's status write between the read and this one does not
    // make it conflict: the generation did not move.
    host.set_status("tasks", "t", &json!({ "by": "user" }));
    Transaction::new()
        .update_status(&task, &json!({ "observed": 1 }))
        .commit()
        .unwrap();
    let task = read("tasks", "t");
    assert_eq!(task.generation, 1, "status writes keep the generation");
    assert_eq!(task.value, json!({ "image": "v1" }), "and the value");
    assert_eq!(task.status_json, Some(json!({ "observed": 1 })));

    // A spec write moves the generation and keeps the status; a status
    // computed from the old spec conflicts.
    host.seed("tasks", "t", &json!({ "image": "v2" }));
    let current = read("tasks", "t");
    assert_eq!(current.generation, 2);
    assert_eq!(current.status_json, Some(json!({ "observed": 1 })));
    let stale = Transaction::new()
        .update_status(&task, &json!({ "observed": 1 }))
        .commit();
    assert_eq!(
        stale,
        Err(StoreError::Conflict(ObjectKey::new("tasks", "t")))
    );
    // Without an expected generation it applies.
    Transaction::new()
        .write_status("tasks", "t", None, &json!({ "any": true }))
        .commit()
        .unwrap();
    // A status write takes a new version: an update from before conflicts.
    let spec = Transaction::new()
        .update(&current, &json!({ "image": "v3" }))
        .commit();
    assert_eq!(
        spec,
        Err(StoreError::Conflict(ObjectKey::new("tasks", "t")))
    );

    let task = read("tasks", "t");
    Transaction::new().clear_status(&task).commit().unwrap();
    assert_eq!(read("tasks", "t").status_json, None);
    let missing = Transaction::new()
        .write_status("tasks", "gone", None, &1)
        .commit();
    assert_eq!(
        missing,
        Err(StoreError::NotFound(ObjectKey::new("tasks", "gone")))
    );
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
fn the_generation_grows_only_when_value_or_metadata_change() {
    let _host = FakeHost::new();
    Transaction::new()
        .create("tasks", "t", &1)
        .commit()
        .unwrap();
    let task = read("tasks", "t");
    Transaction::new()
        .replace(&task, &1, &Metadata::new())
        .commit()
        .unwrap();
    let same = read("tasks", "t");
    assert_eq!(same.generation, 1, "nothing changed");
    assert!(same.version > task.version, "but it was written");
    Transaction::new()
        .set_metadata(&same, &Metadata::new().label("a", "b"))
        .commit()
        .unwrap();
    let labelled = read("tasks", "t");
    assert_eq!((labelled.generation, labelled.value.clone()), (2, json!(1)));
    Transaction::new().update(&labelled, &2).commit().unwrap();
    let updated = read("tasks", "t");
    assert_eq!(updated.generation, 3);
    assert_eq!(
        updated.label("a"),
        Some("b"),
        "an update keeps the metadata"
    );
}

#[test]
fn a_check_fails_the_whole_commit_unless_the_object_is_at_its_version() {
    let host = FakeHost::new();
    host.seed("quotas", "q", &json!({ "max": 2 }));
    let quota = read("quotas", "q");
    Transaction::new()
        .check(&quota)
        .create("tasks", "a", &1)
        .commit()
        .unwrap();
    assert_eq!(
        read("quotas", "q").version,
        quota.version,
        "a check writes nothing"
    );

    host.seed("quotas", "q", &json!({ "max": 0 }));
    let before = host.revision();
    let stale = Transaction::new()
        .create("tasks", "b", &1)
        .check(&quota)
        .commit();
    assert_eq!(
        stale,
        Err(StoreError::Conflict(ObjectKey::new("quotas", "q")))
    );
    assert!(host.object::<Value>("tasks", "b").is_none());
    assert_eq!(host.revision(), before, "nothing was written");

    // 0 means absent.
    let absent = Transaction::new()
        .check_absent("quotas", "q")
        .create("tasks", "c", &1)
        .commit();
    assert_eq!(
        absent,
        Err(StoreError::Conflict(ObjectKey::new("quotas", "q")))
    );
    Transaction::new()
        .check_absent("locks", "l")
        .create("tasks", "c", &1)
        .commit()
        .unwrap();
    // A version given for an absent object conflicts too.
    let gone = Transaction::new().check_version("locks", "l", 5).commit();
    assert_eq!(
        gone,
        Err(StoreError::Conflict(ObjectKey::new("locks", "l")))
    );
    // An object is named once per commit, checks included.
    let quota = read("quotas", "q");
    let why = invalid(Transaction::new().check(&quota).update(&quota, &1).commit());
    assert!(why.contains("more than one operation"), "{why}");
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

fn selected(selector: &Selector) -> Vec<String> {
    tasks()
        .list_all_selected(selector, 100)
        .expect("selected")
        .into_iter()
        .map(|o| o.name)
        .collect()
}

#[test]
fn a_selector_matches_labels_exactly() {
    let host = FakeHost::new();
    host.seed_with(
        "tasks",
        "a",
        &1,
        &Metadata::new().label("team", "db").label("tier", ""),
    );
    host.seed_with("tasks", "b", &1, &Metadata::new().label("team", "web"));
    host.seed("tasks", "c", &1);
    host.seed_with("nodes", "n", &1, &Metadata::new().label("team", "db"));
    assert_eq!(selected(&Selector::new().label("team", "db")), ["a"]);
    assert_eq!(selected(&Selector::new().label("tier", "")), ["a"]);
    assert!(
        selected(&Selector::new().label("team", "db").label("zone", "")).is_empty(),
        "an empty value matches a label set to \"\", not an absent one"
    );
    assert_eq!(selected(&Selector::new()), ["a", "b", "c"]);
    assert_eq!(host.calls().list, 4, "a selective list counts as a list");
}

#[test]
fn a_selector_contains_json_by_the_stores_rules() {
    let seeds = [
        (
            "obj",
            json!({ "status": "pending", "spec": { "cpu": 2, "tags": ["a", "b"] } }),
        ),
        ("arr", json!(["x", "y", { "k": 1 }])),
        ("nested", json!([["x"]])),
        ("num", json!({ "n": 1.0 })),
        ("str", json!({ "n": "1" })),
    ];
    let host = FakeHost::new();
    for (name, value) in &seeds {
        host.seed("tasks", name, value);
    }
    let with = |query: Value| selected(&Selector::new().contains(query));
    assert_eq!(with(json!({ "status": "pending" })), ["obj"]);
    assert_eq!(with(json!({ "spec": { "tags": ["b"] } })), ["obj"]);
    assert!(
        with(json!({ "spec": { "tags": "b" } })).is_empty(),
        "only at the top level"
    );
    assert_eq!(
        with(json!("x")),
        ["arr"],
        "a top-level array holds the scalar"
    );
    assert_eq!(with(json!([{ "k": 1 }])), ["arr"]);
    assert_eq!(with(json!([["x"]])), ["nested"]);
    assert_eq!(with(json!({ "n": 1 })), ["num"], "numbers by value");
    assert_eq!(with(json!({ "n": "1" })), ["str"], "never across types");
    assert_eq!(
        with(json!({})),
        ["num", "obj", "str"],
        "every object contains {{}}"
    );
}

#[test]
fn selective_lists_page_by_name_with_the_same_selector() {
    let host = FakeHost::new();
    for i in 0..7 {
        host.seed("tasks", &format!("t{i}"), &json!({ "odd": i % 2 == 1 }));
    }
    let odd = Selector::new().contains(json!({ "odd": true }));
    let first = tasks().list_selected(&odd, None, 2).unwrap();
    let names: Vec<_> = first.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["t1", "t3"]);
    assert_eq!(first.next.as_deref(), Some("t3"));
    let rest = tasks().list_selected(&odd, Some("t3"), 2).unwrap();
    let names: Vec<_> = rest.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["t5"]);
    assert_eq!(rest.next, None);
}

#[test]
fn selectors_over_the_hosts_bounds_are_invalid() {
    let _host = FakeHost::new();
    let deep = (0..=MAX_SELECTOR_CONTAINS_DEPTH).fold(json!(1), |v, _| json!([v]));
    let fits = (0..MAX_SELECTOR_CONTAINS_DEPTH).fold(json!(1), |v, _| json!([v]));
    let many =
        (0..=MAX_SELECTOR_LABELS).fold(Selector::new(), |s, i| s.label(format!("k{i}"), "v"));
    let bad = [
        many,
        Selector::new().label("-k", "v"),
        Selector::new().label("k", "a b"),
        Selector::new().contains(deep),
        Selector::new().contains(json!("x".repeat(MAX_SELECTOR_CONTAINS_BYTES))),
    ];
    for selector in bad {
        let result = tasks().list_selected(&selector, None, 10);
        assert!(
            matches!(result, Err(Error::Store(StoreError::Invalid(_)))),
            "{selector:?}: {result:?}"
        );
    }
    tasks()
        .list_selected(&Selector::new().contains(fits), None, 10)
        .expect("at the depth bound");
}
