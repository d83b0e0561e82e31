"""Leasehold's guest SDK for Python: write a controller, test it with the fake host.

A controller subclasses `Controller` (`describe`, `reconcile`), reads with
`Api` / `Context.typed`, writes with `Transaction`, holds its objects with
`finalizer`, reports with `Condition`s and typed events (`EventType`),
calls external services with `leasehold.http`, learns which objects are
its own from `shard()` when it runs sharded, and is tested natively
against `leasehold.fake.FakeHost`. Inside a component,
`leasehold.component.export` connects it to the WIT world
`leasehold:controller/controller@0.4.0`. See guest-sdk/README.md.
"""

from . import http
from .clock import now, until_ms
from .conditions import Condition, ConditionStatus, get_condition, remove_condition, set_condition
from .controller import (
    Context,
    Controller,
    Description,
    Outcome,
    Reason,
    RelatedWatch,
    Reply,
    Retry,
    dispatch,
)
from .errors import (
    QUOTA_EXCEEDED_PREFIX,
    Conflict,
    DecodeError,
    Failed,
    Fenced,
    Invalid,
    LeaseholdError,
    NotFound,
    QuotaExceeded,
    SettingsError,
    StoreError,
    TooMany,
    Unavailable,
)
from .fence import Fence, IdempotencyKey, fence
from .finalizers import finalizer
from .http import HttpError
from .keys import Metadata, ObjectKey, Selector
from .log import Level, debug, error, info, log, trace, warn
from .objects import Api, Kind, Object, Page
from .retry import DEFAULT_CONFLICT_ATTEMPTS, retry_on_conflict
from .settings import settings, settings_json
from .shard import Shard, fnv1a64, shard
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
    Transaction,
    Update,
)

__all__ = [
    "Api", "Check", "Committed", "Condition", "ConditionStatus", "Conflict", "Context", "Controller", "Create",
    "CreateWith", "DEFAULT_CONFLICT_ATTEMPTS", "DecodeError", "Delete", "Description",
    "EventType", "Failed", "Fence", "Fenced", "HttpError", "IdempotencyKey", "Invalid", "Kind",
    "LeaseholdError",
    "Level", "Metadata", "NewEvent", "NotFound", "Object", "ObjectKey", "Op", "Outcome",
    "Page", "QUOTA_EXCEEDED_PREFIX", "QuotaExceeded", "Reason", "RelatedWatch", "Replace", "Reply", "Retry",
    "Selector", "SettingsError", "Shard", "Status", "StoreError", "TooMany", "Transaction",
    "Unavailable", "Update", "debug", "dispatch", "error", "fence", "finalizer",
    "fnv1a64", "get_condition", "http", "info", "log", "now", "remove_condition",
    "retry_on_conflict", "set_condition", "settings", "settings_json", "shard", "trace",
    "until_ms", "warn",
]
