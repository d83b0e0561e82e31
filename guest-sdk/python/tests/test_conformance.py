"""The conformance tables' runner for the Python fake.

Every case of `tests/conformance/store/*.json` (the cases the host's stores
and the Rust and JavaScript fakes run too) against a fresh `FakeHost`,
through the calls a guest makes: `commit`, `get`, `list`, `list_selected`.
Cases that need the host's HTTP API are the host's alone and are skipped.

What the wire cannot carry is compared as the wire carries it: a
`too_large` refusal is an `Invalid` whose text begins `too large: `, and a
conflict names its object but says nothing more. A selector's `contains`
reaches the fake as the JSON text of the case, as it reaches the host.
Numbers are a fresh fake's: a case's first number is 1.

The HTTP table (`tests/conformance/http/*.json`) runs through the SDK's
own requests (`leasehold.http.Request`), as a controller sends them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import pytest

from leasehold import http
from leasehold.errors import Conflict, Invalid, NotFound, QuotaExceeded, StoreError
from leasehold.fake import FakeHost, HttpFault, HttpReply, QuotaLimits
from leasehold.keys import Metadata, ObjectKey, Selector
from leasehold.transaction import Check, Create, CreateWith, Delete, NewEvent, Replace, Status, Update

TABLE = Path(__file__).resolve().parents[3] / "tests" / "conformance" / "store"


def _cases() -> List[Any]:
    cases = []
    for path in sorted(TABLE.glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            cases.append(pytest.param(case, id=f"{path.stem}: {case['name']}"))
    return cases


CASES = _cases()


def test_the_table_is_large_enough():
    runnable = [c for c in CASES if "api" not in c.values[0].get("needs", [])]
    assert len(runnable) >= 150


@dataclass(frozen=True)
class _TextSelector(Selector):
    """A selector whose `contains` is given as JSON text, as a guest's
    crosses to the host."""

    text: str = ""

    def contains_json(self) -> Optional[str]:
        return self.text if self.has_contains else None


def _key(key: Any) -> ObjectKey:
    if isinstance(key, str):
        kind, _, name = key.partition("/")
        return ObjectKey(kind, name)
    return ObjectKey(key["kind"], key["name"])


def _text(value: Any) -> str:
    """JSON text as the table gives it: a string, or a generator of a long one."""
    if isinstance(value, str):
        return value
    if "string_of" in value:
        return '"' + "x" * value["string_of"] + '"'
    if "array_of" in value:
        return "[" + ",".join([value["array_of"]] * value["times"]) + "]"
    if "nested" in value:
        return "[" * value["nested"] + "]" * value["nested"]
    raise AssertionError(f"not a JSON text of the table: {value}")


def _meta(meta: Any) -> Metadata:
    owner = meta.get("owner")
    return Metadata(
        dict(meta.get("labels") or {}),
        None if owner is None else _key(owner),
        tuple(meta.get("finalizers") or ()),
    )


def _ops(op: Any) -> list:
    if "create_range" in op:
        r = op["create_range"]
        meta = _meta(r.get("meta") or {})
        start = r.get("from", 0)
        return [
            CreateWith(ObjectKey(r["kind"], f"{r['prefix']}{i:04d}"), _text(r["value"]), meta)
            for i in range(start, start + r["count"])
        ]
    if "create" in op:
        key = _key(op["create"])
        if "meta" in op:
            return [CreateWith(key, _text(op["value"]), _meta(op["meta"]))]
        return [Create(key, _text(op["value"]))]
    if "update" in op:
        return [Update(_key(op["update"]), op.get("version", 0), _text(op["value"]))]
    if "replace" in op:
        value = _text(op["value"]) if "value" in op else None
        meta = _meta(op["meta"]) if "meta" in op else None
        return [Replace(_key(op["replace"]), op.get("version", 0), value, meta)]
    if "delete" in op:
        return [Delete(_key(op["delete"]), op.get("version", 0))]
    if "status" in op:
        value = op.get("value")
        return [Status(_key(op["status"]), op.get("generation"), None if value is None else _text(value))]
    if "check" in op:
        return [Check(_key(op["check"]), op.get("version", 0))]
    raise AssertionError(f"an operation of an unknown kind: {op}")


class _Run:
    def __init__(self) -> None:
        self.host = FakeHost()
        self.problems: List[str] = []

    def case(self, case: Any) -> None:
        for i, step in enumerate(case["steps"]):
            before = len(self.problems)
            self.step(step)
            self.problems[before:] = [f"step {i}: {p}" for p in self.problems[before:]]
        for key, want in (case.get("objects") or {}).items():
            k = _key(key)
            self.compare_object(f"final {key}", self.host.get(k.kind, k.name), want)
        if "events" in case:
            got = [(e.seq, e.revision, str(e.key), e.reason, e.message) for e in self.host.events()]
            want = [(e["seq"], e["revision"], e["about"], e["reason"], e.get("message")) for e in case["events"]]
            got = [g if w[4] is not None else g[:4] + (None,) for g, w in zip(got, want)] + got[len(want):]
            if got != want:
                self.problems.append(f"events {got}, expected {want}")
        if "changes" in case:
            got = [
                (c.position, c.revision, str(c.key),
                 "deleted" if c.deleted else ("created" if c.before is None else "updated"))
                for c in self.host.changes()
            ]
            want = [(c["position"], c["revision"], c["object"], c["change"]) for c in case["changes"]]
            if got != want:
                self.problems.append(f"changes {got}, expected {want}")

    def step(self, step: Any) -> None:
        expect = step["expect"]
        try:
            if "commit" in step:
                commit = step["commit"]
                ops = [o for op in commit.get("ops", []) for o in _ops(op)]
                events = [NewEvent(_key(e["about"]), e["reason"], e["message"]) for e in commit.get("events", [])]
                committed = self.host.commit(ops, events)
                seqs = expect.get("events")
                if (
                    "error" in expect
                    or committed.revision != expect.get("revision")
                    or (seqs is not None and list(committed.event_seqs) != seqs)
                ):
                    self.problems.append(
                        f"committed at {committed.revision} with events {committed.event_seqs}, expected {expect}"
                    )
            elif "get" in step:
                key = _key(step["get"])
                got = self.host.get(key.kind, key.name)
                if "error" in expect:
                    self.problems.append(f"read {got}, expected {expect}")
                else:
                    self.compare_object(f"get {key}", got, expect["object"])
            elif "list" in step:
                q = step["list"]
                labels = q.get("labels") or {}
                if labels or "contains" in q:
                    selector = _TextSelector(
                        dict(labels), None, "contains" in q, _text(q["contains"]) if "contains" in q else ""
                    )
                    page = self.host.list_selected(q["kind"], selector, q.get("after"), q.get("limit", 0))
                else:
                    page = self.host.list(q["kind"], q.get("after"), q.get("limit", 0))
                names = [o.name for o in page.objects]
                if "error" in expect or names != expect["names"]:
                    self.problems.append(f"listed {names}, expected {expect}")
                if "next" in expect and page.next != expect["next"]:
                    self.problems.append(f"next {page.next}, expected {expect['next']}")
            else:
                raise AssertionError(f"a step of an unknown kind: {step}")
        except StoreError as e:
            self.error(e, expect)

    def error(self, error: StoreError, expect: Any) -> None:
        code = expect.get("error")
        if code is None:
            self.problems.append(f"failed: {error!r}, expected {expect}")
            return
        if isinstance(error, (Conflict, NotFound)):
            ok = code == ("conflict" if isinstance(error, Conflict) else "not_found")
            if "object" in expect and _key(expect["object"]) != error.key:
                self.problems.append(f"failed naming {error.key}, expected {expect['object']}")
        elif isinstance(error, (Invalid, QuotaExceeded)):
            # The wire has no `too_large`: the host sends it as `invalid` with
            # its text; a quota refusal is an `invalid` the SDK types.
            why = error.why if isinstance(error, Invalid) else str(error)
            ok = code == "invalid" or (code == "too_large" and why.startswith("too large: "))
            fragment = expect.get("message")
            if fragment is not None and fragment not in why:
                self.problems.append(f"message {why!r} lacks {fragment!r}")
        else:
            ok = False
        if not ok:
            self.problems.append(f"failed as {error!r}, expected {code}")

    def compare_object(self, what: str, got: Any, want: Any) -> None:
        if got is None or want is None:
            if got is not want:
                self.problems.append(f"{what}: {got}, expected {want}")
            return
        fields = {
            "version": got.version,
            "value": got.value,
            "generation": got.generation,
            "status": got.status,
            "deleting": got.deleting_since_ms is not None,
            "labels": dict(got.metadata.labels),
            "owner": None if got.metadata.owner is None else str(got.metadata.owner),
            "finalizers": list(got.metadata.finalizers),
        }
        for name, value in want.items():
            expected = value
            if name in ("value", "status") and value is not None:
                expected = _text(value)
            if name == "owner" and isinstance(value, dict):
                expected = str(_key(value))
            if fields[name] != expected:
                self.problems.append(f"{what}: {name} {fields[name]!r}, expected {expected!r}")


@pytest.mark.parametrize("case", CASES)
def test_conformance_case(case: Any) -> None:
    if "api" in case.get("needs", []):
        pytest.skip("needs the host's HTTP API")
    run = _Run()
    if "quota" in case:
        run.host.set_quotas(QuotaLimits(**case["quota"]))
    run.case(case)
    assert run.problems == [], "\n".join(run.problems)


# ----- outbound HTTP: tests/conformance/http/*.json ------------------------

HTTP_TABLE = TABLE.parent / "http"


def _http_cases() -> List[Any]:
    cases = []
    for path in sorted(HTTP_TABLE.glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            cases.append(pytest.param(case, id=f"{path.stem}: {case['name']}"))
    return cases


HTTP_CASES = _http_cases()


def test_the_http_table_is_there():
    assert len(HTTP_CASES) >= 10


@pytest.mark.parametrize("case", HTTP_CASES)
def test_http_conformance_case(case: Any) -> None:
    """One case of the HTTP table, through the SDK's own requests."""
    faults = {
        "reply_lost": HttpFault.REPLY_LOST,
        "reply_timed_out": HttpFault.REPLY_TIMED_OUT,
        "refused": HttpFault.REFUSED,
        "timeout": HttpFault.TIMEOUT,
        "fenced": HttpFault.FENCED,
    }
    host = FakeHost()
    problems: List[str] = []
    if case.get("allow"):
        host.allow_http(case["allow"])
    for route in case.get("respond", []):
        host.respond(route["pattern"], HttpReply(route["status"]))
    for i, step in enumerate(case["steps"]):
        if step.get("revoke"):
            host.revoke()
            continue
        if step.get("new_tenure"):
            host.new_tenure()
            continue
        if "fault" in step:
            host.fail_next_http(faults[step["fault"]])
        send = step["send"]
        request = http.Request(http.Method(send["method"]), send["url"])
        for name, value in (send.get("headers") or {}).items():
            request = request.header(name, value)
        if "body" in send:
            request = request.body(send["body"].encode("utf-8"))
        try:
            got = f"status {request.send().status}"
        except http.Denied:
            got = "denied"
        except http.Fenced:
            got = "fenced"
        except http.Connection:
            got = "connection"
        except http.Timeout:
            got = "timeout"
        expect = step["expect"]
        want = f"status {expect['status']}" if "status" in expect else expect["error"]
        if got != want:
            problems.append(f"step {i}: {got}, expected {want}")
    records = host.http_requests()
    want_records = case["requests"]
    if len(records) != len(want_records):
        problems.append(f"{len(records)} requests left ({[r.url for r in records]}), expected {len(want_records)}")
    else:
        for record, want in zip(records, want_records):
            got = (str(record.method), record.url, record.delivered, record.status)
            expected = (want["method"], want["url"], want["delivered"], want["status"])
            if got != expected:
                problems.append(f"request {got}, expected {expected}")
            for name, value in (want.get("headers") or {}).items():
                if record.header(name) != value:
                    problems.append(f"request {record.url}: header {name} {record.header(name)!r}, expected {value!r}")
    assert problems == [], "\n".join(problems)
