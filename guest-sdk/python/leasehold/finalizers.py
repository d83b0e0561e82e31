"""`finalizer`: hold an object with a finalizer while the controller acts
on it, and let it go only once its cleanup is done, in one call (in the
spirit of kube-rs's `finalizer()`, with the store's conditional commits).

While an object carries a finalizer, a delete request only marks it
(`obj.is_deleting`); the write that removes its last finalizer removes
it. `finalizer` never removes the finalizer when the cleanup failed,
never calls `apply` on a marked object, and lets a fenced error end the
reconcile as fenced.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, TypeVar, Union

from .controller import Outcome
from .errors import Invalid
from .objects import Object
from .transaction import Transaction

R = TypeVar("R")

#: What a cleanup returns: writes and events to commit with the removal,
#: the reconcile's outcome, or nothing.
CleanupResult = Union[Transaction, Outcome, None]


def finalizer(
    obj: Optional[Object],
    name: str,
    apply: Callable[[Object], R],
    cleanup: Callable[[Object], CleanupResult],
) -> Union[R, Outcome]:
    """Reconcile `obj` under the finalizer `name`: `apply` while it lives,
    `cleanup` once it is marked for deletion, and the finalizer in between
    so that the deletion waits for the cleanup. Returns what `apply`
    returned, or after a cleanup its `Outcome` (`Outcome.done()` unless
    it returned another).

    - **Not marked, without the finalizer**: add it in a commit
      conditional on the version read (`Conflict` if the object moved:
      `apply` does not run), then call `apply` with the object as that
      commit wrote it (its new version, its generation one higher, the
      finalizer in its metadata), so that `apply`'s own conditional writes
      build on it.
    - **Not marked, with the finalizer**: call `apply(obj)`.
    - **Marked for deletion, with the finalizer**: call `cleanup(obj)`.
      Only when it returns (it succeeded), remove the finalizer in a
      commit conditional on the version read; if that was the last
      finalizer, the commit removes the object. `cleanup` may return a
      `Transaction` whose writes and events (a `Deprovisioned` event, say)
      commit together with the removal; it must not write `obj` itself
      (the removal is the commit's operation on it: `Invalid`, before
      anything is sent). To keep the object (the cleanup failed, or must
      be looked at again later), raise from `cleanup`: the finalizer
      stays, and the host's retry calls `cleanup` again.
    - **Marked for deletion, without the finalizer** (another party's
      finalizer holds it, or it goes anyway): nothing, `Outcome.done()`.
      An object that no longer exists (`obj` is None): the same.

    Errors propagate as raised: a fenced commit or a fenced request
    (`leasehold.http.Fenced`) ends the reconcile as fenced, a conflict
    reaches `retry_on_conflict` and `error_policy` as a conflict.

    **Which number goes into an idempotency key.** Both callables may run
    again for the same object: after a conflict, a lost reply, or in a
    successor's tenure. Key an external effect driven by the object's spec
    (a `PUT` of it in `apply`, a `DELETE` in `cleanup`) by the object's
    **generation**: `IdempotencyKey.for_action(kind, name, obj.generation,
    action)`. The generation moves only when the value or the metadata
    changes (the finalizer's addition and the deletion mark included); a
    status write never moves it. The version moves with every write, so a
    key built from it changes as soon as the controller records its own
    progress: write `Pending` to the status, send the request, lose the
    answer, and the retry reads a new version, builds a new key, and the
    receiver applies the effect a second time. With the generation the
    retry sends the same key, and the receiver replays its stored answer.
    """
    if obj is None:
        return Outcome.done()
    if not obj.is_deleting:
        if obj.has_finalizer(name):
            return apply(obj)
        committed = Transaction().add_finalizer(obj, name).commit()
        # The object as that commit wrote it: a metadata change takes the
        # commit's revision as its version and one more generation.
        written = dataclasses.replace(
            obj,
            version=committed.revision,
            metadata=obj.metadata.finalizer(name),
            generation=obj.generation + 1,
        )
        return apply(written)
    if not obj.has_finalizer(name):
        return Outcome.done()
    cleaned = cleanup(obj)
    removal = cleaned if isinstance(cleaned, Transaction) else Transaction()
    if any(op.key == obj.key for op in removal.ops):
        raise Invalid(
            f"the cleanup of {obj.key} writes {obj.key} itself; the commit that removes its "
            f"finalizer {name} is the one operation on it"
        )
    removal.remove_finalizer(obj, name).commit()
    return cleaned if isinstance(cleaned, Outcome) else Outcome.done()
