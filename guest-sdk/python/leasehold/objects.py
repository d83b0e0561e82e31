"""Typed kinds, objects as read, and the per-kind reader `Api`."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, List, Optional, Type, TypeVar

from . import _host
from .errors import DecodeError, TooMany
from .keys import Metadata, ObjectKey, RawObject, Selector
from .limits import MAX_PAGE_SIZE

T = TypeVar("T")
K = TypeVar("K", bound="Kind")


class Kind:
    """A typed kind: a class whose instances are the values of one kind.

    Subclasses set `KIND` (the kind's name) and convert from and to the
    JSON-able value with `from_value` and `to_value`. Typed reads
    (`Context.typed`) decode with `from_value`; typed writes
    (`Transaction.create_typed`, `update_typed`) encode with `to_value`
    and refuse to write an instance into an object of another kind.
    """

    #: The kind's name, e.g. `tasks`.
    KIND: str = ""

    @classmethod
    def from_value(cls: Type[K], value: Any) -> K:
        """Build an instance from a decoded JSON value; raise on a wrong shape."""
        raise NotImplementedError(f"{cls.__name__}.from_value")

    def to_value(self) -> Any:
        """This instance as a JSON-able value."""
        raise NotImplementedError(f"{type(self).__name__}.to_value")


@dataclass
class Object(Generic[T]):
    """An object as read from the store.

    `value` is the decoded JSON value (or an instance of a typed kind);
    `version` is the precondition of conditional writes; `status` is the
    decoded status part (None if it has none); `generation` grows with each
    write of the value or metadata; `deleting_since` is set while the
    object is marked for deletion.
    """

    kind: str
    name: str
    version: int
    value: T
    metadata: Metadata = field(default_factory=Metadata)
    status: Any = None
    generation: int = 1
    deleting_since: Optional[_dt.datetime] = None

    @property
    def key(self) -> ObjectKey:
        """The object's address."""
        return ObjectKey(self.kind, self.name)

    @property
    def labels(self) -> Dict[str, str]:
        """The object's labels."""
        return self.metadata.labels

    def label(self, key: str) -> Optional[str]:
        """The value of label `key`, or None."""
        return self.metadata.labels.get(key)

    @property
    def owner(self) -> Optional[ObjectKey]:
        """The object's owner, if any."""
        return self.metadata.owner

    @property
    def finalizers(self) -> tuple:
        """The object's finalizers."""
        return self.metadata.finalizers

    def has_finalizer(self, name: str) -> bool:
        """True if finalizer `name` is on the object."""
        return name in self.metadata.finalizers

    @property
    def is_deleting(self) -> bool:
        """True while the object is marked for deletion."""
        return self.deleting_since is not None

    def decode(self, kind_type: Type[K]) -> "Object[K]":
        """This object with its value decoded as `kind_type` (`DecodeError` if it does not fit)."""
        return Object(
            self.kind,
            self.name,
            self.version,
            _decode_value(self.key, self.value, kind_type.from_value),
            self.metadata,
            self.status,
            self.generation,
            self.deleting_since,
        )


@dataclass
class Page(Generic[T]):
    """One page of a listing: objects in name order and the next page's cursor."""

    objects: List[Object[T]]
    next: Optional[str]


def _decode_value(key: ObjectKey, value: Any, decode: Optional[Callable[[Any], Any]]) -> Any:
    if decode is None:
        return value
    try:
        return decode(value)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise DecodeError(key, f"{type(e).__name__}: {e}") from None


def decode_raw(raw: RawObject, decode: Optional[Callable[[Any], Any]] = None) -> Object:
    """Turn a host's raw object into an `Object`, decoding its JSON."""
    key = ObjectKey(raw.kind, raw.name)
    try:
        value = json.loads(raw.value)
    except ValueError as e:
        raise DecodeError(key, f"its value is not JSON: {e}") from None
    try:
        status = None if raw.status is None else json.loads(raw.status)
    except ValueError as e:
        raise DecodeError(key, f"its status is not JSON: {e}") from None
    deleting = None
    if raw.deleting_since_ms is not None:
        deleting = _dt.datetime.fromtimestamp(raw.deleting_since_ms / 1000, _dt.timezone.utc)
    return Object(
        raw.kind,
        raw.name,
        raw.version,
        _decode_value(key, value, decode),
        raw.metadata,
        status,
        raw.generation,
        deleting,
    )


class Api(Generic[T]):
    """Reads of one kind: `get`, `list`, `list_all`, `list_selected`.

    `Api("tasks")` reads untyped values (decoded JSON); `Api.typed(Task)`
    (or `Context.typed(Task)`) decodes each value with `Task.from_value`.
    Store errors are raised as the `StoreError` subclasses.
    """

    def __init__(self, kind: str, decode: Optional[Callable[[Any], Any]] = None) -> None:
        self._kind = kind
        self._decode = decode

    @staticmethod
    def typed(kind_type: Type[K]) -> "Api[K]":
        """The reader of `kind_type.KIND`, decoding with `kind_type.from_value`."""
        return Api(kind_type.KIND, kind_type.from_value)

    @property
    def kind(self) -> str:
        """The kind read."""
        return self._kind

    def get(self, name: str) -> Optional[Object[T]]:
        """The object `name`, or None if it does not exist."""
        raw = _host.current().get(self._kind, name)
        return None if raw is None else decode_raw(raw, self._decode)

    def list(self, after: Optional[str] = None, limit: int = MAX_PAGE_SIZE) -> Page[T]:
        """One page in name order after `after`; the host caps `limit`."""
        page = _host.current().list(self._kind, after, limit)
        return Page([decode_raw(r, self._decode) for r in page.objects], page.next)

    def list_selected(
        self, selector: Selector, after: Optional[str] = None, limit: int = MAX_PAGE_SIZE
    ) -> Page[T]:
        """One page of the objects `selector` selects, in name order after `after`."""
        page = _host.current().list_selected(self._kind, selector, after, limit)
        return Page([decode_raw(r, self._decode) for r in page.objects], page.next)

    def list_all(self, max: int) -> List[Object[T]]:
        """Every object of the kind, page by page; `TooMany` past `max`."""
        return self._collect(max, lambda after: self.list(after, MAX_PAGE_SIZE))

    def list_all_selected(self, selector: Selector, max: int) -> List[Object[T]]:
        """Every object `selector` selects, page by page; `TooMany` past `max`."""
        return self._collect(max, lambda after: self.list_selected(selector, after, MAX_PAGE_SIZE))

    def _collect(self, max: int, page_of: Callable[[Optional[str]], Page[T]]) -> List[Object[T]]:
        everything: List[Object[T]] = []
        after: Optional[str] = None
        while True:
            page = page_of(after)
            everything.extend(page.objects)
            if len(everything) > max:
                raise TooMany(self._kind, max)
            # An empty page ends the listing whatever its cursor says.
            if page.next is None or not page.objects:
                return everything
            after = page.next
