"""`leasehold.finalizer`: which of apply, cleanup or nothing an object's
finalizer and deletion mark call for, and the two conditional commits."""

import pytest

from leasehold import (
    Api,
    Conflict,
    Controller,
    Description,
    EventType,
    Failed,
    Fenced,
    IdempotencyKey,
    Invalid,
    Metadata,
    Outcome,
    Reply,
    Transaction,
    finalizer,
)
from leasehold.fake import At, Fault

FIN = "example.com/slot"


def read(name="t1"):
    return Api("tasks").get(name)


class Calls:
    """Records which callable ran, on which object, and answers as told."""

    def __init__(self, applied=None, cleaned=None):
        self.seen = []
        self.applied = applied if applied is not None else Outcome.requeue_after(7)
        self.cleaned = cleaned

    def apply(self, obj):
        self.seen.append(("apply", obj))
        if isinstance(self.applied, BaseException):
            raise self.applied
        return self.applied

    def cleanup(self, obj):
        self.seen.append(("cleanup", obj))
        if isinstance(self.cleaned, BaseException):
            raise self.cleaned
        return self.cleaned(obj) if callable(self.cleaned) else self.cleaned


def test_a_live_object_gets_the_finalizer_then_apply_sees_it_as_written(host):
    host.seed("tasks", "t1", {"n": 1})
    before = read()
    calls = Calls()
    assert finalizer(before, FIN, calls.apply, calls.cleanup) == Outcome.requeue_after(7)
    [(what, obj)] = calls.seen
    stored = read()
    assert what == "apply" and stored.has_finalizer(FIN)
    # Exactly the object as the commit wrote it, so apply's writes build on it.
    assert (obj.version, obj.generation, obj.metadata) == (stored.version, stored.generation, stored.metadata)
    assert obj.generation == before.generation + 1
    commits = host.commits()
    assert len(commits) == 1 and commits[0].ops[0].expected_version == before.version
    # Apply's own conditional write on the object it was given succeeds.
    Transaction().update_status(obj, {"seen": True}).commit()


def test_a_live_object_with_the_finalizer_is_applied_without_a_commit(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer(FIN))
    calls = Calls(applied="whatever apply returns")
    assert finalizer(read(), FIN, calls.apply, calls.cleanup) == "whatever apply returns"
    assert [w for w, _ in calls.seen] == ["apply"] and host.commits() == []


def test_adding_the_finalizer_is_conditional_on_the_version_read(host):
    host.seed("tasks", "t1", {"n": 1})
    stale = read()
    host.seed("tasks", "t1", {"n": 2})
    calls = Calls()
    with pytest.raises(Conflict):
        finalizer(stale, FIN, calls.apply, calls.cleanup)
    assert calls.seen == [] and not read().has_finalizer(FIN)


def test_a_marked_object_is_cleaned_up_then_let_go_with_the_cleanups_events(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer(FIN))
    host.remove("tasks", "t1")
    marked = read()
    assert marked.is_deleting
    calls = Calls(cleaned=lambda o: Transaction().warning("tasks", o.name, "Freed", "slot freed"))
    assert finalizer(marked, FIN, calls.apply, calls.cleanup) == Outcome.done()
    assert [w for w, _ in calls.seen] == ["cleanup"]
    assert read() is None
    [commit] = host.commits()
    assert commit.ops[0].expected_version == marked.version
    [event] = host.events_with_reason("Freed")
    assert (event.event_type, event.text) == (EventType.WARNING, "slot freed")


def test_another_finalizer_keeps_the_marked_object_after_ours_is_removed(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer(FIN).finalizer("other.io/hold"))
    host.remove("tasks", "t1")
    calls = Calls(cleaned=Outcome.requeue_after(5))
    assert finalizer(read(), FIN, calls.apply, calls.cleanup) == Outcome.requeue_after(5)
    left = read()
    assert left.is_deleting and left.finalizers == ("other.io/hold",)


def test_a_failed_cleanup_keeps_the_finalizer_and_the_object(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer(FIN))
    host.remove("tasks", "t1")
    calls = Calls(cleaned=Failed("the cloud is down", 500))
    with pytest.raises(Failed):
        finalizer(read(), FIN, calls.apply, calls.cleanup)
    assert read().has_finalizer(FIN) and host.commits() == []


def test_the_removal_is_conditional_on_the_version_read(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer(FIN))
    host.remove("tasks", "t1")
    marked = read()
    host.set_status("tasks", "t1", {"someone": "else"})
    calls = Calls()
    with pytest.raises(Conflict):
        finalizer(marked, FIN, calls.apply, calls.cleanup)
    assert read().has_finalizer(FIN)


def test_a_cleanup_that_writes_the_object_itself_is_refused_before_sending(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer(FIN))
    host.remove("tasks", "t1")
    calls = Calls(cleaned=lambda o: Transaction().update_status(o, {"x": 1}))
    with pytest.raises(Invalid) as caught:
        finalizer(read(), FIN, calls.apply, calls.cleanup)
    assert "writes tasks/t1 itself" in str(caught.value)
    assert host.commits() == [] and read().has_finalizer(FIN)


def test_marked_without_our_finalizer_or_absent_is_nothing_to_do(host):
    host.seed_with("tasks", "t1", {}, Metadata().finalizer("other.io/hold"))
    host.remove("tasks", "t1")
    calls = Calls()
    assert finalizer(read(), FIN, calls.apply, calls.cleanup) == Outcome.done()
    assert finalizer(None, FIN, calls.apply, calls.cleanup) == Outcome.done()
    assert calls.seen == [] and host.commits() == []


def test_a_fenced_commit_of_the_finalizer_ends_the_reconcile_as_fenced(host):
    class Holds(Controller):
        def describe(self):
            return Description.watching(["tasks"])

        def reconcile(self, ctx, kind, name):
            return finalizer(Api(kind).get(name), FIN, lambda o: Outcome.done(), lambda o: None)

    host.seed("tasks", "t1", {})
    host.fail(At.commit(1), Fault.FENCED)
    assert host.reconcile(Holds(), "tasks", "t1") == Reply("fenced")
    assert not host.object("tasks", "t1").has_finalizer(FIN)


def test_the_generation_keeps_a_key_through_status_writes_and_the_version_does_not(host):
    host.seed("tasks", "t1", {"size": 1})
    keys = []

    def apply(obj):
        # Record progress first (a status write), then derive the key.
        Transaction().update_status(obj, {"phase": "Pending"}).commit()
        keys.append(IdempotencyKey.for_action("tasks", obj.name, obj.generation, "put"))
        return Outcome.done()

    finalizer(read(), FIN, apply, lambda o: None)
    after_first = read()
    finalizer(after_first, FIN, apply, lambda o: None)
    # The status writes moved the version between the two attempts...
    assert after_first.version != read().version
    # ...but not the generation: both attempts send the same key.
    assert keys[0] == keys[1]
