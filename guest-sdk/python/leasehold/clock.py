"""The host's wall clock (UTC), for timestamps and timers.

Never compare it across tenures to decide who wrote last: versions and
epochs say that.
"""

from __future__ import annotations

import datetime as _dt

from . import _host


def now() -> _dt.datetime:
    """The wall clock's now, as an aware UTC datetime."""
    return _dt.datetime.fromtimestamp(_host.current().now_ms() / 1000, _dt.timezone.utc)


def until_ms(at: _dt.datetime) -> int:
    """Milliseconds from now until `at`; 0 if `at` has passed."""
    delta = at - now()
    return max(0, int(delta.total_seconds() * 1000))
