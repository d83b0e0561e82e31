"""The adapter between the SDK and the bindings componentize-py generates
from wit/controller.wit, run natively: the generated import functions are
stubs, replaced here by recorders, so every conversion is checked without
a component."""

import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional

import pytest

WIT = Path(__file__).resolve().parents[3] / "wit"
WORLD = "leasehold:controller/controller@0.4.0"


def componentize_py() -> str:
    beside = Path(sys.executable).parent / "componentize-py"
    found = str(beside) if beside.exists() else shutil.which("componentize-py")
    if found is None:
        pytest.skip("componentize-py is not installed (cargo xtask installs it)")
    return found


@pytest.fixture(scope="module")
def wit(tmp_path_factory):
    out = tmp_path_factory.mktemp("bindings")
    subprocess.run(
        [componentize_py(), "-d", str(WIT), "-w", WORLD, "bindings", str(out)],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(out))
    try:
        component = importlib.import_module("leasehold.component")
        from wit_world.exports import reconciler
        from wit_world.imports import leasehold_controller_types as types
        from wit_world.imports import logging, store, tenure
        from componentize_py_types import Err

        yield type(
            "Wit",
            (),
            dict(
                component=component,
                rec=reconciler,
                types=types,
                store=store,
                tenure=tenure,
                logging=logging,
                Err=Err,
            ),
        )
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith(("wit_world", "componentize_py"))]:
            del sys.modules[name]
        sys.modules.pop("leasehold.component", None)
        sys.modules.pop("leasehold._wasi_http", None)


import leasehold
from leasehold import (
    Conflict,
    Controller,
    Description,
    Failed,
    Fenced,
    Invalid,
    Metadata,
    NotFound,
    ObjectKey,
    Outcome,
    QuotaExceeded,
    Reason,
    Selector,
    Transaction,
    Unavailable,
)


def test_every_store_error_becomes_its_exception(wit, monkeypatch):
    s = wit.store
    cases = [
        (s.StoreError_Fenced("lease x/y epoch 3 lost"), Fenced),
        (s.StoreError_Conflict(wit.types.ObjectKey("tasks", "t1")), Conflict),
        (s.StoreError_NotFound(wit.types.ObjectKey("tasks", "t2")), NotFound),
        (s.StoreError_Invalid("bad name"), Invalid),
        (s.StoreError_Unavailable("down"), Unavailable),
        (
            s.StoreError_Invalid(
                "quota exceeded: controller=c quota=max_creates_per_second limit=5 "
                "retry_after_ms=7: too fast"
            ),
            QuotaExceeded,
        ),
    ]
    host = wit.component.WitHost()
    for wire, expected in cases:
        def refuse(*args, wire=wire):
            raise wit.Err(wire)

        monkeypatch.setattr(s, "commit", refuse)
        monkeypatch.setattr(s, "get", refuse)
        with pytest.raises(expected) as caught:
            host.commit([], [])
        with pytest.raises(expected):
            host.get("tasks", "t1")
        if expected in (Conflict, NotFound):
            assert caught.value.key == ObjectKey("tasks", wire.value.name)
        if expected is QuotaExceeded:
            assert caught.value.retry_after_ms == 7


def test_every_op_and_event_reaches_the_wire_as_itself(wit, monkeypatch):
    s = wit.store
    sent = []

    def commit(ops, events):
        sent.append((ops, events))
        return s.Committed(9, [4])

    monkeypatch.setattr(s, "commit", commit)
    leasehold._host.install(wit.component.WitHost())
    obj = leasehold.Object("tasks", "t", 5, {"a": 1}, Metadata(finalizers=("f",)), None, 2)
    meta = Metadata(labels={"b": "2", "a": "1"}).owned_by("jobs", "j").finalizer("x/y")
    committed = (
        Transaction()
        .create("tasks", "c", {"z": 1, "a": 2})
        .update_if_version("tasks", "u", 3, [1])
        .delete_if_version("tasks", "d", 4)
        .create_with("tasks", "w", 1, meta)
        .replace(obj, 2, Metadata())
        .write_status("tasks", "s", 7, {"ok": True})
        .check_absent("tasks", "k")
        .event("tasks", "c", "Made", "hello")
        .commit()
    )
    assert committed == leasehold.Committed(9, (4,))
    ops, events = sent[0]
    wire_meta = wit.types.Metadata([("a", "1"), ("b", "2")], wit.types.ObjectKey("jobs", "j"), ["x/y"])
    assert ops == [
        s.Op_Create(s.CreateOp("tasks", "c", '{"z":1,"a":2}')),
        s.Op_Update(s.UpdateOp("tasks", "u", 3, "[1]")),
        s.Op_Delete(s.DeleteOp("tasks", "d", 4)),
        s.Op_CreateWith(s.CreateWithOp("tasks", "w", "1", wire_meta)),
        s.Op_Replace(s.ReplaceOp("tasks", "t", 5, "2", wit.types.Metadata([], None, []))),
        s.Op_Status(s.StatusOp("tasks", "s", 7, '{"ok":true}')),
        s.Op_Check(s.CheckOp("tasks", "k", 0)),
    ]
    assert events == [s.NewEvent("tasks", "c", "Made", "hello")]
    # Metadata and status left out stay none on the wire.
    Transaction().set_metadata(obj, meta).clear_status(leasehold.Object("tasks", "q", 1, 0)).commit()
    ops, _ = sent[1]
    assert ops[0] == s.Op_Replace(s.ReplaceOp("tasks", "t", 5, None, wire_meta))
    assert ops[1] == s.Op_Status(s.StatusOp("tasks", "q", 1, None))
    # A replace of the value alone keeps the metadata: none on the wire.
    wit.component.WitHost().commit([leasehold.Replace(obj.key, 5, "3", None)], [])
    ops, _ = sent[2]
    assert ops[0] == s.Op_Replace(s.ReplaceOp("tasks", "t", 5, "3", None))


def test_reads_convert_objects_pages_and_selectors(wit, monkeypatch):
    s, t = wit.store, wit.types
    wire = t.Object(
        "tasks", "t", 8, '{"a":1}', t.Metadata([("k", "v")], t.ObjectKey("jobs", "j"), ["f"]),
        '{"s":2}', 3, 1_767_225_600_000,
    )
    asked = []
    monkeypatch.setattr(s, "get", lambda kind, name: wire)
    monkeypatch.setattr(
        s, "list_selected",
        lambda kind, sel, after, limit: asked.append((kind, sel, after, limit)) or s.ObjectPage([wire], "t"),
    )
    leasehold._host.install(wit.component.WitHost())
    got = leasehold.Api("tasks").get("t")
    assert (got.version, got.value, got.status, got.generation) == (8, {"a": 1}, {"s": 2}, 3)
    assert got.metadata == Metadata({"k": "v"}, ObjectKey("jobs", "j"), ("f",))
    assert got.deleting_since.isoformat() == "2026-01-01T00:00:00+00:00"
    page = leasehold.Api("tasks").list_selected(Selector().label("k", "v").containing({"a": 1}), "s", 7)
    assert page.next == "t" and [o.name for o in page.objects] == ["t"]
    assert asked == [("tasks", s.Selector([("k", "v")], '{"a":1}'), "s", 7)]


class Scripted(Controller):
    def __init__(self, result, description=None):
        self.result, self.description, self.reasons = result, description, []

    def describe(self):
        return self.description or Description.watching(["tasks"]).resync_every(60_000)

    def reconcile(self, ctx, kind, name):
        self.reasons.append(ctx.reason)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def exported(wit, controller):
    return wit.component.export(lambda: controller)()


def test_the_exported_reconciler_answers_the_host_in_wit_terms(wit):
    rec = wit.rec
    c = Scripted(Outcome.requeue_after(250))
    r = exported(wit, c)
    assert r.reconcile("tasks", "t", rec.ReconcileReason_Retry()) == rec.Outcome_RequeueAfter(250)
    c.result = Outcome.done()
    assert r.reconcile("tasks", "t", rec.ReconcileReason_Resync()) == rec.Outcome_Done()
    c.result = Fenced("gone")
    with pytest.raises(wit.Err) as caught:
        r.reconcile("tasks", "t", rec.ReconcileReason_Change())
    assert caught.value.value == rec.ReconcileError_Fenced()
    c.result = Failed("boom", 40)
    with pytest.raises(wit.Err) as caught:
        r.reconcile("tasks", "t", rec.ReconcileReason_Requeue())
    assert caught.value.value == rec.ReconcileError_Failed(rec.Failure("boom", 40))
    assert c.reasons == [Reason.RETRY, Reason.RESYNC, Reason.CHANGE, Reason.REQUEUE]
    # The host is the WIT imports once the controller runs.
    assert isinstance(leasehold._host.current(), wit.component.WitHost)


def test_every_reason_of_the_world_is_known_to_the_sdk(wit):
    cases = [n for n in dir(wit.rec) if n.startswith("ReconcileReason_")]
    assert len(cases) >= 4
    for case in cases:
        reason = wit.component._reason_in(getattr(wit.rec, case)())
        assert reason.value == case.rpartition("_")[2].lower(), case


def test_the_description_reaches_the_host_with_its_related_watches(wit):
    d = Description.watching(["jobs"]).resync_every(5).owns("pods", "jobs").related_by_label(
        "notes", "example.com/job", "jobs"
    )
    got = exported(wit, Scripted(Outcome.done(), d)).describe()
    assert (got.watches, got.resync_period_ms) == (["jobs"], 5)
    rec = wit.rec
    if hasattr(rec, "RelatedWatch"):
        assert got.related == [
            rec.RelatedWatch("pods", rec.RelatedMap_Owner("jobs")),
            rec.RelatedWatch("notes", rec.RelatedMap_Label(rec.LabelMap("example.com/job", "jobs"))),
        ]
    no_resync = exported(wit, Scripted(Outcome.done(), Description.watching(["a"]))).describe()
    assert no_resync.resync_period_ms == 0
    # Undeclared, the shard label is none and no kind is every shard's.
    assert (got.shard_label, got.every_shard) == (None, [])
    assert (no_resync.shard_label, no_resync.every_shard) == (None, [])


def test_the_description_reaches_the_host_with_its_shard_label_and_every_shard_kinds(wit):
    d = (
        Description.watching(["nodes", "tasks"])
        .shard_by_label("example.com/tenant")
        .watch_on_every_shard("nodes")
    )
    got = exported(wit, Scripted(Outcome.done(), d)).describe()
    assert got == wit.rec.Description(
        ["nodes", "tasks"], 0, [], "example.com/tenant", ["nodes"], None
    )


def test_the_shard_is_the_tenures_asked_each_time(wit, monkeypatch):
    # The WIT record as componentize-py hands it over: its fields by name.
    answers = iter([SimpleNamespace(index=2, count=4), SimpleNamespace(index=3, count=4)])
    monkeypatch.setattr(wit.tenure, "shard", lambda: next(answers))
    leasehold._host.install(wit.component.WitHost())
    assert leasehold.shard() == leasehold.Shard(2, 4)
    assert leasehold.shard() == leasehold.Shard(3, 4)


def test_the_settings_schema_reaches_the_host_as_json_text(wit):
    @dataclasses.dataclass
    class Db:
        host: str
        port: int = 5432

    @dataclasses.dataclass
    class Cfg:
        region: str
        db: Db
        regions: List[str] = dataclasses.field(default_factory=list)
        budget: Optional[float] = None

    d = Description.watching(["buckets"]).settings_of(Cfg)
    got = exported(wit, Scripted(Outcome.done(), d)).describe()
    schema = json.loads(got.settings_schema)
    assert schema["type"] == "object"
    assert schema["required"] == ["region", "db"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["db"]["required"] == ["host"]
    assert schema["properties"]["db"]["properties"]["port"] == {"type": "integer"}
    assert schema["properties"]["regions"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["budget"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}
