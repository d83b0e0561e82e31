"""The fake must hold controllers to the host's rules: were it laxer, a
controller could pass its tests and fail against the host. The store's
rules are the conformance table's (`test_conformance.py` runs it); these
tests hold what only the fake has: lowered limits, the call's payload,
faults, hooks and records."""

import pytest

from leasehold import (
    Api,
    Conflict,
    Fenced,
    Invalid,
    NotFound,
    Transaction,
    Unavailable,
)
from leasehold import _host
from leasehold.fake import At, Change, Fault, FakeHost, Limits
from leasehold.transaction import Create, NewEvent
from leasehold.keys import ObjectKey


def things() -> Api:
    return Api("things")


def test_values_must_be_json_within_the_size_limit():
    host = FakeHost(Limits(max_value_bytes=10))
    with pytest.raises(Invalid, match="not JSON"):
        host.commit([Create(ObjectKey("things", "a"), "{nope")], [])
    with pytest.raises(Invalid, match="the limit is 10"):
        Transaction().create("things", "a", "x" * 20).commit()
    # Whitespace does not count once normalized... but the raw text is bounded too.
    with pytest.raises(Invalid, match="11 bytes"):
        host.commit([Create(ObjectKey("things", "a"), '[1,  2, 3 ]')], [])
    Transaction().create("things", "a", [1, 2, 3]).commit()
    with pytest.raises(Invalid, match="not JSON"):
        host.commit([Create(ObjectKey("things", "b"), "NaN")], [])


def test_commits_are_bounded_in_ops_events_and_payload():
    host = FakeHost(Limits(max_ops_per_commit=2, max_events_per_commit=1, max_call_payload_bytes=100))
    tx = Transaction()
    for n in range(3):
        tx.create("things", f"t{n}", 1)
    with pytest.raises(Invalid, match="3 operations; the limit is 2"):
        tx.commit()
    with pytest.raises(Invalid, match="2 events; the limit is 1"):
        Transaction().event("things", "a", "One", "").event("things", "b", "Two", "").commit()
    with pytest.raises(Invalid, match="payload of"):
        Transaction().create("things", "a", "x" * 200).commit()
    with pytest.raises(Invalid, match="at least one"):
        Transaction().commit()
    with pytest.raises(Invalid, match="more than one operation"):
        Transaction().create("things", "a", 1).check_absent("things", "a").commit()
    assert host.commits() == []


def test_call_faults_count_every_sort_of_call(host):
    host.fail(At.call(3), Fault.UNAVAILABLE)
    things().get("a")
    things().list()
    with pytest.raises(Unavailable):
        Transaction().create("things", "a", 1).commit()
    Transaction().create("things", "a", 1).commit()
    assert host.calls().total == 4 and host.pending_faults == 0


def test_commit_faults_skip_reads(host):
    host.fail(At.commit(1), Fault.CONFLICT)
    things().get("a")
    things().list()
    with pytest.raises(Conflict):
        Transaction().create("things", "a", 1).commit()
    assert things().get("a") is None


def test_a_fenced_fault_ends_the_tenure_for_good(host):
    host.fail(At.call(2), Fault.FENCED)
    things().get("a")
    with pytest.raises(Fenced) as caught:
        things().get("a")
    assert "epoch 1" in str(caught.value) and caught.value.is_fenced
    with pytest.raises(Fenced):
        Transaction().create("things", "a", 1).commit()
    assert host.is_revoked and host.commits() == []
    fence = host.new_tenure()
    assert fence.epoch == 2
    Transaction().create("things", "a", 1).commit()
    assert host.commits()[0].epoch == 2


def test_a_revoked_lease_fences_every_write(host):
    host.revoke()
    with pytest.raises(Fenced):
        Transaction().create("things", "a", 1).commit()
    assert host.object("things", "a") is None


def test_unavailable_backend_fails_every_call_until_it_is_back(host):
    host.set_unavailable(True)
    with pytest.raises(Unavailable):
        things().get("a")
    with pytest.raises(Unavailable):
        Transaction().create("things", "a", 1).commit()
    host.set_unavailable(False)
    Transaction().create("things", "a", 1).commit()


def test_a_lost_reply_still_lands(host):
    host.fail_next_commit(Fault.LOST_REPLY)
    with pytest.raises(Unavailable, match="may have been applied"):
        Transaction().create("things", "a", 1).event("things", "a", "Made", "").commit()
    assert things().get("a").value == 1
    assert len(host.commits()) == 1 and len(host.events()) == 1


def test_before_commit_writes_land_before_the_commit_is_checked(host):
    host.seed("things", "a", 1)
    a = things().get("a")
    host.before_commit(1, lambda h: h.seed("things", "a", 5))
    with pytest.raises(Conflict):
        Transaction().update(a, 2).commit()
    assert things().get("a").value == 5


def test_commit_only_faults_cannot_be_aimed_at_reads(host):
    for fault in [Fault.CONFLICT, Fault.LOST_REPLY, Fault.QUOTA_CREATES]:
        with pytest.raises(ValueError):
            host.fail(At.call(1), fault)
    with pytest.raises(ValueError):
        host.fail(At.commit(0), Fault.CONFLICT)


def test_store_calls_without_a_host_say_what_to_do():
    saved = _host._current
    _host.install(None)
    try:
        with pytest.raises(RuntimeError, match="FakeHost"):
            things().get("a")
    finally:
        _host.install(saved)


def test_long_log_lines_are_truncated_on_a_char_boundary():
    import leasehold

    host = FakeHost(Limits(log_line_bytes=5))
    leasehold.info("abcdé")  # é is two bytes: cut before it
    assert host.logs()[0].message == "abcd"


def test_records_carry_the_epoch_of_their_tenure(host):
    import leasehold

    Transaction().create("things", "a", 1).event("things", "a", "Made", "").commit()
    leasehold.info("one")
    host.new_tenure()
    Transaction().create("things", "b", 1).event("things", "b", "Made", "").commit()
    leasehold.warn("two")
    assert [c.epoch for c in host.commits()] == [1, 2]
    assert [e.epoch for e in host.events()] == [1, 2]
    assert [(l.level.value, l.epoch) for l in host.logs()] == [("info", 1), ("warn", 2)]
