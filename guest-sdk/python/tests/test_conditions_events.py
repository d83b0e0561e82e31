"""Status conditions (metav1.Condition's shape) and typed events (Normal /
Warning carried in the message, as every SDK of this repository does)."""

import datetime as dt

import pytest

from leasehold import (
    Api,
    Condition,
    ConditionStatus,
    EventType,
    Invalid,
    Transaction,
    get_condition,
    remove_condition,
    set_condition,
)
from leasehold.fake import START


def test_a_condition_reads_and_writes_the_wire_shape(host):
    status = {}
    ready = Condition("Ready", ConditionStatus.TRUE, "Provisioned", "applied", 3)
    assert set_condition(status, ready)
    assert status == {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Provisioned",
                "message": "applied",
                "observed_generation": 3,
                "last_transition_time": "2026-01-01T00:00:00Z",
            }
        ]
    }
    got = get_condition(status, "Ready")
    assert got.is_true and got.status == "True" and got.observed_generation == 3
    assert got.last_transition_time == START
    assert get_condition(status, "Degraded") is None and get_condition(None, "Ready") is None
    # Any RFC 3339 offset and fraction is read.
    other = Condition.from_value({"type": "A", "status": "False", "last_transition_time": "2026-01-01T01:00:00.5+01:00"})
    assert other.last_transition_time == START.replace(microsecond=500000)


def test_the_transition_time_moves_only_when_the_status_does(host):
    status = {"phase": "Pending"}
    pending = Condition("Ready", ConditionStatus.UNKNOWN, "Provisioning")
    assert set_condition(status, pending)
    assert not set_condition(status, pending), "nothing changed"
    host.advance(30_500)
    assert set_condition(status, Condition("Ready", "Unknown", "Provisioning", "still waiting", 2))
    assert get_condition(status, "Ready").last_transition_time == START
    assert get_condition(status, "Ready").observed_generation == 2
    host.advance(30_000)
    assert set_condition(status, Condition("Ready", ConditionStatus.TRUE, "Provisioned"))
    ready = get_condition(status, "Ready")
    # Now, from the SDK's wall clock, to the second.
    assert ready.last_transition_time == START + dt.timedelta(seconds=60)
    assert ready.is_true and len(status["conditions"]) == 1 and status["phase"] == "Pending"
    # The given condition's own time is not used.
    host.advance(10_000)
    set_condition(status, Condition("Ready", "False", "Lost", last_transition_time=START))
    assert get_condition(status, "Ready").last_transition_time == START + dt.timedelta(seconds=70)


def test_conditions_of_other_types_are_kept_in_place_and_removed_by_type(host):
    status = {}
    set_condition(status, Condition("Ready", "False", "Waiting"))
    set_condition(status, Condition("Degraded", "True", "Slow"))
    set_condition(status, Condition("Ready", "True", "Done"))
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Degraded"]
    assert remove_condition(status, "Degraded") and not remove_condition(status, "Degraded")
    assert [c["type"] for c in status["conditions"]] == ["Ready"]
    assert not remove_condition(None, "Ready")


def test_a_condition_is_checked_when_made():
    for bad in [dict(type="", status="True"), dict(type="Ready", status="true"), dict(type="Ready", status="Yes")]:
        with pytest.raises(ValueError):
            Condition(**bad)
    with pytest.raises(ValueError):
        Condition("Ready", "True", observed_generation=-1)
    with pytest.raises(ValueError):
        get_condition({"conditions": {"Ready": {}}}, "Ready")


def test_conditions_go_to_the_store_with_a_status_write(host):
    host.seed("buckets", "b", {"spec": {}})
    bucket = Api("buckets").get("b")
    status = dict(bucket.status or {})
    set_condition(status, Condition("Ready", "True", "Provisioned", "", bucket.generation))
    Transaction().update_status(bucket, status).commit()
    assert get_condition(host.object("buckets", "b").status, "Ready").observed_generation == 1


def test_events_carry_their_type_at_the_start_of_the_message(host):
    host.seed("nodes", "n1", {})
    (
        Transaction()
        .event("nodes", "n1", "Seen", "untyped")
        .event_of_type("nodes", "n1", EventType.NORMAL, "Fine", "all good")
        .warning("nodes", "n1", "DiskFull", "no space left")
        .event_of_type("nodes", "n1", EventType.NORMAL, "Odd", "Warning: is a word")
        .commit()
    )
    events = host.events()
    assert [e.message for e in events] == [
        "untyped",
        "all good",
        "Warning: no space left",
        "Normal: Warning: is a word",
    ]
    assert [(e.event_type, e.text) for e in events] == [
        (EventType.NORMAL, "untyped"),
        (EventType.NORMAL, "all good"),
        (EventType.WARNING, "no space left"),
        (EventType.NORMAL, "Warning: is a word"),
    ]
    assert (EventType.NORMAL.value, EventType.WARNING.value) == ("Normal", "Warning")
    assert EventType.decode("Normal: x") == (EventType.NORMAL, "x")


def test_the_type_prefix_counts_toward_the_hosts_bound(host):
    host.seed("nodes", "n1", {})
    with pytest.raises(Invalid) as caught:
        Transaction().warning("nodes", "n1", "Big", "x" * (4 * 1024 - 3)).commit()
    assert "message" in str(caught.value)
    with pytest.raises(Invalid):
        Transaction().event_of_type("nodes", "n1", "Warning", "Bad", "x").commit()
