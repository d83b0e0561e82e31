"""The adapter between the SDK and the WIT bindings componentize-py generates.

Only a component imports this module: it needs the `wit_world` package
that `componentize-py -w leasehold:controller/controller@0.4.0` generates
from `wit/controller.wit`. A controller's app module exports its
controller with

    from leasehold.component import export
    Reconciler = export(MyController)

`WitHost` answers the SDK's host calls with the WIT imports (outbound
HTTP through `leasehold._wasi_http`); the
`Reconciler` class `export` returns is what componentize-py exports as
`leasehold:controller/reconciler`. Everything else in the SDK is the same
code the tests run natively against `leasehold.fake.FakeHost`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Sequence

from componentize_py_types import Err
from wit_world import exports as _exports
from wit_world.exports import reconciler as _rec
from wit_world.imports import leasehold_controller_types as _types
from wit_world.imports import logging as _logging
from wit_world.imports import settings as _settings
from wit_world.imports import store as _store
from wit_world.imports import tenure as _tenure
from wit_world.imports import wall_clock as _clock

from . import _host, _wasi_http
from .controller import Controller, Description, Reason, RelatedWatch, dispatch
from .errors import Conflict, Fenced, NotFound, StoreError, Unavailable, invalid
from .fence import Fence
from .http import WireRequest, WireResponse
from .keys import Metadata, ObjectKey, RawObject, RawPage, Selector
from .log import Level
from .shard import Shard
from .transaction import (
    Check,
    Committed,
    Create,
    CreateWith,
    Delete,
    NewEvent,
    Op,
    Replace,
    Status,
    Update,
)

_LEVELS = {
    Level.TRACE: _logging.Level.TRACE,
    Level.DEBUG: _logging.Level.DEBUG,
    Level.INFO: _logging.Level.INFO,
    Level.WARN: _logging.Level.WARN,
    Level.ERROR: _logging.Level.ERROR,
}


def _store_error(error: object) -> StoreError:
    if isinstance(error, _store.StoreError_Fenced):
        return Fenced(error.value)
    if isinstance(error, _store.StoreError_Conflict):
        return Conflict(ObjectKey(error.value.kind, error.value.name))
    if isinstance(error, _store.StoreError_NotFound):
        return NotFound(ObjectKey(error.value.kind, error.value.name))
    if isinstance(error, _store.StoreError_Invalid):
        return invalid(error.value)
    if isinstance(error, _store.StoreError_Unavailable):
        return Unavailable(error.value)
    return Unavailable(f"the host answered an unknown store error {type(error).__name__}")


def _meta_in(meta: _types.Metadata) -> Metadata:
    owner = None if meta.owner is None else ObjectKey(meta.owner.kind, meta.owner.name)
    return Metadata(dict(meta.labels), owner, tuple(meta.finalizers))


def _meta_out(meta: Metadata) -> _types.Metadata:
    owner = None if meta.owner is None else _types.ObjectKey(meta.owner.kind, meta.owner.name)
    return _types.Metadata(list(meta.labels.items()), owner, list(meta.finalizers))


def _object_in(obj: _types.Object) -> RawObject:
    return RawObject(
        obj.kind,
        obj.name,
        obj.version,
        obj.value,
        _meta_in(obj.metadata),
        obj.status,
        obj.generation,
        obj.deleting_since,
    )


def _page_in(page: _store.ObjectPage) -> RawPage:
    return RawPage([_object_in(o) for o in page.objects], page.next)


def _op_out(op: Op) -> _store.Op:
    k, n = op.key.kind, op.key.name
    if isinstance(op, Create):
        return _store.Op_Create(_store.CreateOp(k, n, op.value))
    if isinstance(op, Update):
        return _store.Op_Update(_store.UpdateOp(k, n, op.expected_version, op.value))
    if isinstance(op, Delete):
        return _store.Op_Delete(_store.DeleteOp(k, n, op.expected_version))
    if isinstance(op, CreateWith):
        return _store.Op_CreateWith(_store.CreateWithOp(k, n, op.value, _meta_out(op.metadata)))
    if isinstance(op, Replace):
        meta = None if op.metadata is None else _meta_out(op.metadata)
        return _store.Op_Replace(_store.ReplaceOp(k, n, op.expected_version, op.value, meta))
    if isinstance(op, Status):
        return _store.Op_Status(_store.StatusOp(k, n, op.expected_generation, op.status))
    if isinstance(op, Check):
        return _store.Op_Check(_store.CheckOp(k, n, op.expected_version))
    raise TypeError(f"not a store operation: {type(op).__name__}")


class WitHost:
    """Answers the SDK's host calls with the component's WIT imports."""

    def get(self, kind: str, name: str) -> Optional[RawObject]:
        """The store's `get`."""
        try:
            found = _store.get(kind, name)
        except Err as e:
            raise _store_error(e.value) from None
        return None if found is None else _object_in(found)

    def list(self, kind: str, after: Optional[str], limit: int) -> RawPage:
        """The store's `list`."""
        try:
            return _page_in(_store.list(kind, after, limit))
        except Err as e:
            raise _store_error(e.value) from None

    def list_selected(
        self, kind: str, selector: Selector, after: Optional[str], limit: int
    ) -> RawPage:
        """The store's `list-selected`."""
        wire = _store.Selector(list(selector.labels.items()), selector.contains_json())
        try:
            return _page_in(_store.list_selected(kind, wire, after, limit))
        except Err as e:
            raise _store_error(e.value) from None

    def commit(self, ops: Sequence[Op], events: Sequence[NewEvent]) -> Committed:
        """The store's `commit`."""
        wire_ops = [_op_out(op) for op in ops]
        wire_events = [_store.NewEvent(e.key.kind, e.key.name, e.reason, e.message) for e in events]
        try:
            done = _store.commit(wire_ops, wire_events)
        except Err as e:
            raise _store_error(e.value) from None
        return Committed(done.revision, tuple(done.event_seqs))

    def fence(self) -> Fence:
        """The tenure's fence."""
        f = _tenure.current()
        return Fence(f.cluster, f.lease, f.epoch, f.holder)

    def shard(self) -> Shard:
        """The tenure's shard."""
        if not hasattr(_tenure, "shard"):
            raise RuntimeError(
                "this component was built from a controller world without shards; "
                "rebuild it against the current wit/controller.wit"
            )
        s = _tenure.shard()
        return Shard(s.index, s.count)

    def log(self, level: Level, message: str) -> None:
        """The logging host."""
        _logging.log(_LEVELS[level], message)

    def settings(self) -> str:
        """The settings host."""
        return _settings.get()

    def now_ms(self) -> int:
        """`wasi:clocks/wall-clock` in ms since the Unix epoch."""
        t = _clock.now()
        return t.seconds * 1000 + t.nanoseconds // 1_000_000

    def http_send(self, request: WireRequest) -> WireResponse:
        """`wasi:http/outgoing-handler`: send `request`, read the whole response."""
        return _wasi_http.send(request)


def _related_out(watch: RelatedWatch) -> object:
    if watch.by_label:
        mapping = _rec.RelatedMap_Label(_rec.LabelMap(watch.label_key, watch.target_kind))
    else:
        mapping = _rec.RelatedMap_Owner(watch.owner_kind)
    # Positional: the record's second field is the mapping, whatever its
    # Python name.
    return _rec.RelatedWatch(watch.kind, mapping)


def _description_out(d: Description) -> _rec.Description:
    resync = d.resync_ms or 0
    # Positional: componentize-py's records take their fields in WIT order.
    fields = [f.name for f in dataclasses.fields(_rec.Description)]
    if "settings_schema" in fields:
        return _rec.Description(
            list(d.watches),
            resync,
            [_related_out(w) for w in d.related],
            d.shard_label,
            list(d.every_shard),
            d.settings_schema,
        )
    if d.settings_schema is not None:
        raise RuntimeError(
            "this component was built from a controller world without settings schemas; "
            "rebuild it against the current wit/controller.wit"
        )
    if hasattr(_tenure, "shard"):
        return _rec.Description(
            list(d.watches),
            resync,
            [_related_out(w) for w in d.related],
            d.shard_label,
            list(d.every_shard),
        )
    if d.shard_label is not None or d.every_shard:
        raise RuntimeError(
            "this component was built from a controller world without shards; "
            "rebuild it against the current wit/controller.wit"
        )
    if hasattr(_rec, "RelatedWatch"):
        return _rec.Description(list(d.watches), resync, [_related_out(w) for w in d.related])
    if d.related:
        raise RuntimeError(
            "this component was built from a controller world without related watches; "
            "rebuild it against the current wit/controller.wit"
        )
    return _rec.Description(list(d.watches), resync)


def _reason_in(reason: object) -> Reason:
    # The variant's case is the class name's tail: ReconcileReason_Change.
    case = type(reason).__name__.rpartition("_")[2].lower()
    for r in Reason:
        if r.value == case:
            return r
    # A cause this SDK does not know yet: the host's rule is that a reason
    # is a hint, so reconcile as for a change (read the object, decide).
    return Reason.CHANGE


def export(factory: Callable[[], Controller]) -> type:
    """The `Reconciler` class componentize-py exports, serving `factory()`'s controller.

    One controller is created on first use and kept for the guest
    instance's life (one tenure). A `Fenced` error becomes the WIT
    `reconcile-error.fenced`; every other failure becomes `failed` with
    the delay the controller's `error_policy` chose.
    """

    class Reconciler(_exports.Reconciler):
        _controller: Optional[Controller] = None

        @classmethod
        def _get(cls) -> Controller:
            if cls._controller is None:
                _host.install(WitHost())
                cls._controller = factory()
            return cls._controller

        def describe(self) -> _rec.Description:
            return _description_out(self._get().describe())

        def reconcile(self, kind: str, name: str, reason: _rec.ReconcileReason) -> _rec.Outcome:
            reply = dispatch(self._get(), kind, name, _reason_in(reason))
            if reply.kind == "done":
                return _rec.Outcome_Done()
            if reply.kind == "requeue":
                return _rec.Outcome_RequeueAfter(reply.delay_ms or 0)
            if reply.kind == "fenced":
                raise Err(_rec.ReconcileError_Fenced())
            raise Err(_rec.ReconcileError_Failed(_rec.Failure(reply.message or "", reply.delay_ms)))

    Reconciler.__doc__ = f"The exported reconciler serving {getattr(factory, '__name__', factory)!r}."
    return Reconciler
