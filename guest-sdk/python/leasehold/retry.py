"""Re-reading after a conflict."""

from __future__ import annotations

from typing import Callable, TypeVar

from .errors import Conflict, NotFound
from .log import info

T = TypeVar("T")

#: Attempts `retry_on_conflict` makes by default.
DEFAULT_CONFLICT_ATTEMPTS = 5


def retry_on_conflict(attempts: int, attempt: Callable[[], T]) -> T:
    """Call `attempt` (read, decide, commit) until it does not conflict.

    `Conflict` and `NotFound` mean the objects changed since they were
    read: `attempt` runs again, up to `attempts` times in all, and the
    last error is raised. Every other error (`Fenced`, `Unavailable`, ...)
    is raised at once: an unavailable commit may have been applied, so it
    is never retried blindly.
    """
    attempts = max(1, attempts)
    made = 1
    while True:
        try:
            return attempt()
        except (Conflict, NotFound) as error:
            if made >= attempts:
                raise
            info(
                f"{error.key} changed since it was read; reading again "
                f"(attempt {made + 1} of {attempts})"
            )
            made += 1
