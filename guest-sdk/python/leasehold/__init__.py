"""Leasehold's guest SDK for Python: write a controller, test it with the fake host.

A controller subclasses `Controller` (`describe`, `reconcile`), reads with
`Api` / `Context.typed`, writes with `Transaction`, learns which objects are
its own from `shard()` when it runs sharded, and is tested natively
against `leasehold.fake.FakeHost`. Inside a component,
`leasehold.component.export` connects it to the WIT world
`leasehold:controller/controller@0.3.0`. See guest-sdk/README.md.
"""

from .clock import now, until_ms
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
    NewEvent,
    Op,
    Replace,
    Status,
    Transaction,
    Update,
)

__all__ = [
    "Api", "Check", "Committed", "Conflict", "Context", "Controller", "Create",
    "CreateWith", "DEFAULT_CONFLICT_ATTEMPTS", "DecodeError", "Delete", "Description",
    "Failed", "Fence", "Fenced", "IdempotencyKey", "Invalid", "Kind", "LeaseholdError",
    "Level", "Metadata", "NewEvent", "NotFound", "Object", "ObjectKey", "Op", "Outcome",
    "Page", "QUOTA_EXCEEDED_PREFIX", "QuotaExceeded", "Reason", "RelatedWatch", "Replace", "Reply", "Retry",
    "Selector", "SettingsError", "Shard", "Status", "StoreError", "TooMany", "Transaction",
    "Unavailable", "Update", "debug", "dispatch", "error", "fence", "fnv1a64", "info", "log", "now",
    "retry_on_conflict", "settings", "settings_json", "shard", "trace", "until_ms", "warn",
]
