"""The seam between the SDK and whatever answers its host calls.

Inside a component the host is the WIT imports (`leasehold.component`);
in tests it is a `leasehold.fake.FakeHost`. The SDK's functions call the
installed host; nothing else in the SDK knows which one it is.
"""

from __future__ import annotations

from typing import Any, Optional

_current: Optional[Any] = None


def install(host: Any) -> None:
    """Make `host` answer every host call the SDK makes from now on."""
    global _current
    _current = host


def current() -> Any:
    """The installed host; raises `RuntimeError` if there is none."""
    if _current is None:
        raise RuntimeError(
            "no Leasehold host is installed: run inside a component, "
            "or create a leasehold.fake.FakeHost in the test"
        )
    return _current
