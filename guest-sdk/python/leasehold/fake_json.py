"""JSON as the host's store keeps it, for the fake host.

The host parses every value, status and selector `contains` strictly and
stores one canonical text of it (its model crate, `leasehold_model::json`);
this module gives the fake the same answers, so a value reads back here
exactly as it would from the host:

- the canonical text is compact, object keys sorted by code point (the
  last of a repeated key wins), strings with only `"`, `\\` and control
  characters escaped, integers as written, every other number as the
  nearest double in its shortest digits: written out (`1.0`,
  `1000000000.0`, `0.00001`) when its decimal exponent is from -5 to 15,
  else in scientific notation (`1e+16`, `1.5e-7`); `-0` is `-0.0`;
- refused as not JSON: what the grammar refuses, `NaN` and `Infinity`, a
  number too large for a double (`1e400`), a lone surrogate, nesting
  deeper than `MAX_JSON_DEPTH`;
- refused as well: an integer outside `MIN_JSON_INTEGER` to
  `MAX_JSON_INTEGER` (the host would have to round it), and a NUL
  character in any string or key (no store keeps it).

Containment is PostgreSQL's `jsonb @>`, numbers compared by exact value.
"""

from __future__ import annotations

import json
import math
from typing import Any, List, Optional

from . import limits as L

#: A `JsonRefused.kind`: not JSON at all (or too deep, or out of range).
NOT_JSON = "not-json"
#: A `JsonRefused.kind`: an integer outside the 64-bit range.
WIDE_INTEGER = "wide-integer"
#: A `JsonRefused.kind`: a NUL character in a string or key.
NUL = "nul"


class JsonRefused(ValueError):
    """Why a text is not JSON the store keeps; `str()` completes "the value of K …"."""

    def __init__(self, kind: str, detail: str = "") -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(self.describe())

    def describe(self) -> str:
        """The host's words for this refusal, after "the value of K "."""
        if self.kind == WIDE_INTEGER:
            return (
                f"holds the integer {self.detail}, outside the 64-bit range "
                f"({L.MIN_JSON_INTEGER} to {L.MAX_JSON_INTEGER}) that every store keeps "
                "exactly; write it as a string"
            )
        if self.kind == NUL:
            return (
                "holds a NUL character (\\u0000), which no store can keep; remove it or "
                "encode the text"
            )
        return f"is not JSON: {self.detail}"


def parse(text: str) -> Any:
    """`text` as JSON the store keeps, or `JsonRefused`.

    Integers come back as `int`, other numbers as `float`, objects as
    `dict`.
    """
    wide: List[str] = []

    def parse_int(literal: str) -> Any:
        # The host reads `-0` as a double.
        if literal == "-0":
            return -0.0
        number = int(literal)
        if not L.MIN_JSON_INTEGER <= number <= L.MAX_JSON_INTEGER and not wide:
            wide.append(literal[:80])
        return number

    def parse_float(literal: str) -> float:
        number = float(literal)
        if math.isinf(number):
            raise JsonRefused(NOT_JSON, "number out of range")
        return number

    def constant(name: str) -> Any:
        raise JsonRefused(NOT_JSON, f"{name} is not JSON")

    try:
        value = json.loads(
            text, parse_int=parse_int, parse_float=parse_float, parse_constant=constant
        )
    except JsonRefused:
        raise
    except RecursionError:
        raise JsonRefused(NOT_JSON, "recursion limit exceeded") from None
    except ValueError as e:
        raise JsonRefused(NOT_JSON, str(e)) from None
    problem = _problem(value, 0)
    if problem is not None:
        raise JsonRefused(NOT_JSON, problem)
    if wide:
        raise JsonRefused(WIDE_INTEGER, wide[0])
    if _has_nul(value):
        raise JsonRefused(NUL)
    return value


def _problem(value: Any, depth: int) -> Optional[str]:
    """What the host's parser refuses that Python's accepts, if anything."""
    if isinstance(value, str):
        return _lone_surrogate(value)
    if isinstance(value, (list, dict)):
        if depth + 1 > L.MAX_JSON_DEPTH:
            return "recursion limit exceeded"
        items = value if isinstance(value, list) else value.values()
        if isinstance(value, dict):
            for key in value:
                found = _lone_surrogate(key)
                if found:
                    return found
        for item in items:
            found = _problem(item, depth + 1)
            if found:
                return found
    return None


def _lone_surrogate(text: str) -> Optional[str]:
    if any("\ud800" <= c <= "\udfff" for c in text):
        return "lone surrogate in hex escape"
    return None


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    if isinstance(value, dict):
        return any("\0" in k or _has_nul(v) for k, v in value.items())
    return False


def canonical(text: str) -> str:
    """The canonical text of `text` (see the module documentation), or `JsonRefused`."""
    return dumps(parse(text))


def dumps(value: Any) -> str:
    """A parsed value's canonical text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(item) for item in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                json.dumps(key, ensure_ascii=False) + ":" + dumps(value[key])
                for key in sorted(value)
            )
            + "}"
        )
    raise TypeError(f"{type(value).__name__} is not JSON")


def float_text(number: float) -> str:
    """A double as the host writes it: its shortest digits, written out
    when the decimal exponent is from -5 to 15, else `d.ddde±x`."""
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{number} is not JSON")
    if number == 0:
        return "-0.0" if math.copysign(1.0, number) < 0 else "0.0"
    sign = "-" if number < 0 else ""
    mantissa, _, exponent = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    significant = digits.lstrip("0")
    # The decimal exponent of the first significant digit.
    e = len(whole) - 1 + (int(exponent) if exponent else 0) - (len(digits) - len(significant))
    digits = significant.rstrip("0") or "0"
    if -5 <= e <= 15:
        if len(digits) - 1 <= e:
            return sign + digits + "0" * (e - (len(digits) - 1)) + ".0"
        if e >= 0:
            return sign + digits[: e + 1] + "." + digits[e + 1 :]
        return sign + "0." + "0" * (-e - 1) + digits
    body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{body}e{'+' if e >= 0 else '-'}{abs(e)}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def contains(value: Any, query: Any) -> bool:
    """PostgreSQL's `jsonb @>`: at the top level only, an array contains a
    scalar it has as an element."""
    if isinstance(value, list) and _kind(query) not in ("array", "object"):
        return any(_contained(item, query) for item in value)
    return _contained(value, query)


def _contained(value: Any, query: Any) -> bool:
    a, b = _kind(value), _kind(query)
    if a != b:
        return False
    if a == "object":
        return all(k in value and _contained(value[k], q) for k, q in query.items())
    if a == "array":
        return all(any(_contained(have, want) for have in value) for want in query)
    # Numbers by exact value, as PostgreSQL's numeric (Python compares an
    # int and a float exactly); the rest by equality.
    return bool(value == query)


def depth(value: Any, cap: int) -> int:
    """How deep `value` nests arrays and objects (a scalar is 0), counted
    no further than `cap`."""
    if cap == 0:
        return 0
    if isinstance(value, list):
        return 1 + max((depth(v, cap - 1) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v, cap - 1) for v in value.values()), default=0)
    return 0
