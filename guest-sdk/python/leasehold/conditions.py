"""Conditions in a status, shaped like Kubernetes' `metav1.Condition`.

A condition says, for one aspect of an object (`Ready`, `Available`),
whether it holds (`status`: `"True"`, `"False"` or `"Unknown"`), why (a
PascalCase `reason` for programs, a `message` for people), which
generation of the object it was computed from (`observed_generation`) and
since when (`last_transition_time`). A status dict keeps them as a list
under `conditions`, one per type; on the wire the names are the same in
every SDK of this repository:

    {"conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned",
                     "message": "applied by the cloud", "observed_generation": 3,
                     "last_transition_time": "2026-01-01T00:00:00Z"}]}

`set_condition` writes one into a status dict (the transition time moves
only when the status changes, and is taken from the SDK's wall clock,
`leasehold.now()`, to the second), `get_condition` reads one,
`remove_condition` removes one; write the status with
`Transaction.update_status` afterwards, when `set_condition` says it
changed.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Dict, List, MutableMapping, Optional, Union

from . import clock

#: The key of the list in a status dict.
CONDITIONS_KEY = "conditions"


class ConditionStatus(str, Enum):
    """Whether a condition holds: `"True"`, `"False"` or `"Unknown"` on the
    wire. A member equals its text (`ConditionStatus.TRUE == "True"`)."""

    #: The condition holds.
    TRUE = "True"
    #: It does not.
    FALSE = "False"
    #: The controller cannot tell (yet): work in progress, or an answer it waits for.
    UNKNOWN = "Unknown"

    def __str__(self) -> str:
        return self.value


def _to_the_second(at: _dt.datetime) -> _dt.datetime:
    return at.astimezone(_dt.timezone.utc).replace(microsecond=0)


def _format(at: _dt.datetime) -> str:
    return _to_the_second(at).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: Any) -> _dt.datetime:
    if not isinstance(text, str):
        raise ValueError("a condition's last_transition_time is RFC 3339 text")
    try:
        at = _dt.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(
            "a condition's last_transition_time is an RFC 3339 time such as 2026-01-01T00:00:00Z"
        ) from None
    if at.tzinfo is None:
        raise ValueError("a condition's last_transition_time needs an offset (Z for UTC)")
    return at.astimezone(_dt.timezone.utc)


@dataclass(frozen=True)
class Condition:
    """One condition of an object's status.

    `type` names the aspect in PascalCase (`Ready`); `status` is a
    `ConditionStatus` (its text is accepted too; `ValueError` for anything
    else); `reason` is one PascalCase word, `message` is for people (may be
    empty); `observed_generation` is the object's generation the condition
    was computed from (0 if not given); `last_transition_time` is when the
    status last changed, an aware UTC datetime to the second (None until
    `set_condition` stamps it).
    """

    type: str
    status: Union[ConditionStatus, str]
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    last_transition_time: Optional[_dt.datetime] = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise ValueError(f"a condition's type is a non-empty string, not {self.type!r}")
        try:
            status = ConditionStatus(self.status)
        except ValueError:
            raise ValueError(
                f'the status of condition {self.type} is "True", "False" or "Unknown", '
                f"not {self.status!r}"
            ) from None
        object.__setattr__(self, "status", status)
        generation = self.observed_generation
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise ValueError(
                f"the observed_generation of condition {self.type} is a whole number, "
                f"not {generation!r}"
            )

    @property
    def is_true(self) -> bool:
        """True if the status is `True`."""
        return self.status is ConditionStatus.TRUE

    def to_value(self) -> Dict[str, Any]:
        """The condition as a JSON object, in the wire's field order
        (`last_transition_time` only once it has one)."""
        value: Dict[str, Any] = {
            "type": self.type,
            "status": str(self.status),
            "reason": self.reason,
            "message": self.message,
            "observed_generation": self.observed_generation,
        }
        if self.last_transition_time is not None:
            value["last_transition_time"] = _format(self.last_transition_time)
        return value

    @staticmethod
    def from_value(value: Any) -> "Condition":
        """A condition from its JSON object (`ValueError` if it is not one;
        the time is read with any RFC 3339 offset and fraction)."""
        if not isinstance(value, dict):
            raise ValueError(f"a condition is a JSON object, not {type(value).__name__}")
        time = value.get("last_transition_time")
        return Condition(
            value.get("type", ""),
            value.get("status", ""),
            value.get("reason", "") or "",
            value.get("message", "") or "",
            value.get("observed_generation", 0) or 0,
            None if time is None else _parse(time),
        )


def _conditions(status: Optional[MutableMapping[str, Any]]) -> List[Any]:
    if status is None:
        return []
    found = status.get(CONDITIONS_KEY)
    if found is None:
        return []
    if not isinstance(found, list):
        raise ValueError(f"a status's {CONDITIONS_KEY} is a list, not {type(found).__name__}")
    return found


def get_condition(status: Optional[MutableMapping[str, Any]], type: str) -> Optional[Condition]:
    """The condition of `type` in `status` (a status dict, or None), or None."""
    for value in _conditions(status):
        if isinstance(value, dict) and value.get("type") == type:
            return Condition.from_value(value)
    return None


def set_condition(status: MutableMapping[str, Any], condition: Condition) -> bool:
    """Put `condition` into `status["conditions"]` (created if absent),
    replacing the one of its type in place or appending it; True if
    anything changed, so a controller writes the status only when it did.

    `last_transition_time` is set from the wall clock (`leasehold.now()`,
    to the second) when the condition is new or its status changed; when
    only the reason, message or observed generation changed it keeps its
    time. The given condition's own time is not used.
    """
    conditions = _conditions(status)
    if status.get(CONDITIONS_KEY) is None:
        status[CONDITIONS_KEY] = conditions
    for i, value in enumerate(conditions):
        if isinstance(value, dict) and value.get("type") == condition.type:
            existing = Condition.from_value(value)
            if existing.status is condition.status and existing.last_transition_time is not None:
                written = replace(condition, last_transition_time=existing.last_transition_time)
            else:
                written = replace(condition, last_transition_time=_to_the_second(clock.now()))
            new = written.to_value()
            if new == value:
                return False
            conditions[i] = new
            return True
    conditions.append(replace(condition, last_transition_time=_to_the_second(clock.now())).to_value())
    return True


def remove_condition(status: Optional[MutableMapping[str, Any]], type: str) -> bool:
    """Remove the condition of `type` from `status`; True if there was one."""
    conditions = _conditions(status)
    kept = [v for v in conditions if not (isinstance(v, dict) and v.get("type") == type)]
    if len(kept) == len(conditions):
        return False
    conditions[:] = kept
    return True
