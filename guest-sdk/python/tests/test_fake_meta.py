"""What the fake adds around the store's rules of metadata, finalizers and
statuses (its clock, users' deletes, the SDK's helpers); the rules
themselves are the conformance table's (`test_conformance.py`)."""

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


def test_finalizer_helpers_write_nothing_when_there_is_nothing_to_change(host):
    host.seed_with("tasks", "t", 1, Metadata(finalizers=("f",)))
    t = read("tasks", "t")


    from leasehold.transaction import Check

    assert Transaction().add_finalizer(t, "f").ops == [Check(t.key, t.version)]
    assert Transaction().remove_finalizer(t, "g").ops == [Check(t.key, t.version)]


def selected(selector):
    return [o.name for o in tasks().list_all_selected(selector, 100)]


