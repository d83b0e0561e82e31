"""The controller: what it watches, how it reconciles, how it fails."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

from . import clock
from .errors import LeaseholdError
from .fence import Fence, fence
from .objects import Api, K
from .shard import Shard, shard
from .transaction import Transaction


@dataclass(frozen=True)
class RelatedWatch:
    """A kind whose changes reconcile another object, with the reason `related`.

    Built with `Description.owns` (a change maps to the changed object's
    owner, of `owner_kind` only if given) or `Description.related_by_label`
    (an object labelled `label_key=V` maps to `target_kind/V`).
    """

    #: The kind whose changes are mapped, e.g. `pods`.
    kind: str
    #: For an owner mapping: only owners of this kind (None: any kind).
    owner_kind: Optional[str] = None
    #: For a label mapping: the label key whose value names the target.
    label_key: Optional[str] = None
    #: For a label mapping: the kind of the objects the label's value names.
    target_kind: Optional[str] = None

    @property
    def by_label(self) -> bool:
        """True for a label mapping, false for an owner mapping."""
        return self.label_key is not None


@dataclass(frozen=True)
class Description:
    """What the controller needs: the kinds it watches, its resync period,
    the related kinds whose changes reconcile the objects they map to, and
    how its objects are divided when it runs sharded.

    `resync_ms` of None (or 0) disables the periodic resync; a resync
    still happens at the start of each tenure. `shard_label` and
    `every_shard` matter only to a sharded controller (see `Shard`); an
    unsharded one runs shard 0 of 1, which owns every object.
    """

    watches: List[str]
    resync_ms: Optional[int] = None
    related: List[RelatedWatch] = field(default_factory=list)
    #: A label whose value decides the shard of an object carrying it, e.g.
    #: `example.com/tenant`; None: every object goes by its `kind/name`.
    shard_label: Optional[str] = None
    #: Kinds every shard watches, whatever shard their objects belong to
    #: (each must also be in `watches`: `watch_on_every_shard` adds it).
    every_shard: List[str] = field(default_factory=list)
    #: The JSON Schema (JSON text) of the controller's settings, which the
    #: host checks the config's `[controllers.settings]` against (see
    #: `settings_of`); None: unchecked.
    settings_schema: Optional[str] = None

    @staticmethod
    def watching(kinds: Sequence[str]) -> "Description":
        """A description watching `kinds`, without periodic resync."""
        return Description(list(kinds))

    def _with(self, **changes: Any) -> "Description":
        # Every builder returns a copy: the lists are copied too, so that
        # no two descriptions share one.
        copied: Dict[str, Any] = {
            "watches": list(self.watches),
            "related": list(self.related),
            "every_shard": list(self.every_shard),
        }
        copied.update(changes)
        return replace(self, **copied)

    def resync_every(self, ms: int) -> "Description":
        """A copy that resyncs every watched object every `ms` milliseconds."""
        return self._with(resync_ms=ms)

    def owns(self, kind: str, owner_kind: Optional[str] = None) -> "Description":
        """A copy where a change of a `kind` object reconciles its owner (of `owner_kind`)."""
        return self._with(related=self.related + [RelatedWatch(kind, owner_kind)])

    def related_by_label(self, kind: str, label_key: str, target_kind: str) -> "Description":
        """A copy where a change of a `kind` object labelled `label_key=V` reconciles `target_kind/V`."""
        watch = RelatedWatch(kind, None, label_key, target_kind)
        return self._with(related=self.related + [watch])

    def shard_by_label(self, label_key: str) -> "Description":
        """A copy where an object carrying the label `label_key` belongs to the shard
        its value picks, so that objects which belong together (a tenant's tasks and
        quotas, all labelled with the tenant) fall into one shard."""
        return self._with(shard_label=label_key)

    def settings_of(self, cls: Any) -> "Description":
        """A copy declaring the settings' shape as the dataclass `cls` (what
        `settings(cls)` decodes): `leasehold check`, the host's start and a
        reload refuse `[controllers.settings]` that do not fit it, naming every
        wrong, missing or unknown key."""
        from .settings import schema_of

        return self._with(settings_schema=schema_of(cls))

    def with_settings_schema(self, schema: str) -> "Description":
        """A copy declaring the settings' shape as a JSON Schema written by hand
        (JSON text; the subset the host understands is the WIT's
        `description.settings-schema`)."""
        return self._with(settings_schema=schema)

    def watch_on_every_shard(self, kind: str) -> "Description":
        """A copy where every shard watches, and resyncs, every object of `kind`
        (watched too, if it is not yet): shared objects each shard decides on,
        such as the nodes every shard's tasks are placed on. Writes to another
        shard's objects must still be conditional (see `Shard`). The same as
        watching `kind` for an unsharded controller."""
        watches = list(self.watches) if kind in self.watches else self.watches + [kind]
        every = list(self.every_shard) if kind in self.every_shard else self.every_shard + [kind]
        return self._with(watches=watches, every_shard=every)


@dataclass(frozen=True)
class Outcome:
    """A successful reconcile's result: done, or the timer `requeue_after_ms`."""

    #: None: nothing more to do until the object changes; else wake in this many ms.
    requeue_after_ms: Optional[int] = None

    @staticmethod
    def done() -> "Outcome":
        """Nothing more to do until the object changes."""
        return Outcome(None)

    @staticmethod
    def requeue_after(ms: int) -> "Outcome":
        """Reconcile the same key again in `ms` milliseconds (capped at a day by the host)."""
        return Outcome(max(0, int(ms)))

    @staticmethod
    def wake_at(at: _dt.datetime) -> "Outcome":
        """Reconcile the same key again at the wall-clock time `at`."""
        return Outcome(clock.until_ms(at))


@dataclass(frozen=True)
class Retry:
    """What `Controller.error_policy` decides: the host's backoff, or a delay."""

    #: None: the host's exponential backoff; else retry after this many ms.
    after_ms: Optional[int] = None

    @staticmethod
    def backoff() -> "Retry":
        """Let the host back off exponentially."""
        return Retry(None)

    @staticmethod
    def after(ms: int) -> "Retry":
        """Retry after `ms` milliseconds."""
        return Retry(max(0, int(ms)))


class Reason(Enum):
    """Why the host calls `reconcile`: a hint, never a promise about the object."""

    #: The object itself was created, updated or deleted.
    CHANGE = "change"
    #: The controller's own timer came due.
    REQUEUE = "requeue"
    #: A full resync (tenure start, resync period, queue overflow).
    RESYNC = "resync"
    #: The previous reconcile of this key failed and its backoff passed.
    RETRY = "retry"
    #: An object of a related kind that maps to this key changed.
    RELATED = "related"

    def strongest(self, other: "Reason") -> "Reason":
        """The stronger of two causes: change, related, retry, requeue, then resync."""
        rank = {
            Reason.RESYNC: 0,
            Reason.REQUEUE: 1,
            Reason.RETRY: 2,
            Reason.RELATED: 3,
            Reason.CHANGE: 4,
        }
        return other if rank[other] > rank[self] else self


@dataclass(frozen=True)
class Reply:
    """What the host hears from one reconcile (`dispatch`'s result).

    `kind` is `done`, `requeue`, `fenced` or `failed`; `delay_ms` is the
    requeue delay or the failure's retry delay (None: the host's backoff).
    """

    kind: str
    delay_ms: Optional[int] = None
    message: Optional[str] = None

    @property
    def is_fenced(self) -> bool:
        """True if the reconcile ended fenced."""
        return self.kind == "fenced"

    @property
    def is_failed(self) -> bool:
        """True if the reconcile failed (not fenced)."""
        return self.kind == "failed"


class Context:
    """What a reconcile may use besides the key: the reason, the fence, the shard, readers,
    transactions."""

    def __init__(self, reason: Reason = Reason.CHANGE) -> None:
        self._reason = reason
        self._fence: Optional[Fence] = None

    @property
    def reason(self) -> Reason:
        """Why this reconcile was called."""
        return self._reason

    @property
    def fence(self) -> Fence:
        """The tenure's fence (read from the host on first use)."""
        if self._fence is None:
            self._fence = fence()
        return self._fence

    @property
    def shard(self) -> Shard:
        """The shard of its controller this tenure runs (0 of 1 unless sharded),
        asked of the host on each use."""
        return shard()

    def api(self, kind: str, decode: Optional[Callable[[Any], Any]] = None) -> Api:
        """A reader of `kind`, untyped or decoding with `decode`."""
        return Api(kind, decode)

    def typed(self, kind_type: Type[K]) -> Api[K]:
        """A reader of `kind_type.KIND` decoding each value as `kind_type`."""
        return Api.typed(kind_type)

    def transaction(self) -> Transaction:
        """A new, empty transaction."""
        return Transaction()


class Controller:
    """The base class of a controller: override `describe` and `reconcile`.

    One instance serves one tenure: the host makes one call at a time
    (`describe`, then reconciles one after another). `reconcile` returns an
    `Outcome` or raises. A `Fenced` error (the lease is gone) is reported
    as fenced whatever `error_policy` says; any other exception is a
    failure the host retries after `error_policy`'s delay.
    """

    def describe(self) -> Description:
        """The kinds this controller watches and its resync period."""
        raise NotImplementedError(f"{type(self).__name__}.describe")

    def reconcile(self, ctx: Context, kind: str, name: str) -> Outcome:
        """Bring `kind/name` to its desired state (it may have been deleted: read it)."""
        raise NotImplementedError(f"{type(self).__name__}.reconcile")

    def error_policy(self, ctx: Context, kind: str, name: str, error: Exception) -> Retry:
        """When to retry after `error`: by default the error's own hint, else backoff."""
        hint = getattr(error, "retry_after_ms", None)
        return Retry.backoff() if hint is None else Retry.after(hint)


def dispatch(controller: Controller, kind: str, name: str, reason: Reason) -> Reply:
    """Run one reconcile and turn its result into the host's reply."""
    ctx = Context(reason)
    try:
        outcome = controller.reconcile(ctx, kind, name)
    except Exception as error:  # noqa: BLE001 - every failure becomes a reply
        if isinstance(error, LeaseholdError) and error.is_fenced:
            return Reply("fenced")
        retry = controller.error_policy(ctx, kind, name, error)
        message = str(error) if isinstance(error, LeaseholdError) else f"{type(error).__name__}: {error}"
        return Reply("failed", retry.after_ms, message)
    if not isinstance(outcome, Outcome):
        return Reply(
            "failed",
            None,
            f"reconcile of {kind}/{name} returned {type(outcome).__name__}, not an Outcome",
        )
    if outcome.requeue_after_ms is None:
        return Reply("done")
    return Reply("requeue", outcome.requeue_after_ms)
