"""Metadata, finalizers, owners, statuses, checks and selectors in the fake."""

import pytest

from leasehold import Api, Conflict, Invalid, Metadata, NotFound, ObjectKey, Selector, Transaction


def tasks() -> Api:
    return Api("tasks")


def read(kind, name):
    obj = Api(kind).get(name)
    assert obj is not None, f"{kind}/{name} should exist"
    return obj


def test_a_delete_of_an_object_with_finalizers_marks_it_until_the_last_is_removed(host):
    host.seed_with("tasks", "t", {"a": 1}, Metadata(finalizers=("x.io/one", "two")))
    t = read("tasks", "t")
    Transaction().delete(t).commit()
    marked = read("tasks", "t")
    assert marked.is_deleting and marked.generation == t.generation + 1
    assert marked.deleting_since == host.now()
    # A second delete request leaves it as it is.
    v = host.revision
    Transaction().delete(marked).commit()
    assert read("tasks", "t").version == marked.version and host.revision > v
    marked = read("tasks", "t")
    # Finalizers can be removed, not added.
    with pytest.raises(Invalid, match="removed, not added"):
        Transaction().add_finalizer(marked, "three").commit()
    # Values and statuses can still be written.
    Transaction().update(marked, {"a": 2}).commit()
    marked = read("tasks", "t")
    Transaction().remove_finalizer(marked, "x.io/one").commit()
    marked = read("tasks", "t")
    assert marked.finalizers == ("two",) and marked.is_deleting
    Transaction().remove_finalizer(marked, "two").commit()
    assert tasks().get("t") is None


def test_a_users_delete_marks_too_and_removing_the_last_finalizer_by_replace_removes_it(host):
    host.seed_with("tasks", "t", 1, Metadata(finalizers=("f",)))
    assert host.remove("tasks", "t")
    t = read("tasks", "t")
    assert t.is_deleting
    Transaction().replace(t, 2, Metadata()).commit()
    assert tasks().get("t") is None
    assert not host.remove("tasks", "t")


def test_deleting_an_owner_collects_what_it_owns_transitively_in_the_same_commit(host):
    host.seed("jobs", "j", 1)
    host.seed_with("tasks", "t1", 1, Metadata().owned_by("jobs", "j"))
    host.seed_with("tasks", "t2", 1, Metadata(finalizers=("keep",)).owned_by("jobs", "j"))
    host.seed_with("pods", "p1", 1, Metadata().owned_by("tasks", "t1"))
    host.seed("tasks", "free", 1)
    Transaction().delete(read("jobs", "j")).commit()
    assert Api("jobs").get("j") is None
    assert tasks().get("t1") is None and Api("pods").get("p1") is None
    assert read("tasks", "t2").is_deleting
    assert tasks().get("free") is not None
    assert len(host.commits()) == 1


def test_garbage_collection_is_bounded_per_commit(host):
    host.seed("jobs", "j", 1)
    for n in range(1001):
        host.seed_with("tasks", f"t{n}", 1, Metadata().owned_by("jobs", "j"))
    with pytest.raises(Invalid, match="more than 1000"):
        Transaction().delete(read("jobs", "j")).commit()
    assert len(host.objects("tasks")) == 1001


def test_a_commit_that_deletes_an_owner_cannot_write_or_check_what_it_owns(host):
    host.seed("jobs", "j", 1)
    host.seed_with("tasks", "t", 1, Metadata().owned_by("jobs", "j"))
    j, t = read("jobs", "j"), read("tasks", "t")
    with pytest.raises(Invalid, match="also writes"):
        Transaction().delete(j).update(t, 2).commit()
    with pytest.raises(Invalid, match="check or delete"):
        Transaction().delete(j).check(t).commit()
    Transaction().delete(j).delete(t).commit()
    assert host.objects("tasks") == []


def test_an_owner_must_exist_unmarked_when_a_write_names_it(host):
    with pytest.raises(Conflict) as caught:
        Transaction().create_with("tasks", "t", 1, Metadata().owned_by("jobs", "j")).commit()
    assert caught.value.key == ObjectKey("tasks", "t")
    # Created by the same commit: fine.
    Transaction().create("jobs", "j", 1).create_with(
        "tasks", "t", 1, Metadata().owned_by("jobs", "j")
    ).commit()
    host.seed_with("jobs", "k", 1, Metadata(finalizers=("f",)))
    host.remove("jobs", "k")
    with pytest.raises(Conflict):
        Transaction().create_with("tasks", "u", 1, Metadata().owned_by("jobs", "k")).commit()
    with pytest.raises(Invalid, match="makes it the owner"):
        Transaction().delete(read("jobs", "j")).create_with(
            "tasks", "v", 1, Metadata().owned_by("jobs", "j")
        ).commit()


def test_metadata_breaking_the_hosts_rules_is_invalid(host):
    bad = [
        Metadata(labels={f"l{n}": "" for n in range(33)}),
        Metadata(labels={"-a": "v"}),
        Metadata(labels={"a": "-v"}),
        Metadata(labels={"a": "v" * 64}),
        Metadata(labels={"k" * 129: "v"}),
        Metadata(finalizers=tuple(f"f{n}" for n in range(17))),
        Metadata(finalizers=("f", "f")),
        Metadata(finalizers=("bad finalizer",)),
        Metadata().owned_by("Jobs", "j"),
        Metadata().owned_by("tasks", "t"),
    ]
    for meta in bad:
        with pytest.raises(Invalid):
            Transaction().create_with("tasks", "t", 1, meta).commit()
    Transaction().create_with(
        "tasks", "t", 1, Metadata(labels={"example.com/team": "a_b.c", "empty": ""}, finalizers=("x/y",))
    ).commit()
    assert read("tasks", "t").labels == {"empty": "", "example.com/team": "a_b.c"}


def test_status_writes_keep_the_generation_and_do_not_conflict_with_spec_writes(host):
    host.seed("tasks", "t", {"spec": 1})
    t = read("tasks", "t")
    Transaction().update_status(t, {"seen": 1}).commit()
    after = read("tasks", "t")
    assert after.status == {"seen": 1} and after.generation == t.generation
    assert after.version > t.version and after.value == {"spec": 1}
    # A spec write based on the earlier read now conflicts (version moved)...
    with pytest.raises(Conflict):
        Transaction().update(t, {"spec": 2}).commit()
    Transaction().update(after, {"spec": 2}).commit()
    # ...and a status at the old generation conflicts too.
    with pytest.raises(Conflict):
        Transaction().update_status(t, {"seen": 2}).commit()
    Transaction().write_status("tasks", "t", None, {"seen": 2}).commit()
    Transaction().clear_status(read("tasks", "t")).commit()
    assert read("tasks", "t").status is None
    with pytest.raises(NotFound):
        Transaction().write_status("tasks", "none", None, 1).commit()


def test_the_generation_grows_only_when_value_or_metadata_change(host):
    host.seed("tasks", "t", 1)
    t = read("tasks", "t")
    Transaction().update(t, 1).commit()
    same = read("tasks", "t")
    assert same.generation == 1 and same.version > t.version
    Transaction().set_metadata(same, Metadata(labels={"a": "b"})).commit()
    assert read("tasks", "t").generation == 2
    with pytest.raises(Invalid, match="value, metadata or both"):
        from leasehold.transaction import Replace

        host.commit([Replace(ObjectKey("tasks", "t"), read("tasks", "t").version, None, None)], [])


def test_a_check_fails_the_whole_commit_unless_the_object_is_at_its_version(host):
    host.seed("nodes", "n", 1)
    n = read("nodes", "n")
    Transaction().check(n).create("tasks", "a", 1).commit()
    host.seed("nodes", "n", 2)
    with pytest.raises(Conflict) as caught:
        Transaction().check(n).create("tasks", "b", 1).commit()
    assert caught.value.key == ObjectKey("nodes", "n") and tasks().get("b") is None
    Transaction().check_absent("nodes", "m").create("tasks", "c", 1).commit()
    with pytest.raises(Conflict):
        Transaction().check_absent("nodes", "n").create("tasks", "d", 1).commit()


def test_finalizer_helpers_write_nothing_when_there_is_nothing_to_change(host):
    host.seed_with("tasks", "t", 1, Metadata(finalizers=("f",)))
    t = read("tasks", "t")


    from leasehold.transaction import Check

    assert Transaction().add_finalizer(t, "f").ops == [Check(t.key, t.version)]
    assert Transaction().remove_finalizer(t, "g").ops == [Check(t.key, t.version)]


def selected(selector):
    return [o.name for o in tasks().list_all_selected(selector, 100)]


def test_a_selector_matches_labels_exactly(host):
    host.seed_with("tasks", "a", 1, Metadata(labels={"team": "x", "tier": ""}))
    host.seed_with("tasks", "b", 1, Metadata(labels={"team": "y"}))
    host.seed("tasks", "c", 1)
    assert selected(Selector()) == ["a", "b", "c"]
    assert selected(Selector().label("team", "x")) == ["a"]
    assert selected(Selector().label("tier", "")) == ["a"]
    assert selected(Selector().label("team", "y").label("tier", "")) == []


def test_a_selector_contains_json_by_the_stores_rules(host):
    host.seed("tasks", "a", {"n": 1, "tags": ["x", "y"], "o": {"p": True}})
    host.seed("tasks", "b", ["x", 2, {"k": "v"}])
    host.seed("tasks", "c", "x")
    host.seed("tasks", "d", {"n": 1.0, "s": None})
    assert selected(Selector().containing({"n": 1})) == ["a", "d"]
    assert selected(Selector().containing({"tags": ["y"]})) == ["a"]
    assert selected(Selector().containing({"o": {}})) == ["a"]
    assert selected(Selector().containing({"n": "1"})) == []
    assert selected(Selector().containing("x")) == ["b", "c"]  # top-level array holds the scalar
    assert selected(Selector().containing([{"k": "v"}])) == ["b"]
    assert selected(Selector().containing({"s": None})) == ["d"]
    assert selected(Selector().containing({"tags": "x"})) == []  # not below the top level
    assert selected(Selector().containing(True)) == []


def test_selective_lists_page_by_name_with_the_same_selector(host):
    for n in range(7):
        host.seed_with("tasks", f"t{n}", n, Metadata(labels={"odd": str(n % 2)}))
    page = tasks().list_selected(Selector().label("odd", "1"), None, 2)
    assert [o.name for o in page.objects] == ["t1", "t3"] and page.next == "t3"
    page = tasks().list_selected(Selector().label("odd", "1"), page.next, 2)
    assert [o.name for o in page.objects] == ["t5"] and page.next is None


def test_selectors_over_the_hosts_bounds_are_invalid(host):
    deep = 1
    for _ in range(17):
        deep = [deep]
    for bad in [
        Selector(labels={f"l{n}": "" for n in range(33)}),
        Selector().label("-x", "v"),
        Selector().label("x", "v v"),
        Selector().containing(deep),
        Selector().containing({"k": "v" * 5000}),
    ]:
        with pytest.raises(Invalid, match="selector for kind tasks"):
            tasks().list_selected(bad)
