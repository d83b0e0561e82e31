"""The tenure's fence and idempotency keys."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from . import _host


@dataclass(frozen=True)
class Fence:
    """The lease this guest runs under: cluster, lease, epoch and holder.

    `epoch` strictly increases with each new tenure of the lease.
    """

    cluster: str
    lease: str
    epoch: int
    holder: str

    def idempotency_key(self, action: str) -> str:
        """A key naming `action` in this tenure: `cluster/lease/epoch/action`.

        Different in every tenure: use it for effects each tenure may make
        once. For an effect that must happen once whoever leads, use
        `IdempotencyKey.for_action`, which leaves the epoch out.
        """
        return f"{self.cluster}/{self.lease}/{self.epoch}/{action}"

    def __str__(self) -> str:
        return f"lease {self.cluster}/{self.lease} epoch {self.epoch} holder {self.holder}"


def fence() -> Fence:
    """The current fence, from the host."""
    return _host.current().fence()


def _escape(field: str) -> str:
    # Everything but ASCII letters, digits and -._~ is percent-encoded
    # (upper-case hex of each UTF-8 byte), as the Rust SDK does.
    return quote(field, safe="")


@dataclass(frozen=True, order=True)
class IdempotencyKey:
    """A key naming one action on one version of one object.

    Stable across tenures and processes: built from the object's kind,
    name and version and the action's name only, never the epoch. The form
    `<kind>/<name>@<version>/<action>` (fields percent-encoded except ASCII
    letters, digits and `-._~`) is the Rust SDK's, part of the contract.
    """

    value: str

    @staticmethod
    def for_action(kind: str, name: str, version: int, action: str) -> "IdempotencyKey":
        """The key of `action` decided on `version` of `kind/name`.

        `version` is the number that changes exactly when the decision may
        change: for an effect driven by the object's spec, its
        **generation** (`obj.generation`). A status write changes the
        object's version but not its generation, so a key from the version
        would change once the controller records `Pending`, and a retry
        would apply the effect twice. It is a whole number from 0 to
        2**64 - 1 (`ValueError` otherwise), as in the Rust SDK.
        """
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**64:
            raise ValueError(
                f"an idempotency key's version is a whole number from 0 to 2**64 - 1, "
                f"not {version!r}"
            )
        return IdempotencyKey(f"{_escape(kind)}/{_escape(name)}@{version}/{_escape(action)}")

    def as_str(self) -> str:
        """The key, as sent in the header."""
        return self.value

    def __str__(self) -> str:
        return self.value
