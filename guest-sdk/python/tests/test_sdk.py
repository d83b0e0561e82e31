"""The SDK's own behaviour: replies, error policy, retries, keys, settings, clock, kinds."""

import datetime as dt
from dataclasses import dataclass

import pytest

import leasehold
from leasehold import (
    Api,
    Conflict,
    Context,
    Controller,
    DecodeError,
    Description,
    Failed,
    Fenced,
    IdempotencyKey,
    Invalid,
    Kind,
    NotFound,
    ObjectKey,
    Outcome,
    QuotaExceeded,
    Reason,
    Reply,
    Retry,
    SettingsError,
    Transaction,
    Unavailable,
    retry_on_conflict,
)
from leasehold.fake import Fault


class Scripted(Controller):
    """Raises or returns what it is told; remembers the reasons it saw."""

    def __init__(self, result=None, policy=None):
        self.result = result
        self.policy = policy
        self.reasons = []

    def describe(self):
        return Description.watching(["things"]).resync_every(1000)

    def reconcile(self, ctx, kind, name):
        self.reasons.append(ctx.reason)
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    def error_policy(self, ctx, kind, name, error):
        if self.policy is not None:
            return self.policy
        return super().error_policy(ctx, kind, name, error)


def test_fenced_errors_reach_the_host_as_fenced_whatever_the_policy(host):
    reply = host.reconcile(Scripted(Fenced("gone"), Retry.after(5)), "things", "a")
    assert reply == Reply("fenced") and reply.is_fenced


def test_other_errors_reach_the_host_with_the_policys_delay(host):
    reply = host.reconcile(Scripted(Conflict(ObjectKey("things", "a")), Retry.after(250)), "things", "a")
    assert reply.is_failed and reply.delay_ms == 250 and "conflict on things/a" in reply.message
    reply = host.reconcile(Scripted(Failed("boom", 40)), "things", "a")
    assert reply == Reply("failed", 40, "boom")
    reply = host.reconcile(Scripted(ValueError("bad")), "things", "a")
    assert reply == Reply("failed", None, "ValueError: bad")
    reply = host.reconcile(Scripted("not an outcome"), "things", "a")
    assert reply.is_failed and "not an Outcome" in reply.message


def test_outcomes_reach_the_host_unchanged(host):
    assert host.reconcile(Scripted(Outcome.done()), "things", "a") == Reply("done")
    assert host.reconcile(Scripted(Outcome.requeue_after(1500)), "things", "a") == Reply("requeue", 1500)
    wake = host.now() + dt.timedelta(seconds=3)
    assert host.reconcile(Scripted(Outcome.wake_at(wake)), "things", "a") == Reply("requeue", 3000)
    past = host.now() - dt.timedelta(seconds=3)
    assert Outcome.wake_at(past) == Outcome.requeue_after(0)


def test_each_way_of_driving_a_controller_tells_its_reason(host):
    c = Scripted(Outcome.done())
    host.seed("things", "a", 1)
    host.seed("things", "b", 1)
    host.seed("other", "c", 1)
    host.reconcile(c, "things", "a")
    host.reconcile(c, "things", "a", Reason.RETRY)
    replies = host.resync(c)
    assert [k.name for k, _ in replies] == ["a", "b"]
    assert c.reasons == [Reason.CHANGE, Reason.RETRY, Reason.RESYNC, Reason.RESYNC]
    assert Reason.RESYNC.strongest(Reason.CHANGE) is Reason.CHANGE
    assert Reason.RETRY.strongest(Reason.REQUEUE) is Reason.RETRY


def test_description_and_retry_shapes():
    d = Description.watching(["nodes", "tasks"]).resync_every(30_000)
    assert d.watches == ["nodes", "tasks"] and d.resync_ms == 30_000
    assert Retry.backoff().after_ms is None and Retry.after(-5).after_ms == 0


def scripted_attempts(attempts, errors):
    made = []

    def attempt():
        made.append(1)
        if errors:
            raise errors.pop(0)
        return len(made)

    return attempt, made


def test_retry_on_conflict_retries_failed_preconditions_and_logs_each(host):
    attempt, made = scripted_attempts(3, [Conflict(ObjectKey("t", "a")), NotFound(ObjectKey("t", "b"))])
    assert retry_on_conflict(3, attempt) == 3
    assert [l.message for l in host.logs()] == [
        "t/a changed since it was read; reading again (attempt 2 of 3)",
        "t/b changed since it was read; reading again (attempt 3 of 3)",
    ]


def test_retry_on_conflict_gives_up_after_its_attempts_with_the_conflict(host):
    attempt, made = scripted_attempts(2, [Conflict(ObjectKey("t", "a"))] * 3)
    with pytest.raises(Conflict):
        retry_on_conflict(2, attempt)
    assert len(made) == 2


def test_retry_on_conflict_raises_other_errors_at_once(host):
    for error in [Unavailable("down"), Fenced("gone"), Invalid("bad"), ValueError("x")]:
        attempt, made = scripted_attempts(5, [error])
        with pytest.raises(type(error)):
            retry_on_conflict(5, attempt)
        assert len(made) == 1


def test_idempotency_keys_are_those_of_the_rust_sdk(host):
    assert host.fence().idempotency_key("notify-t1") == "test/controller/1/notify-t1"
    assert Context().fence.epoch == 1
    key = IdempotencyKey.for_action("orders", "o-17", 42, "charge card")
    assert str(key) == "orders/o-17@42/charge%20card"
    assert IdempotencyKey.for_action("a", "b/c", 1, "d").value == "a/b%2Fc@1/d"
    assert IdempotencyKey.for_action("a", "b", 1, "c/d") != IdempotencyKey.for_action("a", "b/c", 1, "d")
    assert IdempotencyKey.for_action("k", "n", 0, "é~._-").value == "k/n@0/%C3%A9~._-"


@dataclass
class Region:
    region: str
    replicas: int = 1


def test_settings_decode_and_never_quote_a_value(host):
    assert leasehold.settings() == {}
    host.set_settings({"region": "eu", "replicas": 3})
    assert leasehold.settings(lambda d: Region(**d)) == Region("eu", 3)
    host.set_settings({"regoin": "s3cret"})
    with pytest.raises(SettingsError) as caught:
        leasehold.settings(lambda d: Region(**d))
    assert "s3cret" not in str(caught.value)
    host.set_settings({"token": "s3cret"})
    with pytest.raises(SettingsError) as caught:
        leasehold.settings(lambda d: int(d["token"]))
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ValueError):
        host.set_settings([1])


def test_the_clock_is_the_hosts(host):
    assert leasehold.now() == dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    host.advance(1500)
    assert leasehold.now() == dt.datetime(2026, 1, 1, 0, 0, 1, 500_000, tzinfo=dt.timezone.utc)
    assert leasehold.until_ms(leasehold.now() + dt.timedelta(seconds=2)) == 2000


def test_an_injected_quota_refusal_is_typed_and_writes_nothing(host):
    host.fail_next_commit(Fault.QUOTA_CREATES)
    with pytest.raises(QuotaExceeded) as caught:
        Transaction().create("things", "a", 1).commit()
    e = caught.value
    assert (e.controller, e.quota, e.limit, e.retry_after_ms) == ("controller", "max_creates_per_second", 100, 10)
    assert host.object("things", "a") is None
    # The default policy waits as long as the refusal asks.
    reply = host.reconcile(Scripted(e), "things", "a")
    assert reply.delay_ms == 10
    host.fail_next_commit(Fault.QUOTA_OBJECTS)
    with pytest.raises(QuotaExceeded) as caught:
        Transaction().create("things", "a", 1).commit()
    assert caught.value.kind == "things" and caught.value.retry_after_ms is None
    assert QuotaExceeded.parse("quota exceeded: nonsense") is None


class Task(Kind):
    KIND = "tasks"

    def __init__(self, status, node=None):
        self.status, self.node = status, node

    @classmethod
    def from_value(cls, value):
        return cls(value["status"], value.get("node"))

    def to_value(self):
        out = {"status": self.status}
        if self.node is not None:
            out["node"] = self.node
        return out


def test_typed_reads_name_the_object_that_does_not_decode(host):
    host.seed("tasks", "ok", {"status": "pending"})
    host.seed("tasks", "bad", {"state": "pending"})
    assert Context().typed(Task).get("ok").value.status == "pending"
    with pytest.raises(DecodeError, match="tasks/bad does not have the expected shape"):
        Context().typed(Task).get("bad")
    raw = Api("tasks").get("bad")
    with pytest.raises(DecodeError):
        raw.decode(Task)


def test_typed_writes_go_to_the_types_kind_only(host):
    host.seed("nodes", "n", {"capacity": 1})
    node = Api("nodes").get("n")
    with pytest.raises(Invalid, match="refusing to write it into nodes/n"):
        Transaction().update_typed(node, Task("pending")).commit()
    with pytest.raises(Invalid, match="stored under kind tasks"):
        Transaction().create("nodes", "m", Task("pending")).commit()
    Transaction().create_typed("t", Task("pending")).commit()
    assert host.object("tasks", "t").value == {"status": "pending"}
    assert host.commits()[0].ops[0].key == ObjectKey("tasks", "t")


def test_values_that_do_not_serialize_are_refused_at_commit(host):
    with pytest.raises(Invalid, match="does not serialize"):
        Transaction().create("things", "a", {1, 2}).commit()
    with pytest.raises(Invalid, match="does not serialize"):
        Transaction().create("things", "a", float("nan")).commit()
    assert host.commits() == []


def test_a_transaction_commits_once(host):
    tx = Transaction().create("things", "a", 1)
    tx.commit()
    with pytest.raises(RuntimeError, match="commits once"):
        tx.commit()


def test_run_changes_follows_the_change_stream(host):
    class Echo(Controller):
        def describe(self):
            return Description.watching(["things"])

        def reconcile(self, ctx, kind, name):
            obj = ctx.api(kind).get(name)
            if obj is not None and obj.value < 3:
                Transaction().update(obj, obj.value + 1).commit()
            return Outcome.done()

    host.seed("things", "a", 0)
    host.seed("other", "b", 0)
    host.run_changes(Echo())
    assert host.object("things", "a").value == 3


def test_related_watches_map_changes_to_owners_and_labelled_targets(host):
    class Parent(Controller):
        def __init__(self):
            self.seen = []

        def describe(self):
            return (
                Description.watching(["jobs"])
                .owns("pods", "jobs")
                .related_by_label("notes", "example.com/job", "jobs")
            )

        def reconcile(self, ctx, kind, name):
            self.seen.append((f"{kind}/{name}", ctx.reason))
            return Outcome.done()

    c = Parent()
    host.seed("jobs", "j1", 1)
    host.seed("jobs", "j2", 1)
    start = host.run_changes(c)
    assert c.seen == [("jobs/j1", Reason.CHANGE), ("jobs/j2", Reason.CHANGE)]
    c.seen.clear()
    host.seed_with("pods", "p", 1, leasehold.Metadata().owned_by("jobs", "j1"))
    host.seed("other", "j2", 1)
    host.seed_with("pods", "q", 1, leasehold.Metadata().owned_by("other", "j2"))
    host.seed_with("notes", "n", 1, leasehold.Metadata(labels={"example.com/job": "j2"}))
    host.seed_with("notes", "bad", 1, leasehold.Metadata(labels={"example.com/job": "Not_A_Name"}))
    start = host.run_changes(c, start)
    assert c.seen == [("jobs/j1", Reason.RELATED), ("jobs/j2", Reason.RELATED)]
    c.seen.clear()
    # A label moved: both the object it left and the one it joined.
    host.seed_with("notes", "n", 1, leasehold.Metadata(labels={"example.com/job": "j1"}))
    host.run_changes(c, start)
    assert c.seen == [("jobs/j1", Reason.RELATED), ("jobs/j2", Reason.RELATED)]
    c.seen.clear()
    # A resync reaches what related objects map to, each key once.
    host.resync(c)
    assert c.seen == [("jobs/j1", Reason.RESYNC), ("jobs/j2", Reason.RESYNC)]
    # Even for keys of a kind the controller does not watch itself.
    only_related = Parent()
    only_related.describe = lambda: Description.watching([]).owns("pods")
    host.resync(only_related)
    assert only_related.seen == [("jobs/j1", Reason.RESYNC), ("other/j2", Reason.RESYNC)]
    assert Reason.RELATED.strongest(Reason.RETRY) is Reason.RELATED
    assert Reason.RELATED.strongest(Reason.CHANGE) is Reason.CHANGE
