"""Commits: operations and events applied atomically, fenced by the lease."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, List, Optional, Tuple, Union

from . import _host
from .errors import Invalid
from .keys import Metadata, ObjectKey
from .objects import Kind, Object


@dataclass(frozen=True)
class Create:
    """Create `key` with `value` (JSON text); it must not exist."""

    key: ObjectKey
    value: str


@dataclass(frozen=True)
class Update:
    """Replace the value of `key` if it is at `expected_version`."""

    key: ObjectKey
    expected_version: int
    value: str


@dataclass(frozen=True)
class Delete:
    """Request the deletion of `key` if it is at `expected_version`."""

    key: ObjectKey
    expected_version: int


@dataclass(frozen=True)
class CreateWith:
    """Create `key` with `value` and `metadata`; it must not exist."""

    key: ObjectKey
    value: str
    metadata: Metadata


@dataclass(frozen=True)
class Replace:
    """Replace the value, the metadata or both of `key` if it is at `expected_version`."""

    key: ObjectKey
    expected_version: int
    value: Optional[str]
    metadata: Optional[Metadata]


@dataclass(frozen=True)
class Status:
    """Write only the status of `key` (None clears it), at `expected_generation` if given."""

    key: ObjectKey
    expected_generation: Optional[int]
    status: Optional[str]


@dataclass(frozen=True)
class Check:
    """Write nothing; the commit conflicts unless `key` is at `expected_version` (0: absent)."""

    key: ObjectKey
    expected_version: int


#: One write of a commit (the WIT `store.op`).
Op = Union[Create, Update, Delete, CreateWith, Replace, Status, Check]


class EventType(Enum):
    """The type of an event: `Normal` (something happened as it should) or
    `Warning` (something a person may have to look at), as Kubernetes'
    event types.

    The store's events have no type field (the WIT `new-event` is kind,
    name, reason and message), so the type travels at the start of the
    message, the same way in every SDK of this repository:

    - a **warning**'s message starts with `Warning: `;
    - a **normal** event's message is the message as given, except one that
      itself starts with `Warning: ` or `Normal: `, which gets `Normal: ` in
      front so that it still reads as normal;
    - reading, a message that starts with `Warning: ` is a warning, one that
      starts with `Normal: ` is normal (the prefix is not part of the text),
      and anything else is normal, as is every event written without a type
      (`Transaction.event`).

    The prefix counts toward the host's bound on an event's message.
    """

    #: Something happened as it should.
    NORMAL = "Normal"
    #: Something a person may have to look at.
    WARNING = "Warning"

    @property
    def prefix(self) -> str:
        """What starts a message of this type: `Normal: ` or `Warning: `."""
        return f"{self.value}: "

    def encode(self, message: str) -> str:
        """The message an event of this type carries on the wire."""
        marked = any(message.startswith(t.prefix) for t in EventType)
        if self is EventType.NORMAL and not marked:
            return message
        return self.prefix + message

    @staticmethod
    def decode(message: str) -> Tuple["EventType", str]:
        """The type of an event and its text, read from its message as stored."""
        for t in (EventType.WARNING, EventType.NORMAL):
            if message.startswith(t.prefix):
                return t, message[len(t.prefix):]
        return EventType.NORMAL, message


@dataclass(frozen=True)
class NewEvent:
    """An event appended with a commit: about `key`, a PascalCase `reason`,
    the message as sent (carrying its type: see `EventType`)."""

    key: ObjectKey
    reason: str
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
class Committed:
    """What a commit produced: its revision and the sequence numbers of its events."""

    revision: int
    event_seqs: Tuple[int, ...]


def _json(value: Any) -> str:
    if isinstance(value, Kind):
        value = value.to_value()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Transaction:
    """Operations and events that commit together or not at all.

    Build it with the chaining methods, then `commit()`. Every write is
    conditional on the version read (creates on absence), and the commit
    is fenced: after the lease is lost it raises `Fenced` and writes
    nothing. A transaction commits once; after `Conflict` or `Unavailable`
    build a new one from a re-read.
    """

    def __init__(self) -> None:
        self._ops: List[Op] = []
        self._events: List[NewEvent] = []
        self._refused: Optional[str] = None
        self._spent = False

    def _encode(self, key: ObjectKey, value: Any) -> str:
        try:
            return _json(value)
        except (TypeError, ValueError) as e:
            if self._refused is None:
                self._refused = f"the value for {key} does not serialize: {e}"
            return ""

    def _typed_into(self, kind: str, value: Any, key: ObjectKey) -> None:
        if isinstance(value, Kind) and type(value).KIND != kind and self._refused is None:
            self._refused = (
                f"a {type(value).__name__} is stored under kind {type(value).KIND}, "
                f"not {kind}: refusing to write it into {key}"
            )

    def create(self, kind: str, name: str, value: Any) -> "Transaction":
        """Create `kind/name` with `value` (JSON-able, or a `Kind` instance)."""
        key = ObjectKey(kind, name)
        self._typed_into(kind, value, key)
        self._ops.append(Create(key, self._encode(key, value)))
        return self

    def create_typed(self, name: str, value: Kind) -> "Transaction":
        """Create `name` of `value`'s kind."""
        return self.create(type(value).KIND, name, value)

    def update(self, obj: Object, value: Any) -> "Transaction":
        """Replace `obj`'s value if it is still at the version read."""
        self._typed_into(obj.kind, value, obj.key)
        return self.update_if_version(obj.kind, obj.name, obj.version, value)

    def update_typed(self, obj: Object, value: Kind) -> "Transaction":
        """As `update`, refusing (at commit, `Invalid`) a value of another kind."""
        return self.update(obj, value)

    def update_if_version(self, kind: str, name: str, version: int, value: Any) -> "Transaction":
        """Replace the value of `kind/name` if it is at `version`."""
        key = ObjectKey(kind, name)
        self._ops.append(Update(key, version, self._encode(key, value)))
        return self

    def delete(self, obj: Object) -> "Transaction":
        """Request `obj`'s deletion if it is still at the version read."""
        return self.delete_if_version(obj.kind, obj.name, obj.version)

    def delete_if_version(self, kind: str, name: str, version: int) -> "Transaction":
        """Request the deletion of `kind/name` if it is at `version`."""
        self._ops.append(Delete(ObjectKey(kind, name), version))
        return self

    def create_with(self, kind: str, name: str, value: Any, metadata: Metadata) -> "Transaction":
        """Create `kind/name` with `value` and `metadata`."""
        key = ObjectKey(kind, name)
        self._typed_into(kind, value, key)
        self._ops.append(CreateWith(key, self._encode(key, value), metadata))
        return self

    def replace(self, obj: Object, value: Any, metadata: Metadata) -> "Transaction":
        """Replace `obj`'s value and metadata if it is still at the version read."""
        self._typed_into(obj.kind, value, obj.key)
        self._ops.append(Replace(obj.key, obj.version, self._encode(obj.key, value), metadata))
        return self

    def set_metadata(self, obj: Object, metadata: Metadata) -> "Transaction":
        """Replace `obj`'s metadata (keeping its value) if it is at the version read."""
        self._ops.append(Replace(obj.key, obj.version, None, metadata))
        return self

    def add_finalizer(self, obj: Object, name: str) -> "Transaction":
        """Add finalizer `name` to `obj`; if it is there, only check the version."""
        if obj.has_finalizer(name):
            return self.check(obj)
        return self.set_metadata(obj, obj.metadata.finalizer(name))

    def remove_finalizer(self, obj: Object, name: str) -> "Transaction":
        """Remove finalizer `name` from `obj` (the last one of a marked object removes it)."""
        if not obj.has_finalizer(name):
            return self.check(obj)
        return self.set_metadata(obj, obj.metadata.without_finalizer(name))

    def update_status(self, obj: Object, status: Any) -> "Transaction":
        """Write `obj`'s status, conditional on the generation read."""
        return self.write_status(obj.kind, obj.name, obj.generation, status)

    def write_status(
        self, kind: str, name: str, expected_generation: Optional[int], status: Any
    ) -> "Transaction":
        """Write the status of `kind/name`, at `expected_generation` if given.

        A sharded controller gives an expected generation to write another
        shard's object (any object, when sharded by a label): the host
        refuses a blind write there with `Invalid` (see `Shard`).
        """
        key = ObjectKey(kind, name)
        self._ops.append(Status(key, expected_generation, self._encode(key, status)))
        return self

    def clear_status(self, obj: Object) -> "Transaction":
        """Clear `obj`'s status, conditional on the generation read."""
        self._ops.append(Status(obj.key, obj.generation, None))
        return self

    def check(self, obj: Object) -> "Transaction":
        """Make the commit depend on `obj` still being at the version read."""
        return self.check_version(obj.kind, obj.name, obj.version)

    def check_version(self, kind: str, name: str, version: int) -> "Transaction":
        """Make the commit depend on `kind/name` being at `version` (0: absent)."""
        self._ops.append(Check(ObjectKey(kind, name), version))
        return self

    def check_absent(self, kind: str, name: str) -> "Transaction":
        """Make the commit depend on `kind/name` not existing."""
        return self.check_version(kind, name, 0)

    def event(self, kind: str, name: str, reason: str, message: str) -> "Transaction":
        """Append an event about `kind/name` with the commit: a PascalCase
        `reason` and a `message` for people, sent as given (an untyped
        event reads as `Normal`; see `event_of_type`)."""
        self._events.append(NewEvent(ObjectKey(kind, name), reason, message))
        return self

    def event_of_type(
        self, kind: str, name: str, event_type: EventType, reason: str, message: str
    ) -> "Transaction":
        """Append an event of `event_type` about `kind/name` with the commit:
        `event` with the type carried in the message as `EventType` says."""
        if not isinstance(event_type, EventType):
            if self._refused is None:
                self._refused = f"an event's type is an EventType, not {event_type!r}"
            return self
        return self.event(kind, name, reason, event_type.encode(message))

    def warning(self, kind: str, name: str, reason: str, message: str) -> "Transaction":
        """Append a `Warning` event about `kind/name` with the commit (`event_of_type`)."""
        return self.event_of_type(kind, name, EventType.WARNING, reason, message)

    @property
    def ops(self) -> List[Op]:
        """The operations so far."""
        return list(self._ops)

    @property
    def events(self) -> List[NewEvent]:
        """The events so far."""
        return list(self._events)

    def is_empty(self) -> bool:
        """True if there is nothing to commit."""
        return not self._ops and not self._events

    def commit(self) -> Committed:
        """Apply everything atomically; raise a `StoreError` if nothing was written."""
        if self._spent:
            raise RuntimeError("a transaction commits once: build a new one from a re-read")
        self._spent = True
        if self._refused is not None:
            raise Invalid(self._refused)
        return _host.current().commit(list(self._ops), list(self._events))
