"""A fake host for testing controllers natively, with pytest.

`FakeHost` answers every host call the SDK makes with the real host's
rules: kinds and names are DNS labels; values are JSON within the size
limit, normalized (compact, keys sorted); versions are store revisions
that only grow and are never reused; every operation of a commit applies
or none does; one operation per object per commit; metadata rules,
finalizers, the deletion mark and owner deletion (transitively, at most
1000 per commit) as the host applies them; selectors with the host's
containment; commits fenced by the lease (`revoke`, `new_tenure`); the
tenure's shard (`set_shard`): a sharded fake's `resync` and `run_changes`
reconcile only the shard's own objects (and those of the kinds every
shard watches), and its commits refuse a status write without an expected
generation to another shard's object, as the host does.

Outbound HTTP follows the host's rules too (`leasehold.fake_http`): denied
until `allow_http`, stamped with the fence headers, refused once the lease
is lost, bounded per reconcile; a scripted receiver answers (`respond`,
`respond_once`, `respond_with`), `fail_http` strikes the wire
(`HttpFault`), and `http_requests()` records what left.

Faults are aimed at a call or commit: `Fault.FENCED` (the lease is lost),
`Fault.CONFLICT`, `Fault.UNAVAILABLE`, `Fault.LOST_REPLY` (the commit
applied, its reply lost: the guest sees `Unavailable`), and quota
refusals. `before` runs a write "by someone else" just before a call.

Creating a `FakeHost` installs it: the SDK's calls go to the newest one.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import sys
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _host
from . import fake_json
from . import limits as L
from .controller import Controller, Description, Reason, RelatedWatch, Reply, dispatch
from .errors import (
    QUOTA_EXCEEDED_PREFIX,
    Conflict,
    Fenced,
    Invalid,
    NotFound,
    StoreError,
    Unavailable,
    invalid,
)
from .fake_http import (  # noqa: F401 - HttpFault, HttpRecord, HttpReply: re-exported
    HttpFault,
    HttpLimits,
    HttpRecord,
    HttpReply,
    HttpState,
    Responder,
)
from .fence import Fence
from .http import WireRequest, WireResponse
from .keys import Metadata, ObjectKey, RawObject, RawPage, Selector
from .log import Level
from .objects import Object, decode_raw
from .shard import Shard
from .transaction import (
    Check,
    Committed,
    Create,
    CreateWith,
    Delete,
    EventType,
    NewEvent,
    Op,
    Replace,
    Status,
    Update,
)

#: The fake's clock starts here: 2026-01-01T00:00:00Z.
START = _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class Limits:
    """The bounds the fake enforces; the host's defaults unless given."""

    max_value_bytes: int = L.MAX_VALUE_BYTES
    max_ops_per_commit: int = L.MAX_OPS_PER_COMMIT
    max_events_per_commit: int = L.MAX_EVENTS_PER_COMMIT
    max_event_reason_bytes: int = L.MAX_EVENT_REASON_BYTES
    max_event_message_bytes: int = L.MAX_EVENT_MESSAGE_BYTES
    max_page_size: int = L.MAX_PAGE_SIZE
    max_call_payload_bytes: int = L.MAX_CALL_PAYLOAD_BYTES
    log_line_bytes: int = L.LOG_LINE_BYTES
    http_requests_per_reconcile: int = L.MAX_HTTP_REQUESTS_PER_RECONCILE
    http_request_body_bytes: int = L.MAX_HTTP_REQUEST_BODY_BYTES
    http_response_body_bytes: int = L.MAX_HTTP_RESPONSE_BODY_BYTES


@dataclass(frozen=True)
class QuotaLimits:
    """A controller's write quotas, as its `[[controllers]]` entry sets them
    (`FakeHost.set_quotas`); the host's defaults unless given."""

    max_creates_per_second: int = 100
    create_burst: int = 1000
    max_objects_per_kind: int = 100_000


class Fault(Enum):
    """A fault the fake injects at a chosen call or commit."""

    #: The lease is lost: this call and every later one raise `Fenced`.
    FENCED = "fenced"
    #: The commit raises `Conflict` naming its first object (commits only).
    CONFLICT = "conflict"
    #: The call raises `Unavailable` and does nothing.
    UNAVAILABLE = "unavailable"
    #: The commit applies, then its reply is lost: `Unavailable` (commits only).
    LOST_REPLY = "lost-reply"
    #: A `max_creates_per_second` quota refusal (commits only).
    QUOTA_CREATES = "quota-creates"
    #: A `max_objects_per_kind` quota refusal (commits only).
    QUOTA_OBJECTS = "quota-objects"

    @property
    def commits_only(self) -> bool:
        """True for faults that only a commit can meet."""
        return self not in (Fault.FENCED, Fault.UNAVAILABLE)


@dataclass(frozen=True)
class At:
    """Which call a fault or hook aims at, counting from 1 (the next one).

    `At.call(n)`: the n-th host call from now (get, list or commit);
    `At.commit(n)`: the n-th commit from now.
    """

    commits: bool
    n: int

    @staticmethod
    def call(n: int) -> "At":
        """The n-th store call from now, of any kind."""
        return At(False, n)

    @staticmethod
    def commit(n: int) -> "At":
        """The n-th commit from now."""
        return At(True, n)


@dataclass(frozen=True)
class CallCounts:
    """How many store calls of each kind the guest made."""

    get: int = 0
    list: int = 0
    commit: int = 0

    @property
    def total(self) -> int:
        """All store calls."""
        return self.get + self.list + self.commit


@dataclass(frozen=True)
class CommitRecord:
    """A commit that applied: revision, the epoch it was made in, ops and events."""

    revision: int
    epoch: int
    ops: Tuple[Op, ...]
    events: Tuple[NewEvent, ...]
    event_seqs: Tuple[int, ...]


@dataclass(frozen=True)
class EventRecord:
    """An event in the fake's event log."""

    seq: int
    revision: int
    epoch: int
    key: ObjectKey
    reason: str
    #: As stored: carrying the event's type (see `EventType`).
    message: str

    @property
    def event_type(self) -> EventType:
        """`Normal` or `Warning`, as the message carries it."""
        return EventType.decode(self.message)[0]

    @property
    def text(self) -> str:
        """The message without its type prefix."""
        return EventType.decode(self.message)[1]


@dataclass(frozen=True)
class Change:
    """One entry of the change stream: `key` written (or removed) at `revision`.

    `before` and `after` are the object's metadata before and after the
    change (None where it did not exist): what related watches map through.
    """

    revision: int
    key: ObjectKey
    deleted: bool
    before: Optional[Metadata] = None
    after: Optional[Metadata] = None
    #: The change's position in the store's one series of numbers (after
    #: its commit's revision; unique and increasing, with gaps), as the
    #: host's change stream gives it.
    position: int = 0


def related_keys(watch: RelatedWatch, change: Change) -> List[ObjectKey]:
    """The keys `change` maps to through `watch` (none if `watch` is of another kind).

    As the host maps: through what the object has after the change and,
    when an update moved its owner or label, through what it had before.
    """
    if change.key.kind != watch.kind:
        return []
    keys: List[ObjectKey] = []
    for meta in (change.after, change.before):
        if meta is None:
            continue
        if watch.by_label:
            value = meta.labels.get(watch.label_key or "")
            if value is None:
                continue
            try:
                _check_label("name", value)
            except Invalid:
                continue
            key = ObjectKey(watch.target_kind or "", value)
        else:
            if meta.owner is None or (watch.owner_kind not in (None, meta.owner.kind)):
                continue
            key = meta.owner
        if key not in keys:
            keys.append(key)
    return keys


@dataclass(frozen=True)
class LogLine:
    """A log line the guest wrote, with the epoch it was written in."""

    level: Level
    message: str
    epoch: int


@dataclass
class _Stored:
    version: int
    value: str
    metadata: Metadata
    status: Optional[str]
    generation: int
    deleting_since_ms: Optional[int]


# ----- rules ----------------------------------------------------------------


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _is_lower_alnum(c: str) -> bool:
    return ("a" <= c <= "z") or ("0" <= c <= "9")


def _is_alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


# The host's refusals read "invalid request: …" and "too large: …" (its
# store errors); the fake's say the same, word for word.


def _invalid(why: str) -> Invalid:
    return Invalid(f"invalid request: {why}")


def _too_large(why: str) -> Invalid:
    return Invalid(f"too large: {why}")


def _quoted(value: str) -> str:
    return json.dumps(value[:80], ensure_ascii=False)


def _check_label(what: str, value: str) -> None:
    def refuse(rule: str) -> None:
        raise _invalid(f"invalid {what} {_quoted(value)}: {rule}")

    if not value:
        refuse("must not be empty")
    if _utf8_len(value) > L.MAX_LABEL_LEN:
        refuse("must be at most 63 characters")
    if not (_is_lower_alnum(value[0]) and _is_lower_alnum(value[-1])):
        refuse("must start and end with a lowercase letter or digit")
    if not all(_is_lower_alnum(c) or c == "-" for c in value):
        refuse("may contain only lowercase letters, digits and '-'")


def _check_key(key: ObjectKey) -> None:
    _check_label("object kind", key.kind)
    _check_label("object name", key.name)


def _qualified(text: str, max_bytes: int) -> bool:
    return (
        bool(text)
        and _utf8_len(text) <= max_bytes
        and _is_alnum(text[0])
        and _is_alnum(text[-1])
        and all(_is_alnum(c) or c in "-_./" for c in text)
    )


def _label_value(text: str) -> bool:
    return text == "" or (
        _utf8_len(text) <= L.MAX_LABEL_VALUE_BYTES
        and _is_alnum(text[0])
        and _is_alnum(text[-1])
        and all(_is_alnum(c) or c in "-_." for c in text)
    )


def _compact(value: Any) -> str:
    return fake_json.dumps(value)


def _normalize(limits: Limits, key: ObjectKey, part: str, text: str) -> str:
    """The host's canonical text of a value or status (`fake_json`)."""
    if _utf8_len(text) > limits.max_value_bytes:
        raise _too_large(
            f"the {part} of {key} is {_utf8_len(text)} bytes; the limit is "
            f"{limits.max_value_bytes}"
        )
    try:
        normal = fake_json.canonical(text)
    except fake_json.JsonRefused as refused:
        raise _invalid(f"the {part} of {key} {refused.describe()}") from None
    if _utf8_len(normal) > limits.max_value_bytes:
        raise _too_large(
            f"the {part} of {key} is {_utf8_len(normal)} bytes once normalized; the limit is "
            f"{limits.max_value_bytes}"
        )
    return normal


def _check_metadata(key: ObjectKey, meta: Metadata) -> None:
    if len(meta.labels) > L.MAX_LABELS:
        raise _too_large(f"{key} has {len(meta.labels)} labels; the limit is {L.MAX_LABELS}")
    for name, value in sorted(meta.labels.items()):
        if not _qualified(name, L.MAX_LABEL_KEY_BYTES):
            raise _invalid(
                f"label key {_quoted(name)} of {key} must be 1 to {L.MAX_LABEL_KEY_BYTES} ASCII "
                "letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit"
            )
        if not _label_value(value):
            raise _invalid(
                f"label {name} of {key} has value {_quoted(value)}; a label value is empty or 1 "
                f"to {L.MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', '_' or '.', beginning "
                "and ending with a letter or digit"
            )
    if len(meta.finalizers) > L.MAX_FINALIZERS:
        raise _too_large(
            f"{key} has {len(meta.finalizers)} finalizers; the limit is {L.MAX_FINALIZERS}"
        )
    for i, finalizer in enumerate(meta.finalizers):
        if not _qualified(finalizer, L.MAX_FINALIZER_BYTES):
            raise _invalid(
                f"finalizer {_quoted(finalizer)} of {key} must be 1 to {L.MAX_FINALIZER_BYTES} "
                "ASCII letters, digits, '-', '_', '.' or '/', beginning and ending with a letter "
                "or digit"
            )
        if finalizer in meta.finalizers[:i]:
            raise _invalid(f"finalizer {finalizer} of {key} is listed twice")
    if meta.owner is not None:
        _check_label("owner kind", meta.owner.kind)
        _check_label("owner name", meta.owner.name)
        if meta.owner == key:
            raise _invalid(f"{key} cannot own itself")


def _meta_size(meta: Optional[Metadata]) -> int:
    if meta is None:
        return 0
    size = sum(_utf8_len(k) + _utf8_len(v) for k, v in meta.labels.items())
    if meta.owner is not None:
        size += _utf8_len(meta.owner.kind) + _utf8_len(meta.owner.name)
    return size + sum(_utf8_len(f) for f in meta.finalizers)


def _op_size(op: Op) -> int:
    size = _utf8_len(op.key.kind) + _utf8_len(op.key.name)
    if isinstance(op, (Create, Update)):
        size += _utf8_len(op.value)
    elif isinstance(op, CreateWith):
        size += _utf8_len(op.value) + _meta_size(op.metadata)
    elif isinstance(op, Replace):
        size += (_utf8_len(op.value) if op.value is not None else 0) + _meta_size(op.metadata)
    elif isinstance(op, Status):
        size += _utf8_len(op.status) if op.status is not None else 0
    return size


def _check_event(limits: Limits, event: NewEvent) -> None:
    _check_key(event.key)
    key, reason = event.key, event.reason
    if _utf8_len(reason) > limits.max_event_reason_bytes:
        raise _too_large(
            f"the reason of an event about {key} is {_utf8_len(reason)} bytes; the limit is "
            f"{limits.max_event_reason_bytes}"
        )
    pascal = bool(reason) and "A" <= reason[0] <= "Z" and all(_is_alnum(c) for c in reason)
    if not pascal:
        raise _invalid(
            f"the reason {_quoted(reason)} of an event about {key} must be a PascalCase word "
            "(A-Z first, then letters and digits)"
        )
    if _utf8_len(event.message) > limits.max_event_message_bytes:
        raise _too_large(
            f"the message of an event about {key} is {_utf8_len(event.message)} bytes; the "
            f"limit is {limits.max_event_message_bytes}"
        )
    if "\0" in event.message:
        raise _invalid(f"the message of an event about {key} contains a NUL character")


def _validate_commit(limits: Limits, ops: Sequence[Op], events: Sequence[NewEvent]) -> List[Op]:
    size = sum(_op_size(op) for op in ops) + sum(
        _utf8_len(e.key.kind) + _utf8_len(e.key.name) + _utf8_len(e.reason) + _utf8_len(e.message)
        for e in events
    )
    if size > limits.max_call_payload_bytes:
        raise Invalid(
            f"host call payload of {size} bytes exceeds the limit of "
            f"{limits.max_call_payload_bytes} bytes"
        )
    if len(ops) > limits.max_ops_per_commit:
        raise _too_large(
            f"a commit has {len(ops)} operations; the limit is {limits.max_ops_per_commit}"
        )
    if len(events) > limits.max_events_per_commit:
        raise _too_large(
            f"a commit has {len(events)} events; the limit is {limits.max_events_per_commit}"
        )
    if not ops and not events:
        raise _invalid("a commit needs at least one operation or event")
    seen = set()
    normalized: List[Op] = []
    for op in ops:
        key = op.key
        _check_key(key)
        if key in seen:
            raise _invalid(f"{key} appears in more than one operation of the commit")
        seen.add(key)
        if isinstance(op, Create):
            op = Create(key, _normalize(limits, key, "value", op.value))
        elif isinstance(op, Update):
            op = Update(key, op.expected_version, _normalize(limits, key, "value", op.value))
        elif isinstance(op, CreateWith):
            _check_metadata(key, op.metadata)
            op = CreateWith(key, _normalize(limits, key, "value", op.value), op.metadata)
        elif isinstance(op, Replace):
            if op.metadata is not None:
                _check_metadata(key, op.metadata)
            if op.value is None and op.metadata is None:
                raise _invalid(f"a replace of {key} needs a value, metadata or both")
            value = None if op.value is None else _normalize(limits, key, "value", op.value)
            op = Replace(key, op.expected_version, value, op.metadata)
        elif isinstance(op, Status):
            status = None if op.status is None else _normalize(limits, key, "status", op.status)
            op = Status(key, op.expected_generation, status)
        elif not isinstance(op, (Delete, Check)):
            raise _invalid(f"unknown operation {type(op).__name__} on {key}")
        normalized.append(op)
    for event in events:
        _check_event(limits, event)
    return normalized


def _selector_contains(kind: str, selector: Selector) -> Any:
    """The selector's `contains` as the host reads it: the guest's JSON
    text, parsed under the store's rules (`None` when not given)."""
    text = selector.contains_json()
    if text is None:
        return None
    if _utf8_len(text) > L.MAX_VALUE_BYTES:
        raise _invalid(
            f"selector for kind {kind}: contains is {_utf8_len(text)} bytes of JSON text; the "
            f"limit is {L.MAX_VALUE_BYTES}"
        )
    try:
        return fake_json.parse(text)
    except fake_json.JsonRefused as refused:
        raise _invalid(f"selector for kind {kind}: contains {refused.describe()}") from None


def _check_selector(kind: str, selector: Selector, contains: Any) -> None:
    if len(selector.labels) > L.MAX_SELECTOR_LABELS:
        raise _invalid(
            f"selector for kind {kind} names {len(selector.labels)} labels; the limit is "
            f"{L.MAX_SELECTOR_LABELS}"
        )
    for name, value in sorted(selector.labels.items()):
        if not _qualified(name, L.MAX_LABEL_KEY_BYTES):
            raise _invalid(
                f"selector for kind {kind}: label key {_quoted(name)} must be 1 to "
                f"{L.MAX_LABEL_KEY_BYTES} ASCII letters, digits, '-', '_', '.' or '/', beginning "
                "and ending with a letter or digit"
            )
        if not _label_value(value):
            raise _invalid(
                f"selector for kind {kind}: label {name} has value {_quoted(value)}; a label "
                f"value is empty or 1 to {L.MAX_LABEL_VALUE_BYTES} ASCII letters, digits, '-', "
                "'_' or '.', beginning and ending with a letter or digit"
            )
    if selector.has_contains:
        cap = L.MAX_SELECTOR_CONTAINS_DEPTH
        if fake_json.depth(contains, cap + 1) > cap:
            raise _invalid(
                f"selector for kind {kind}: contains is nested more than {cap} arrays or "
                "objects deep"
            )
        if _utf8_len(fake_json.dumps(contains)) > L.MAX_SELECTOR_CONTAINS_BYTES:
            raise _invalid(
                f"selector for kind {kind}: contains is over {L.MAX_SELECTOR_CONTAINS_BYTES} "
                "bytes of compact JSON"
            )


def _selects(selector: Selector, contains: Any, stored: _Stored) -> bool:
    if any(stored.metadata.labels.get(k) != v for k, v in selector.labels.items()):
        return False
    if not selector.has_contains:
        return True
    return fake_json.contains(fake_json.parse(stored.value), contains)


def _millis(at: _dt.datetime) -> int:
    return int(at.timestamp() * 1000)


# ----- the store --------------------------------------------------------------
#
# A commit is planned as the host plans it (its model crate's `plan`):
# operations resolved in input order against the state before the commit
# (the first failing one decides the error), then garbage collection of
# what the deleted objects own, then everything applied, numbered from the
# store's one series: the revision, one position per change, one sequence
# number per event.


class _Plan:
    def __init__(self) -> None:
        # key -> the row to put, or None to remove; in the order decided.
        self.writes: Dict[ObjectKey, Optional[_Stored]] = {}
        self.pending_owners: List[ObjectKey] = []
        self.collected = 0


class _Objects:
    def __init__(self) -> None:
        self.map: Dict[ObjectKey, _Stored] = {}
        #: The revision of the last write.
        self.revision = 0
        #: The last number given out (revisions, change positions, event seqs).
        self.last = 0
        self.changes: List[Change] = []

    def next(self) -> int:
        self.last += 1
        return self.last

    def raw(self, key: ObjectKey) -> Optional[RawObject]:
        s = self.map.get(key)
        if s is None:
            return None
        return RawObject(
            key.kind, key.name, s.version, s.value, s.metadata, s.status, s.generation,
            s.deleting_since_ms,
        )

    def list_matching(
        self,
        limits: Limits,
        kind: str,
        after: Optional[str],
        limit: int,
        keep: Callable[[_Stored], bool],
    ) -> RawPage:
        limit = min(L.DEFAULT_PAGE_SIZE if limit == 0 else limit, limits.max_page_size)
        names = sorted(
            (k.name for k in self.map if k.kind == kind and (after is None or k.name > after)),
            key=lambda name: name.encode("utf-8"),
        )
        objects: List[RawObject] = []
        for name in names:
            key = ObjectKey(kind, name)
            if keep(self.map[key]):
                objects.append(self.raw(key))  # type: ignore[arg-type]
                if len(objects) > limit:
                    break
        nxt = None
        if len(objects) > limit:
            objects = objects[:limit]
            nxt = objects[-1].name
        return RawPage(objects, nxt)

    def apply(self, ops: Sequence[Op], events: int, now_ms: int) -> Tuple[int, Tuple[int, ...]]:
        """Plan and apply validated `ops`; the revision and `events` sequence numbers."""
        plan = _Plan()
        for op in ops:
            self._resolve(ops, plan, op, now_ms)
        self._collect(ops, plan, now_ms)
        return self._commit(plan, events)

    def request_delete_by_user(self, key: ObjectKey, now_ms: int) -> bool:
        stored = self.map.get(key)
        if stored is None:
            return False
        plan = _Plan()
        _request_delete(plan, key, stored, now_ms)
        self._collect([Delete(key, stored.version)], plan, now_ms)
        if plan.writes:
            self._commit(plan, 0)
        return True

    def _commit(self, plan: _Plan, events: int) -> Tuple[int, Tuple[int, ...]]:
        revision = self.next()
        positions = [self.next() for _ in plan.writes]
        seqs = tuple(self.next() for _ in range(events))
        for (key, row), position in zip(plan.writes.items(), positions):
            old = self.map.get(key)
            before = None if old is None else old.metadata
            if row is None:
                self.map.pop(key, None)
            else:
                row.version = revision
                self.map[key] = row
            after = None if row is None else row.metadata
            self.changes.append(Change(revision, key, row is None, before, after, position))
        self.revision = revision
        return revision, seqs

    def _collect(self, ops: Sequence[Op], plan: _Plan, now_ms: int) -> None:
        while plan.pending_owners:
            owners = plan.pending_owners
            plan.pending_owners = []
            owned = sorted(
                ((k, s) for k, s in self.map.items() if s.metadata.owner in owners),
                key=lambda pair: (pair[0].kind.encode(), pair[0].name.encode()),
            )
            for key, stored in owned:
                if key in plan.writes:
                    if any(isinstance(op, Delete) and op.key == key for op in ops):
                        continue
                    raise _invalid(
                        f"the commit deletes {stored.metadata.owner}, which owns {key}, and also "
                        f"writes {key}: delete {key} too, or write it in another commit"
                    )
                if any(op.key == key for op in ops):
                    raise _invalid(
                        f"the commit checks {key} and deletes its owner; check or delete, not both"
                    )
                plan.collected += 1
                if plan.collected > L.MAX_COLLECTED_PER_COMMIT:
                    raise _too_large(
                        f"deleting {', '.join(_batch_keys(ops))} would delete or mark "
                        f"more than {L.MAX_COLLECTED_PER_COMMIT} owned objects in one commit; "
                        "delete owned objects first"
                    )
                _request_delete(plan, key, stored, now_ms)

    def _resolve(self, ops: Sequence[Op], plan: _Plan, op: Op, now_ms: int) -> None:
        key = op.key
        found = self.map.get(key)
        if isinstance(op, Check):
            have = None if found is None else found.version
            if have is None and op.expected_version == 0:
                return
            if have is not None and have == op.expected_version:
                return
            raise Conflict(key)
        if isinstance(op, (Create, CreateWith)):
            if found is not None:
                raise Conflict(key)
            meta = op.metadata if isinstance(op, CreateWith) else Metadata()
            self._check_owner(ops, key, None, meta)
            plan.writes[key] = _Stored(0, op.value, meta, None, 1, None)
            return
        if found is None:
            raise NotFound(key)
        if isinstance(op, (Update, Replace, Delete)) and op.expected_version != found.version:
            raise Conflict(key)
        if isinstance(op, Update):
            plan.writes[key] = self._rewrite(ops, key, found, op.value, None)
        elif isinstance(op, Replace):
            plan.writes[key] = self._rewrite(ops, key, found, op.value, op.metadata)
        elif isinstance(op, Delete):
            _request_delete(plan, key, found, now_ms)
        elif isinstance(op, Status):
            if op.expected_generation is not None and op.expected_generation != found.generation:
                raise Conflict(key)
            plan.writes[key] = replace(found, status=op.status)

    def _rewrite(
        self,
        ops: Sequence[Op],
        key: ObjectKey,
        stored: _Stored,
        value: Optional[str],
        meta: Optional[Metadata],
    ) -> Optional[_Stored]:
        value = stored.value if value is None else value
        meta = stored.metadata if meta is None else meta
        if stored.deleting_since_ms is not None:
            added = [f for f in meta.finalizers if f not in stored.metadata.finalizers]
            if added:
                raise _invalid(
                    f"{key} is marked for deletion: finalizers can be removed, not added "
                    f"({added[0]})"
                )
            if not meta.finalizers:
                return None
        self._check_owner(ops, key, stored.metadata.owner, meta)
        changed = value != stored.value or meta != stored.metadata
        return replace(
            stored, value=value, metadata=meta, generation=stored.generation + int(changed)
        )

    def _check_owner(
        self, ops: Sequence[Op], key: ObjectKey, had: Optional[ObjectKey], meta: Metadata
    ) -> None:
        owner = meta.owner
        if owner is None or owner == had:
            return
        if any(isinstance(op, (Create, CreateWith)) and op.key == owner for op in ops):
            return
        found = self.map.get(owner)
        if found is None or found.deleting_since_ms is not None:
            raise Conflict(key)
        if any(isinstance(op, Delete) and op.key == owner for op in ops):
            raise _invalid(f"the commit deletes {owner} and makes it the owner of {key}")


def _batch_keys(ops: Sequence[Op]) -> List[str]:
    """The objects a commit names, then the owners its metadata names, once each
    (the host's order when it names a refused commit)."""
    keys: List[str] = []
    for op in ops:
        if str(op.key) not in keys:
            keys.append(str(op.key))
    for op in ops:
        meta = getattr(op, "metadata", None)
        if meta is not None and meta.owner is not None and str(meta.owner) not in keys:
            keys.append(str(meta.owner))
    return keys


def _request_delete(plan: _Plan, key: ObjectKey, stored: _Stored, now_ms: int) -> None:
    if not stored.metadata.finalizers:
        plan.pending_owners.append(key)
        plan.writes[key] = None
        return
    if stored.deleting_since_ms is not None:
        return
    plan.pending_owners.append(key)
    plan.writes[key] = replace(
        stored, generation=stored.generation + 1, deleting_since_ms=now_ms
    )


# ----- the host ---------------------------------------------------------------

_CALLS = ("get", "list", "commit")


class FakeHost:
    """A host in memory: the store, the fence, the shard, logs, settings and the clock.

    Creating one installs it (`install` again to switch between two).
    Seed objects with `seed`, drive the controller with `reconcile` or
    `resync`, inspect `objects`, `commits`, `events`, `logs`, and aim
    faults with `fail` and writes of others with `before`. It runs shard 0
    of 1 (unsharded) unless `set_shard` says otherwise.
    """

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self._fence = Fence("test", "controller", 1, "fake-host")
        self._revoked = False
        self._unavailable = False
        self._objects = _Objects()
        self._commits: List[CommitRecord] = []
        self._events: List[EventRecord] = []
        self._logs: List[LogLine] = []
        self._calls = {"get": 0, "list": 0, "commit": 0}
        self._faults: List[Tuple[str, int, Fault]] = []
        self._hooks: List[Tuple[str, int, Callable[["FakeHost"], None]]] = []
        self._settings = "{}"
        self._now = START
        self._shard = Shard.WHOLE
        # The shard label of the description this fake read last, which its
        # commits judge status writes by (the host judges by the label the
        # running guest's `describe` declared).
        self._shard_label: Optional[str] = None
        self._http = HttpState()
        # The host's write quotas once a test sets them: the limits, the
        # create bucket's tokens and when it was last refilled (fake ms).
        self._quota: Optional[Tuple[QuotaLimits, float, int]] = None
        self.install()

    def install(self) -> None:
        """Make this host answer the SDK's calls."""
        _host.install(self)

    # ----- seeding and inspecting ------------------------------------------

    def seed(self, kind: str, name: str, value: Any) -> int:
        """Create or overwrite `kind/name` with `value`, as a user would; its version."""
        return self._put(kind, name, value, None)

    def seed_with(self, kind: str, name: str, value: Any, metadata: Metadata) -> int:
        """As `seed`, with metadata."""
        return self._put(kind, name, value, metadata)

    def _put(self, kind: str, name: str, value: Any, meta: Optional[Metadata]) -> int:
        key = ObjectKey(kind, name)
        text = _compact(value)
        stored = self._objects.map.get(key)
        if stored is None:
            op: Op = CreateWith(key, text, meta or Metadata())
        else:
            op = Replace(key, stored.version, text, meta)
        try:
            ops = _validate_commit(self.limits, [op], [])
            return self._objects.apply(ops, 0, _millis(self._now))[0]
        except StoreError as e:
            raise AssertionError(f"seeding {key}: {e}") from None

    def set_status(self, kind: str, name: str, status: Any) -> int:
        """Write the status of `kind/name` as a user would; the new version."""
        key = ObjectKey(kind, name)
        try:
            ops = _validate_commit(self.limits, [Status(key, None, _compact(status))], [])
            return self._objects.apply(ops, 0, _millis(self._now))[0]
        except StoreError as e:
            raise AssertionError(f"setting the status of {key}: {e}") from None

    def remove(self, kind: str, name: str) -> bool:
        """A user's delete request (marks it if it has finalizers); False if absent."""
        return self._objects.request_delete_by_user(ObjectKey(kind, name), _millis(self._now))

    def object(self, kind: str, name: str, decode: Optional[Callable[[Any], Any]] = None) -> Optional[Object]:
        """`kind/name` as stored, or None."""
        raw = self._objects.raw(ObjectKey(kind, name))
        return None if raw is None else decode_raw(raw, decode)

    def objects(self, kind: str, decode: Optional[Callable[[Any], Any]] = None) -> List[Object]:
        """Every object of `kind`, in name order."""
        keys = sorted(k for k in self._objects.map if k.kind == kind)
        return [decode_raw(self._objects.raw(k), decode) for k in keys]  # type: ignore[arg-type]

    @property
    def revision(self) -> int:
        """The store's latest revision."""
        return self._objects.revision

    def changes(self, after: int = 0) -> List[Change]:
        """The change stream: every write after revision `after`, in order."""
        return [c for c in self._objects.changes if c.revision > after]

    # ----- the fence ----------------------------------------------------------

    def fence(self) -> Fence:
        """The current fence (answers the SDK's `fence()` too)."""
        return self._fence

    def set_fence(self, fence: Fence) -> None:
        """Run under `fence` from now on, not revoked."""
        self._fence = fence
        self._revoked = False

    def new_tenure(self) -> Fence:
        """A new tenure of the same lease: epoch + 1, not revoked."""
        self._fence = replace(self._fence, epoch=self._fence.epoch + 1)
        self._revoked = False
        return self._fence

    def revoke(self) -> None:
        """Lose the lease: every later store call raises `Fenced`."""
        self._revoked = True

    @property
    def is_revoked(self) -> bool:
        """True once the lease is lost."""
        return self._revoked

    # ----- the shard ---------------------------------------------------------

    def shard(self) -> Shard:
        """The tenure's shard (answers the SDK's `shard()` too): 0 of 1 unless set."""
        return self._shard

    def set_shard(self, index: int, count: int) -> Shard:
        """Run shard `index` of `count` from now on (`ValueError` unless
        `count` is 1 to 64 and `index` below it); the new shard.

        A sharded fake reconciles, in `resync` and `run_changes`, only what
        the host would wake this shard for, and refuses what the host
        refuses a shard's commit: a status write without an expected
        generation to another shard's object, or to any object when the
        controller declares a shard label (the label the host would judge
        by is the object's, which the op does not carry). The label is that
        of the description the fake read last: `reconcile` of a sharded
        fake, `resync` and `run_changes` read it.
        """
        try:
            self._shard = Shard(index, count)
        except ValueError as e:
            raise ValueError(f"FakeHost.set_shard({index!r}, {count!r}): {e}") from None
        return self._shard

    def _learn(self, description: Description) -> Description:
        self._shard_label = description.shard_label
        return description

    def _watches_object(
        self, description: Description, key: ObjectKey, meta: Optional[Metadata]
    ) -> bool:
        """Whether this shard is woken for `key`, whose metadata is `meta`
        (None: unknown, as for an object that does not exist)."""
        shard = self._shard
        if shard.count == 1 or key.kind in description.every_shard:
            return True
        label = description.shard_label
        value = None if label is None or meta is None else meta.labels.get(label)
        if value is None:
            return shard.owns_key(key.kind, key.name)
        return Shard.of_label(value, shard.count) == shard.index

    def _watches_stored(self, description: Description, key: ObjectKey) -> bool:
        stored = self._objects.map.get(key)
        return self._watches_object(description, key, None if stored is None else stored.metadata)

    def _check_shard_write(self, op: Op) -> None:
        """The host's rule for a shard's writes: an op on another shard's
        object must be conditional, and every op is but a blind status write."""
        shard = self._shard
        if shard.count == 1 or not isinstance(op, Status) or op.expected_generation is not None:
            return
        key = op.key
        if self._shard_label is not None:
            raise invalid(
                f"{key}: this controller's objects are sharded by the label "
                f"{self._shard_label}, which the op does not carry, so this {shard} cannot "
                "tell whose it is: a status write of a controller sharded by a label must be "
                "conditional (give it an expected generation)"
            )
        if not shard.owns_key(key.kind, key.name):
            theirs = Shard.of_key(key.kind, key.name, shard.count)
            raise invalid(
                f"{key} belongs to shard {theirs} of {shard.count}, not to this {shard}: a "
                "write to another shard's object must be conditional (give the status write "
                "an expected generation)"
            )

    # ----- driving a controller ---------------------------------------------

    def reconcile(
        self, controller: Controller, kind: str, name: str, reason: Reason = Reason.CHANGE
    ) -> Reply:
        """Run one reconcile of `kind/name` as the host would; its reply.

        A sharded fake reads the controller's description first (its shard
        label decides which status writes the shard may make).
        """
        self.install()
        if self._shard.count > 1:
            self._learn(controller.describe())
        return self._dispatch(controller, ObjectKey(kind, name), reason)

    def _dispatch(self, controller: Controller, key: ObjectKey, reason: Reason) -> Reply:
        # Each reconcile has its own outbound request budget, as on the host.
        self._http.begin_reconcile()
        return dispatch(controller, key.kind, key.name, reason)

    def resync(self, controller: Controller) -> List[Tuple[ObjectKey, Reply]]:
        """Reconcile every object of every watched kind, then every key the
        objects of the related kinds map to (each key once, reason resync).

        A sharded fake reconciles only the keys the host would queue on this
        shard: its own objects, every object of the kinds every shard
        watches, and the mapped keys whose target (as stored) is its own.
        """
        self.install()
        description = self._learn(controller.describe())
        keys: List[ObjectKey] = []
        for kind in description.watches:
            keys.extend(
                sorted(
                    k
                    for k in self._objects.map
                    if k.kind == kind and self._watches_stored(description, k)
                )
            )
        for watch in description.related:
            for key in sorted(k for k in self._objects.map if k.kind == watch.kind):
                meta = self._objects.map[key].metadata
                for mapped in related_keys(watch, Change(0, key, False, None, meta)):
                    if mapped not in keys and self._watches_stored(description, mapped):
                        keys.append(mapped)
        return [(k, self._dispatch(controller, k, Reason.RESYNC)) for k in keys]

    def run_changes(
        self, controller: Controller, after: int = 0, max_reconciles: int = 10_000
    ) -> int:
        """Reconcile each watched key changed after revision `after` (reason
        change), and each key a related watch maps a change to (reason related,
        unless the key changed itself), following the changes those reconciles
        make, until none is left; the last revision seen.

        A reconcile that asks to be requeued or fails is not repeated here: the
        test decides about time. Stops with `AssertionError` past `max_reconciles`.

        A sharded fake follows only what wakes this shard on the host: a
        change of its own object (judged by the object's metadata after the
        change, or before it for a deletion) or of a kind every shard
        watches, and a mapped key whose target, as stored, is its own.
        """
        description = self._learn(controller.describe())
        watches = set(description.watches)
        seen, done = after, 0
        while True:
            pending: Dict[ObjectKey, Reason] = {}
            for change in self.changes(seen):
                meta = change.after if change.after is not None else change.before
                if change.key.kind in watches and self._watches_object(
                    description, change.key, meta
                ):
                    pending[change.key] = Reason.CHANGE
                for watch in description.related:
                    for key in related_keys(watch, change):
                        if not self._watches_stored(description, key):
                            continue
                        pending[key] = pending.get(key, Reason.RELATED).strongest(Reason.RELATED)
                seen = change.revision
            if not pending:
                return seen
            for key, reason in pending.items():
                done += 1
                if done > max_reconciles:
                    raise AssertionError(f"more than {max_reconciles} reconciles: not settling")
                self.reconcile(controller, key.kind, key.name, reason)

    # ----- faults ---------------------------------------------------------

    def set_quotas(self, limits: QuotaLimits) -> None:
        """Enforce the host's write quotas on the guest's commits from now on.

        As the host does with these limits: the create bucket starts full
        and the fake's clock refills it; a commit creating more than the
        burst, more than the bucket holds, or past the cap of a kind is
        refused with the host's `invalid` text (`QuotaExceeded`), writing
        nothing. Off until called: the fake's clock moves only when a test
        moves it.
        """
        self._quota = (limits, float(limits.create_burst), _millis(self._now))

    def _admit_quota(self, ops: Sequence[Op]) -> int:
        """The creates a commit of `ops` may spend, or the host's refusal."""
        if self._quota is None:
            return 0
        limits, tokens, at = self._quota
        creates: Dict[str, int] = {}
        for op in ops:
            if isinstance(op, (Create, CreateWith)):
                creates[op.key.kind] = creates.get(op.key.kind, 0) + 1
        wanted = sum(creates.values())
        if wanted == 0:
            return 0
        controller = self._fence.lease
        rate, burst, cap = limits.max_creates_per_second, limits.create_burst, limits.max_objects_per_kind
        head = f"{QUOTA_EXCEEDED_PREFIX}controller={controller} quota="
        if wanted > burst:
            raise invalid(
                f"{head}max_creates_per_second limit={rate}: this commit creates {wanted} objects, "
                f"more than controller {json.dumps(controller)} may ever create at once "
                f"(create_burst {burst}); split it; nothing was written"
            )
        now = _millis(self._now)
        if now >= at:
            tokens = min(tokens + (now - at) / 1000 * rate, float(burst))
            at = now
        self._quota = (limits, tokens, at)
        if tokens < wanted:
            wait_ms = math.ceil((wanted - tokens) / rate * 1000)
            raise invalid(
                f"{head}max_creates_per_second limit={rate} retry_after_ms={wait_ms}: controller "
                f"{json.dumps(controller)} may create {rate} objects per second (create_burst "
                f"{burst}) and has spent them; this commit creates {wanted}; retry later; "
                "nothing was written"
            )
        for kind in sorted(creates):
            current = sum(1 for key in self._objects.map if key.kind == kind)
            if current + creates[kind] > cap:
                raise invalid(
                    f"{head}max_objects_per_kind limit={cap} kind={kind}: kind {json.dumps(kind)} "
                    f"holds {current} objects and this commit creates {creates[kind]} more; "
                    f"controller {json.dumps(controller)} may bring it to at most {cap} "
                    "(max_objects_per_kind); delete some or raise the limit; nothing was written"
                )
        return wanted

    def fail(self, at: At, fault: Fault) -> None:
        """Inject `fault` at the call `at` names."""
        if not at.commits and fault.commits_only:
            raise ValueError(f"{fault} applies to commits only: aim it with At.commit")
        self._faults.append(self._target(at) + (fault,))

    def fail_next_commit(self, fault: Fault) -> None:
        """Inject `fault` at the next commit."""
        self.fail(At.commit(1), fault)

    def set_unavailable(self, unavailable: bool) -> None:
        """Make every store call raise `Unavailable` until set back."""
        self._unavailable = unavailable

    def before(self, at: At, write: Callable[["FakeHost"], None]) -> None:
        """Run `write(host)` just before the call `at` names (someone else's write)."""
        self._hooks.append(self._target(at) + (write,))

    def before_commit(self, n: int, write: Callable[["FakeHost"], None]) -> None:
        """Run `write(host)` just before the n-th commit from now."""
        self.before(At.commit(n), write)

    @property
    def pending_faults(self) -> int:
        """Faults (store and HTTP) and hooks not met yet."""
        return len(self._faults) + len(self._hooks) + self._http.pending_faults

    def _target(self, at: At) -> Tuple[str, int]:
        if at.n < 1:
            raise ValueError("positions count from 1 (the next call)")
        if at.commits:
            return ("commit", self._calls["commit"] + at.n)
        return ("call", sum(self._calls.values()) + at.n)

    def _is_now(self, target: Tuple[str, int], call: str) -> bool:
        what, n = target
        if what == "call":
            return n == sum(self._calls.values())
        return call == "commit" and n == self._calls["commit"]

    def _enter(self, call: str) -> Optional[Fault]:
        self._calls[call] += 1
        due = [h for h in self._hooks if self._is_now(h[:2], call)]
        self._hooks = [h for h in self._hooks if not self._is_now(h[:2], call)]
        for _, _, hook in due:
            hook(self)
            self.install()
        fault = None
        for i, (what, n, f) in enumerate(self._faults):
            if self._is_now((what, n), call):
                fault = f
                del self._faults[i]
                break
        if fault is Fault.FENCED:
            self._revoked = True
        if self._revoked:
            raise Fenced(f"{self._fence} was revoked by the host: the lease is no longer held")
        if fault is Fault.UNAVAILABLE:
            raise Unavailable("the backend did not answer (injected by FakeHost)")
        if self._unavailable:
            raise Unavailable("the backend is down (FakeHost.set_unavailable)")
        return fault

    # ----- the host calls (the SDK's side) ------------------------------------

    def get(self, kind: str, name: str) -> Optional[RawObject]:
        """The store's `get`."""
        self._enter("get")
        key = ObjectKey(kind, name)
        _check_key(key)
        return self._objects.raw(key)

    def list(self, kind: str, after: Optional[str], limit: int) -> RawPage:
        """The store's `list`."""
        self._enter("list")
        _check_label("object kind", kind)
        if after is not None:
            _check_label("list cursor", after)
        return self._objects.list_matching(self.limits, kind, after, limit, lambda s: True)

    def list_selected(
        self, kind: str, selector: Selector, after: Optional[str], limit: int
    ) -> RawPage:
        """The store's `list-selected` (counted, and struck by faults, as a list)."""
        self._enter("list")
        contains = _selector_contains(kind, selector)
        _check_label("object kind", kind)
        if after is not None:
            _check_label("list cursor", after)
        _check_selector(kind, selector, contains)
        return self._objects.list_matching(
            self.limits, kind, after, limit, lambda s: _selects(selector, contains, s)
        )

    def commit(self, ops: Sequence[Op], events: Sequence[NewEvent]) -> Committed:
        """The store's `commit`: validated, fenced, atomic."""
        fault = self._enter("commit")
        ops = _validate_commit(self.limits, ops, events)
        for op in ops:
            self._check_shard_write(op)
        first = ops[0].key if ops else events[0].key
        if fault is Fault.CONFLICT:
            raise Conflict(first)
        if fault in (Fault.QUOTA_CREATES, Fault.QUOTA_OBJECTS):
            raise invalid(self._quota_message(fault, first.kind))
        creates = self._admit_quota(ops)
        revision, seqs = self._objects.apply(ops, len(events), _millis(self._now))
        if self._quota is not None:
            limits, tokens, at = self._quota
            self._quota = (limits, tokens - creates, at)
        for event, seq in zip(events, seqs):
            self._events.append(
                EventRecord(seq, revision, self._fence.epoch, event.key, event.reason, event.message)
            )
        self._commits.append(
            CommitRecord(revision, self._fence.epoch, tuple(ops), tuple(events), tuple(seqs))
        )
        if fault is Fault.LOST_REPLY:
            raise Unavailable(
                "the connection dropped before the reply arrived (injected by FakeHost)"
            )
        return Committed(revision, tuple(seqs))

    def _quota_message(self, fault: Fault, kind: str) -> str:
        controller = self._fence.lease
        if fault is Fault.QUOTA_CREATES:
            return (
                f"{QUOTA_EXCEEDED_PREFIX}controller={controller} quota=max_creates_per_second "
                f"limit=100 retry_after_ms=10: controller {json.dumps(controller)} has spent its "
                "creates (injected by FakeHost); nothing was written"
            )
        return (
            f"{QUOTA_EXCEEDED_PREFIX}controller={controller} quota=max_objects_per_kind "
            f"limit=100000 kind={kind}: kind {json.dumps(kind)} is full (injected by FakeHost); "
            "nothing was written"
        )

    def log(self, level: Level, message: str) -> None:
        """The logging host: keeps the line (truncated as the host does) and prints it."""
        data = message.encode("utf-8")
        if len(data) > self.limits.log_line_bytes:
            message = data[: self.limits.log_line_bytes].decode("utf-8", errors="ignore")
        epoch = self._fence.epoch
        print(f"[{level.value} epoch={epoch}] {message}", file=sys.stderr)
        self._logs.append(LogLine(level, message, epoch))

    def settings(self) -> str:
        """The settings host: JSON text of an object."""
        return self._settings

    def now_ms(self) -> int:
        """The wall clock, in ms since the Unix epoch."""
        return _millis(self._now)

    def http_send(self, request: WireRequest) -> WireResponse:
        """`wasi:http/outgoing-handler` as the host serves it: admitted in the
        host's order (a forbidden header, the lease, `http_allow`, the
        bounds), stamped with the fence, answered by the scripted receiver,
        struck by the fault aimed at it, recorded. Raises the
        `leasehold.http.WireHttpError` the host's `error-code` would be."""
        limits = HttpLimits(
            self.limits.http_requests_per_reconcile,
            self.limits.http_request_body_bytes,
            self.limits.http_response_body_bytes,
        )
        return self._http.send(request, self._fence, self._revoked, self.revoke, limits)

    # ----- outbound HTTP: the rules, the receiver, faults ---------------------

    def allow_http(self, entries: Union[str, Iterable[str]]) -> None:
        """Add `entries` to the controller's `http_allow` list, as the host's
        config would (one entry, or several): `scheme://host[:port]` allows
        every path of that origin, `scheme://host[:port]/prefix/` only paths
        under the prefix (`/hooks` without the slash allows `/hooks` and
        `/hooks/...`). Until then every request is denied, as by the host.
        `ValueError` for an entry the host's config check would refuse."""
        self._http.allow(entries)

    def respond(self, pattern: str, reply: HttpReply) -> None:
        """Answer every request to `pattern` with `reply` (replacing what
        was scripted for it before), once its `respond_once` replies are
        used up. A pattern is an exact URL as sent
        (`scheme://authority/path?query`), or a prefix ending in `*`
        (`http://svc.test/hooks/*`); an exact match wins over a prefix, a
        longer prefix over a shorter. A request nothing is scripted for is
        answered `404`. Methods are told apart by a responder
        (`respond_with`), which sees `request.method`."""
        self._http.route(pattern).standing = reply

    def respond_once(self, pattern: str, reply: HttpReply) -> None:
        """Queue `reply` for the next request to `pattern`: one-shot replies
        are used up in the order queued, before the standing reply of
        `respond` or `respond_with`."""
        self._http.route(pattern).once.append(reply)

    def respond_with(self, pattern: str, responder: Responder) -> None:
        """Answer every request to `pattern` with what `responder(request)`
        computes (replacing what was scripted for it before): a receiver
        with state, such as one that follows the fenced-receiver rule. It
        runs only for requests the receiver gets, and sees each as
        recorded (an `HttpRecord`, fence headers included)."""
        self._http.route(pattern).standing = responder

    def fail_http(self, n: int, fault: HttpFault) -> None:
        """Make the n-th outbound request from now (1: the next) fail with
        `fault`. Requests count whether or not the host lets them out; a
        fault aimed at one the host refuses anyway is used up without
        effect, except `HttpFault.FENCED`, which the host checks first."""
        self._http.fail(n, fault)

    def fail_next_http(self, fault: HttpFault) -> None:
        """Make the next outbound request fail with `fault`: `fail_http(1, fault)`."""
        self.fail_http(1, fault)

    def http_requests(self) -> List[HttpRecord]:
        """Every request that left the fake host, in order, delivered or
        not (`HttpRecord.delivered`). Requests the host refused (not in
        `http_allow`, the lease lost, a bound reached, a forbidden header)
        never left and are not here."""
        return self._http.records()

    # ----- records, settings and the clock -----------------------------------

    def commits(self) -> List[CommitRecord]:
        """Every commit that applied, in order."""
        return list(self._commits)

    def events(self) -> List[EventRecord]:
        """Every event appended, in order."""
        return list(self._events)

    def events_with_reason(self, reason: str) -> List[EventRecord]:
        """The events with `reason`."""
        return [e for e in self._events if e.reason == reason]

    def logs(self) -> List[LogLine]:
        """Every log line, in order."""
        return list(self._logs)

    def calls(self) -> CallCounts:
        """How many store calls of each kind were made."""
        return CallCounts(self._calls["get"], self._calls["list"], self._calls["commit"])

    def set_settings(self, settings: Dict[str, Any]) -> None:
        """Give the controller these settings (a JSON object within the host's bound)."""
        if not isinstance(settings, dict):
            raise ValueError("settings are a table in the host's config, so a JSON object")
        text = json.dumps(settings, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        if _utf8_len(text) > L.MAX_SETTINGS_BYTES:
            raise ValueError(
                f"the settings are {_utf8_len(text)} bytes of JSON; the host allows at most "
                f"{L.MAX_SETTINGS_BYTES}"
            )
        self._settings = text

    def set_settings_json(self, text: str) -> None:
        """As `set_settings`, from JSON text."""
        self.set_settings(json.loads(text))

    def now(self) -> _dt.datetime:
        """The fake's wall clock."""
        return self._now

    def set_now(self, now: _dt.datetime) -> None:
        """Set the wall clock (an aware datetime)."""
        self._now = now

    def advance(self, ms: int) -> _dt.datetime:
        """Move the wall clock forward by `ms` milliseconds; the new now."""
        self._now = self._now + _dt.timedelta(milliseconds=ms)
        return self._now
