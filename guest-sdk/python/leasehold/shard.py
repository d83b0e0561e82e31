"""The tenure's shard, and the rule that puts every object in one shard.

Owns: FNV-1a 64 (`fnv1a64`), the shard of a key or of a shard label's
value (`Shard.of_key`, `Shard.of_label`), whether a shard owns a key or an
object read from the store (`Shard.owns_key`, `Shard.owns`), and
`shard()`, this tenure's shard as the host tells it.

Must never: change the rule. The host, every SDK and a user's tooling
must agree on which shard an object belongs to (the WIT's `tenure.shard`
states it; the tests hold the documented vectors). Nor keep the host's
answer: `shard()` asks the host each time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional, Union

from . import _host
from .limits import MAX_SHARDS
from .objects import Object

# The offset basis and prime of the FNV specification, 64-bit variant.
_FNV_OFFSET_BASIS = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_U64 = (1 << 64) - 1


def fnv1a64(data: Union[str, bytes]) -> int:
    """FNV-1a 64 of `data` (a `str` is hashed as its UTF-8 bytes), as an int below 2**64.

    The hash the host assigns objects to shards with.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    h = _FNV_OFFSET_BASIS
    for byte in raw:
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    return h


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"a controller runs as 1 to {MAX_SHARDS} shards, not {count!r}")


@dataclass(frozen=True)
class Shard:
    """Which part of its controller's objects this tenure runs: shard `index` of `count`.

    A controller configured with `shards = N` runs as N leases, each with
    its own guest instance: shard 0 to N-1 of N. An unsharded controller
    runs shard 0 of 1, which owns every object. Every object belongs to
    exactly one shard: the one FNV-1a 64 of its shard label's value picks,
    if the description declares a shard label (`Description.shard_by_label`)
    and the object carries it; else the one FNV-1a 64 of `kind/name`
    picks. The host wakes a shard only for its own objects and those of
    the kinds every shard watches (`Description.watch_on_every_shard`).
    """

    #: This tenure's shard, from 0 to `count - 1`.
    index: int
    #: How many shards the controller runs as (1 to `MAX_SHARDS`).
    count: int

    #: The shard of an unsharded controller: shard 0 of 1, which owns every object.
    WHOLE: ClassVar["Shard"]

    def __post_init__(self) -> None:
        _check_count(self.count)
        index = self.index
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.count:
            raise ValueError(
                f"shard index {self.index!r} is not one of the {self.count} shards "
                f"(0 to {self.count - 1})"
            )

    @staticmethod
    def of_key(kind: str, name: str, count: int) -> int:
        """The index of the shard `kind/name` belongs to among `count` shards, by its key:
        FNV-1a 64 of the UTF-8 bytes of `kind/name`, modulo `count`."""
        _check_count(count)
        return fnv1a64(f"{kind}/{name}") % count

    @staticmethod
    def of_label(value: str, count: int) -> int:
        """The index of the shard an object whose shard label has `value` belongs to
        among `count` shards: FNV-1a 64 of `value`'s UTF-8 bytes, modulo `count`."""
        _check_count(count)
        return fnv1a64(value) % count

    def owns_key(self, kind: str, name: str) -> bool:
        """True if `kind/name` belongs to this shard by its key (no shard label)."""
        return Shard.of_key(kind, name, self.count) == self.index

    def owns(self, obj: Object, shard_label: Optional[str] = None) -> bool:
        """True if `obj`, as read from the store, belongs to this shard.

        `shard_label` is the label the description declares (None: none):
        if `obj` carries it, the label's value decides; else its key does.
        """
        value = None if shard_label is None else obj.metadata.labels.get(shard_label)
        if value is None:
            return self.owns_key(obj.kind, obj.name)
        return Shard.of_label(value, self.count) == self.index

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


Shard.WHOLE = Shard(0, 1)


def shard() -> Shard:
    """This tenure's shard, from the host (asked each time, never kept)."""
    return _host.current().shard()
