"""The controller's settings: its `[controllers.settings]` table as JSON."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional, TypeVar

from . import _host
from .errors import SettingsError

T = TypeVar("T")


def settings_json() -> str:
    """The settings as JSON text: always an object, `{}` when there are none."""
    return _host.current().settings()


def settings(decode: Optional[Callable[[dict], T]] = None) -> Any:
    """The settings as a dict, or decoded by `decode` (e.g. a dataclass).

    A shape error raises `SettingsError`, whose message names the
    exception type and never a value: settings may hold secrets.
    """
    try:
        data = json.loads(settings_json())
    except ValueError as e:
        raise SettingsError(f"not JSON ({type(e).__name__})") from None
    if decode is None:
        return data
    try:
        return decode(data)
    except (TypeError, ValueError, KeyError) as e:
        # The exception's text may quote a value; only its type is kept,
        # and for a missing key the key's name (a name, not a value).
        detail = f"missing {e.args[0]!r}" if isinstance(e, KeyError) and e.args else type(e).__name__
        raise SettingsError(detail) from None
