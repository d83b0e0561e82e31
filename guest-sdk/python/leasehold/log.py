"""Log lines through the host, which attaches the controller and epoch."""

from __future__ import annotations

from enum import Enum

from . import _host


class Level(Enum):
    """Severity of a log line (the WIT `logging.level`)."""

    #: Very detailed tracing.
    TRACE = "trace"
    #: Debugging detail.
    DEBUG = "debug"
    #: Normal operation.
    INFO = "info"
    #: Something unexpected but handled.
    WARN = "warn"
    #: A failure.
    ERROR = "error"


def log(level: Level, message: str) -> None:
    """Write one line at `level`; the host truncates lines over its limit."""
    _host.current().log(level, message)


def trace(message: str) -> None:
    """Log `message` at `Level.TRACE`."""
    log(Level.TRACE, message)


def debug(message: str) -> None:
    """Log `message` at `Level.DEBUG`."""
    log(Level.DEBUG, message)


def info(message: str) -> None:
    """Log `message` at `Level.INFO`."""
    log(Level.INFO, message)


def warn(message: str) -> None:
    """Log `message` at `Level.WARN`."""
    log(Level.WARN, message)


def error(message: str) -> None:
    """Log `message` at `Level.ERROR`."""
    log(Level.ERROR, message)
