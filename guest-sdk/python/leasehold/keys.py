"""Addresses, metadata and selectors: the plain shapes the host speaks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple


@dataclass(frozen=True, order=True)
class ObjectKey:
    """An object's address: `(kind, name)` inside the controller's cluster.

    Shown as `kind/name`.
    """

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Metadata:
    """Labels, owner and finalizers of an object.

    `labels` maps each label key to its value (read in key order);
    `owner` is the object whose first delete request deletes this one too;
    `finalizers` name the parties that must act before the object is
    removed. The host checks the rules (`Invalid` on a breach): at most 32
    labels and 16 finalizers, each spelled as `docs/contract.md` says.

    The builder methods return a new `Metadata`; a value is never changed
    in place.
    """

    labels: Dict[str, str] = field(default_factory=dict)
    owner: Optional[ObjectKey] = None
    finalizers: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", dict(sorted(self.labels.items())))
        object.__setattr__(self, "finalizers", tuple(self.finalizers))

    def __hash__(self) -> int:
        return hash((tuple(self.labels.items()), self.owner, self.finalizers))

    def label(self, key: str, value: str) -> "Metadata":
        """A copy with label `key` set to `value`."""
        labels = dict(self.labels)
        labels[key] = value
        return replace(self, labels=labels)

    def owned_by(self, kind: str, name: str) -> "Metadata":
        """A copy owned by `kind/name`."""
        return replace(self, owner=ObjectKey(kind, name))

    def finalizer(self, name: str) -> "Metadata":
        """A copy with finalizer `name` added (once: adding it again keeps one)."""
        if name in self.finalizers:
            return self
        return replace(self, finalizers=self.finalizers + (name,))

    def without_finalizer(self, name: str) -> "Metadata":
        """A copy without finalizer `name`."""
        return replace(self, finalizers=tuple(f for f in self.finalizers if f != name))


@dataclass(frozen=True)
class Selector:
    """Which objects `Api.list_selected` returns.

    Those that carry every label in `labels` with exactly the value given,
    and whose value contains `contains` (a JSON-able value, compared as
    PostgreSQL's `jsonb @>`). The empty selector selects every object.
    """

    labels: Dict[str, str] = field(default_factory=dict)
    contains: Any = None
    #: Whether `contains` was given (`None` is JSON null, a real condition).
    has_contains: bool = False

    @staticmethod
    def everything() -> "Selector":
        """The empty selector: every object of the kind."""
        return Selector()

    def label(self, key: str, value: str) -> "Selector":
        """A copy that also requires label `key` to be `value`."""
        labels = dict(self.labels)
        labels[key] = value
        return replace(self, labels=labels)

    def containing(self, value: Any) -> "Selector":
        """A copy that requires the object's value to contain `value`."""
        return replace(self, contains=value, has_contains=True)

    def contains_json(self) -> Optional[str]:
        """`contains` as compact JSON text, or None when not given."""
        if not self.has_contains:
            return None
        return json.dumps(self.contains, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class RawObject:
    """An object as the host returns it, value and status as JSON text."""

    kind: str
    name: str
    version: int
    value: str
    metadata: Metadata
    status: Optional[str]
    generation: int
    deleting_since_ms: Optional[int]


@dataclass(frozen=True)
class RawPage:
    """A page of raw objects and the cursor of the next page, if any."""

    objects: List[RawObject]
    next: Optional[str]
