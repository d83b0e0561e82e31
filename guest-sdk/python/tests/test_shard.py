"""Shards: the rule that puts every object in one shard, the tenure's shard
from the host, the description's shard label and every-shard kinds, and the
fake host running one shard as the host does."""

import re
from pathlib import Path

import pytest

import leasehold
from leasehold import (
    Controller,
    Description,
    Invalid,
    Metadata,
    Object,
    Outcome,
    Reason,
    Shard,
    Transaction,
    fnv1a64,
)
from leasehold.fake import FakeHost
from leasehold.limits import MAX_SHARDS

ROOT = Path(__file__).resolve().parents[3]
TENANT = "example.com/tenant"


def test_fnv1a64_matches_the_specifications_vectors():
    assert fnv1a64("") == 0xCBF29CE484222325
    assert fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64("foobar") == 0x85944171F73967E8
    # A str is hashed as its UTF-8 bytes.
    assert fnv1a64(b"foobar") == fnv1a64("foobar")
    assert fnv1a64("é") == fnv1a64(b"\xc3\xa9") != fnv1a64(b"\xe9")


def test_objects_fall_into_their_documented_shards():
    # The vectors the host's own tests hold (host/src/shard.rs).
    assert fnv1a64("tasks/t-1") == 0xD1073A09E6F464B0
    assert Shard.of_key("tasks", "t-1", 4) == 0
    assert Shard.of_key("tasks", "t-2", 4) == 1
    assert Shard.of_key("nodes", "n-1", 4) == 1
    assert Shard.of_key("tasks", "t-1", 1) == 0
    assert Shard(1, 4).owns_key("tasks", "t-2")
    assert not Shard(0, 4).owns_key("tasks", "t-2")
    assert str(Shard(1, 4)) == "shard 1 of 4"


def test_every_object_belongs_to_exactly_one_shard():
    for count in (1, 2, 3, 4, 9, MAX_SHARDS):
        shards = [Shard(i, count) for i in range(count)]
        per_shard = [0] * count
        for i in range(2000):
            owners = [s for s in shards if s.owns_key("tasks", f"t-{i}")]
            assert len(owners) == 1, (count, i)
            per_shard[owners[0].index] += 1
        assert all(n > 0 for n in per_shard), (count, per_shard)


def test_a_labelled_object_goes_by_its_labels_value_and_any_other_by_its_key():
    assert Shard.of_label("tenant-a", 4) == fnv1a64("tenant-a") % 4 == 3
    assert Shard.of_label("tenant-c", 4) == 1
    labelled = Object("tasks", "t-1", 1, {}, Metadata({TENANT: "tenant-c"}))
    # By its key t-1 is shard 0's; by its label, shard 1's.
    assert Shard(1, 4).owns(labelled, TENANT)
    assert not Shard(0, 4).owns(labelled, TENANT)
    # Without a declared label, or without the label on the object, the key decides.
    assert Shard(0, 4).owns(labelled)
    assert Shard(0, 4).owns(labelled, "example.com/other")
    plain = Object("tasks", "t-2", 1, {})
    assert Shard(1, 4).owns(plain, TENANT)
    # An empty value is a value the object carries.
    empty = Object("tasks", "t-2", 1, {}, Metadata({TENANT: ""}))
    assert Shard(fnv1a64("") % 4, 4).owns(empty, TENANT)


@pytest.mark.parametrize(
    "index, count, says",
    [
        (0, 0, "1 to 64 shards, not 0"),
        (0, 65, "1 to 64 shards, not 65"),
        (4, 4, "not one of the 4 shards (0 to 3)"),
        (-1, 4, "not one of the 4 shards (0 to 3)"),
        (True, 2, "not one of the 2 shards"),
    ],
)
def test_a_shard_outside_its_bounds_is_refused(index, count, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        Shard(index, count)


def test_the_shard_of_a_key_or_label_needs_a_shard_count():
    for count in (0, MAX_SHARDS + 1):
        with pytest.raises(ValueError, match="1 to 64 shards"):
            Shard.of_key("tasks", "t-1", count)
        with pytest.raises(ValueError, match="1 to 64 shards"):
            Shard.of_label("tenant-a", count)


def test_max_shards_is_the_hosts():
    source = (ROOT / "host" / "src" / "shard.rs").read_text()
    found = re.search(r"pub const MAX_SHARDS: u32 = (\d+);", source)
    assert found is not None, "host/src/shard.rs no longer declares MAX_SHARDS"
    assert MAX_SHARDS == int(found.group(1))


def test_the_fake_host_runs_shard_0_of_1_until_told_otherwise(host):
    assert host.shard() == Shard(0, 1) == Shard.WHOLE == leasehold.shard()
    assert host.set_shard(2, 4) == Shard(2, 4)
    assert leasehold.shard() == Shard(2, 4)
    # Asked of the host each time, never kept: by `shard()` and by a context.
    ctx = leasehold.Context()
    assert ctx.shard == Shard(2, 4)
    host.set_shard(3, 4)
    assert leasehold.shard() == Shard(3, 4) == ctx.shard
    # A new tenure keeps the shard.
    host.new_tenure()
    assert leasehold.shard() == Shard(3, 4)


@pytest.mark.parametrize(
    "index, count, says",
    [
        (0, 0, "FakeHost.set_shard(0, 0): a controller runs as 1 to 64 shards, not 0"),
        (0, 65, "FakeHost.set_shard(0, 65): a controller runs as 1 to 64 shards, not 65"),
        (4, 4, "FakeHost.set_shard(4, 4): shard index 4 is not one of the 4 shards (0 to 3)"),
        (-1, 4, "FakeHost.set_shard(-1, 4): shard index -1 is not one of the 4 shards"),
    ],
)
def test_the_fake_host_refuses_a_shard_outside_its_bounds(host, index, count, says):
    host.set_shard(1, 2)
    with pytest.raises(ValueError, match=re.escape(says)):
        host.set_shard(index, count)
    assert host.shard() == Shard(1, 2)


def test_the_description_declares_the_shard_label_and_every_shard_kinds():
    base = Description.watching(["tasks"])
    assert (base.shard_label, base.every_shard) == (None, [])
    d = base.shard_by_label(TENANT).watch_on_every_shard("nodes").resync_every(5).owns("pods")
    assert d.shard_label == TENANT
    assert d.every_shard == ["nodes"]
    # An every-shard kind is watched too.
    assert (d.resync_ms, d.watches) == (5, ["tasks", "nodes"])
    # Builders copy: the base is unchanged, and a kind is listed once.
    assert (base.shard_label, base.every_shard, base.watches) == (None, [], ["tasks"])
    twice = d.watch_on_every_shard("nodes").watch_on_every_shard("tasks")
    assert (twice.watches, twice.every_shard) == (["tasks", "nodes"], ["nodes", "tasks"])
    assert Description(["a"], shard_label="k", every_shard=["a"]).every_shard == ["a"]


class Recorder(Controller):
    """Records what it is asked to reconcile; describes what it is given."""

    def __init__(self, description):
        self.description = description
        self.seen = []

    def describe(self):
        return self.description

    def reconcile(self, ctx, kind, name):
        self.seen.append((f"{kind}/{name}", ctx.reason))
        return Outcome.done()


def seed_tasks_and_nodes(host):
    # By key among 4 shards: t-1..t-8 are 0,1,2,3,0,1,2,3; n-1 1, n-2 0, n-3 3.
    for i in range(1, 9):
        host.seed("tasks", f"t-{i}", i)
    for i in range(1, 4):
        host.seed("nodes", f"n-{i}", i)


def test_a_sharded_fake_resyncs_only_its_own_objects_and_the_every_shard_kinds(host):
    seed_tasks_and_nodes(host)
    host.set_shard(1, 4)
    c = Recorder(Description.watching(["nodes", "tasks"]))
    host.resync(c)
    assert [k for k, _ in c.seen] == ["nodes/n-1", "tasks/t-2", "tasks/t-6"]
    c = Recorder(Description.watching(["tasks"]).watch_on_every_shard("nodes"))
    host.resync(c)
    assert [k for k, _ in c.seen] == [
        "tasks/t-2", "tasks/t-6", "nodes/n-1", "nodes/n-2", "nodes/n-3",
    ]
    # Unsharded, it reconciles everything.
    host.set_shard(0, 1)
    c = Recorder(Description.watching(["nodes", "tasks"]))
    host.resync(c)
    assert len(c.seen) == 11


def test_a_sharded_fake_places_a_labelled_object_by_its_label(host):
    seed_tasks_and_nodes(host)
    # t-1 (shard 0 by key) joins tenant-c's shard 1; t-2 (1 by key) tenant-a's shard 3.
    host.seed_with("tasks", "t-1", 1, Metadata({TENANT: "tenant-c"}))
    host.seed_with("tasks", "t-2", 2, Metadata({TENANT: "tenant-a"}))
    host.set_shard(1, 4)
    c = Recorder(Description.watching(["tasks"]).shard_by_label(TENANT))
    host.resync(c)
    assert [k for k, _ in c.seen] == ["tasks/t-1", "tasks/t-6"]
    # Without the label declared, the keys decide.
    c = Recorder(Description.watching(["tasks"]))
    host.resync(c)
    assert [k for k, _ in c.seen] == ["tasks/t-2", "tasks/t-6"]


def test_a_sharded_fake_follows_only_the_changes_that_wake_its_shard(host):
    host.set_shard(1, 4)
    c = Recorder(Description.watching(["tasks"]).shard_by_label(TENANT).owns("pods", "tasks"))
    start = host.revision
    seed_tasks_and_nodes(host)
    host.seed_with("tasks", "t-1", 1, Metadata({TENANT: "tenant-c"}))
    start = host.run_changes(c, start)
    assert c.seen == [("tasks/t-2", Reason.CHANGE), ("tasks/t-6", Reason.CHANGE),
                      ("tasks/t-1", Reason.CHANGE)]
    c.seen.clear()
    # A pod maps to its owner, reconciled by the shard that owns the owner
    # as stored: t-1 by its label (shard 1), t-3 by its key (shard 2).
    host.seed_with("pods", "p-1", 1, Metadata().owned_by("tasks", "t-1"))
    host.seed_with("pods", "p-3", 1, Metadata().owned_by("tasks", "t-3"))
    start = host.run_changes(c, start)
    assert c.seen == [("tasks/t-1", Reason.RELATED)]
    c.seen.clear()
    # A deletion wakes the shard the object belonged to, by its last labels.
    host.remove("tasks", "t-1")
    host.run_changes(c, start)
    assert c.seen == [("tasks/t-1", Reason.CHANGE)]
    # Not shard 0, which owns t-1 by its key; but the deletion of p-1 (its
    # owner's deletion collected it) maps to t-1, which no longer exists and
    # so goes by its key (the WIT's rule for a related target): shard 0's.
    host.set_shard(0, 4)
    c.seen.clear()
    host.run_changes(c, start)
    assert c.seen == [("tasks/t-1", Reason.RELATED)]


def test_a_shards_blind_status_write_to_another_shards_object_is_refused(host):
    host.seed("tasks", "t-1", 1)
    host.seed("tasks", "t-2", 2)
    # Unsharded, any status write goes.
    Transaction().write_status("tasks", "t-2", None, {"ok": 1}).commit()
    host.set_shard(0, 4)
    before = host.revision
    with pytest.raises(Invalid, match=re.escape(
        "tasks/t-2 belongs to shard 1 of 4, not to this shard 0 of 4"
    )):
        Transaction().write_status("tasks", "t-1", None, 1).write_status(
            "tasks", "t-2", None, 2
        ).commit()
    assert host.revision == before, "a refused commit writes nothing"
    # Its own object, or another's with an expected generation, goes.
    Transaction().write_status("tasks", "t-1", None, 1).commit()
    Transaction().update_status(host.object("tasks", "t-2"), 2).commit()


def test_under_a_shard_label_every_blind_status_write_is_refused(host):
    host.seed("tasks", "t-1", 1)
    host.set_shard(0, 4)

    class Blind(Recorder):
        def reconcile(self, ctx, kind, name):
            Transaction().write_status(kind, name, None, {"seen": True}).commit()
            return Outcome.done()

    by_label = Blind(Description.watching(["tasks"]).shard_by_label(TENANT))
    reply = host.reconcile(by_label, "tasks", "t-1")
    assert reply.is_failed and "sharded by the label example.com/tenant" in reply.message
    assert host.object("tasks", "t-1").status is None
    # The same controller without a shard label writes its own object's status.
    reply = host.reconcile(Blind(Description.watching(["tasks"])), "tasks", "t-1")
    assert reply == leasehold.Reply("done")
    assert host.object("tasks", "t-1").status == {"seen": True}


def test_a_fresh_fake_host_is_unsharded():
    assert FakeHost().shard() == Shard(0, 1)
