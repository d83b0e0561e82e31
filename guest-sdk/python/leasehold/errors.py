"""Errors a reconcile meets, as exceptions.

`LeaseholdError` is the base of every error the SDK raises. The store's
errors mirror the WIT `store-error` variant one for one (`Fenced`,
`Conflict`, `NotFound`, `Invalid`, `Unavailable`), plus `QuotaExceeded`,
the host's typed form of an `invalid` quota refusal. Each says whether
anything was written: a `Fenced`, `Conflict`, `NotFound` or `Invalid`
commit wrote nothing; after `Unavailable` the outcome is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .keys import ObjectKey

#: How the host's quota refusals begin (an `invalid` store error).
QUOTA_EXCEEDED_PREFIX = "quota exceeded: "


class LeaseholdError(Exception):
    """The base of every error the SDK raises from a reconcile."""

    #: When the host should retry, in milliseconds, if the error says.
    retry_after_ms: Optional[int] = None

    @property
    def is_fenced(self) -> bool:
        """True if this error means the tenure's lease is gone."""
        return False


class StoreError(LeaseholdError):
    """A store call failed (the WIT `store-error`)."""


class Fenced(StoreError):
    """The lease this guest runs under is no longer current.

    Nothing was written. The guest must stop: raise it on (the SDK reports
    `fenced` to the host, whatever the controller's error policy says).
    """

    def __init__(self, why: str) -> None:
        super().__init__(f"no longer the leader, stopping: {why}")
        #: The host's explanation: which lease, epoch and holder.
        self.why = why

    @property
    def is_fenced(self) -> bool:
        """Always true."""
        return True


class Conflict(StoreError):
    """A precondition failed on `key`; nothing was written. Re-read and decide again."""

    def __init__(self, key: ObjectKey) -> None:
        super().__init__(f"conflict on {key}: it changed since it was read; re-read and retry")
        #: The object whose precondition failed.
        self.key = key


class NotFound(StoreError):
    """The object named by an update, replace, delete or status write does not exist."""

    def __init__(self, key: ObjectKey) -> None:
        super().__init__(f"{key} does not exist")
        #: The missing object.
        self.key = key


class Invalid(StoreError):
    """The request itself is wrong (a bad name, not JSON, too large, too many ops)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"invalid store request: {why}")
        #: What is wrong, as the host says it.
        self.why = why


class Unavailable(StoreError):
    """The backend failed; whether a commit was applied is unknown. Re-read first."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"store unavailable: {why}; re-read before retrying, a commit may have been applied"
        )
        #: The host's explanation.
        self.why = why


@dataclass(frozen=True)
class Quota:
    """Which of the host's per-controller quotas refused a write."""

    #: The quota's key in the host's config (`max_creates_per_second`, ...).
    key: str


class QuotaExceeded(StoreError):
    """A per-controller quota refused the commit; nothing was written.

    Parsed from the host's `invalid` text (`quota exceeded: controller=...
    quota=... limit=... [retry_after_ms=...] [kind=...]: message`).
    """

    def __init__(
        self,
        message: str,
        controller: str,
        quota: str,
        limit: int,
        retry_after_ms: Optional[int],
        kind: Optional[str],
    ) -> None:
        super().__init__(message)
        #: The controller whose quota it is.
        self.controller = controller
        #: The quota's key, e.g. `max_creates_per_second`.
        self.quota = quota
        #: The quota's limit.
        self.limit = limit
        #: When the quota allows the write again, if the host says.
        self.retry_after_ms = retry_after_ms
        #: The kind that is full, for `max_objects_per_kind`.
        self.kind = kind

    @staticmethod
    def parse(message: str) -> Optional["QuotaExceeded"]:
        """The refusal `message` describes, or None if it is not one."""
        if not message.startswith(QUOTA_EXCEEDED_PREFIX):
            return None
        rest = message[len(QUOTA_EXCEEDED_PREFIX):]
        header, sep, _ = rest.partition(": ")
        if not sep:
            return None
        fields = {}
        for part in header.split(" "):
            key, eq, value = part.partition("=")
            if not eq:
                return None
            fields[key] = value
        try:
            return QuotaExceeded(
                message,
                fields["controller"],
                fields["quota"],
                int(fields["limit"]),
                int(fields["retry_after_ms"]) if "retry_after_ms" in fields else None,
                fields.get("kind"),
            )
        except (KeyError, ValueError):
            return None


def invalid(why: str) -> StoreError:
    """The error an `invalid` answer means: `QuotaExceeded` if it is a quota refusal."""
    return QuotaExceeded.parse(why) or Invalid(why)


class DecodeError(LeaseholdError):
    """An object's value (or status) does not have the shape the reader expects."""

    def __init__(self, key: ObjectKey, message: str) -> None:
        super().__init__(f"{key} does not have the expected shape: {message}")
        #: The object that did not decode.
        self.key = key


class TooMany(LeaseholdError):
    """A `list_all` found more objects than the bound it was given."""

    def __init__(self, kind: str, max: int) -> None:
        super().__init__(
            f"more than {max} objects of kind {kind}; page through them with Api.list instead"
        )
        #: The kind listed.
        self.kind = kind
        #: The bound.
        self.max = max


class SettingsError(LeaseholdError):
    """The controller's settings do not have the expected shape.

    `key` names the key it failed on, as a path from the top of the
    settings (`region`, `db.port`, `exempt[2]`): a missing key, or one
    whose value has the wrong type; None when the settings as a whole did
    not fit. Neither the key nor the message ever quotes a value of the
    settings: they may hold secrets.
    """

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        where = "" if key is None else f"key `{key}`: "
        super().__init__(
            f"the controller's settings do not have the expected shape: {where}{message}"
        )
        #: The key path it failed on, or None for the settings as a whole.
        self.key = key
        #: What was wrong, by type, never by value.
        self.message = message


class Failed(LeaseholdError):
    """A reconcile failure of the controller's own, with an optional retry delay."""

    def __init__(self, message: str, retry_after_ms: Optional[int] = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms
