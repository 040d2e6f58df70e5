"""Logging for the daemon: structured journald entries under systemd, plain lines elsewhere.

Every record can carry the turn id, the session id and the pipeline stage, either passed as
``extra={"turn_id": ...}`` or set for a whole task tree with :func:`log_context` (context
variables follow asyncio tasks). Under journald they become the fields ``TURN_ID``,
``SESSION_ID`` and ``STAGE`` (``journalctl -u appliance TURN_ID=...``); on a terminal they are
appended to the line as ``[turn=... session=... stage=...]``.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# record attribute -> journald field
CONTEXT_FIELDS = {"turn_id": "TURN_ID", "session_id": "SESSION_ID", "stage": "STAGE"}
_CONTEXT: dict[str, contextvars.ContextVar[str | None]] = {
    name: contextvars.ContextVar(f"appliance_log_{name}", default=None) for name in CONTEXT_FIELDS
}
SYSLOG_IDENTIFIER = "appliance"
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"

JournalSend = Callable[..., None]


@contextmanager
def log_context(
    *, turn_id: str | None = None, session_id: str | None = None, stage: str | None = None
) -> Iterator[None]:
    """Tag every record logged inside the block (and in tasks started from it)."""
    values = {"turn_id": turn_id, "session_id": session_id, "stage": stage}
    tokens = [(_CONTEXT[name], _CONTEXT[name].set(value)) for name, value in values.items() if value]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class ContextFilter(logging.Filter):
    """Fills turn_id/session_id/stage from the context (an explicit ``extra=`` wins) and ``context``."""

    def filter(self, record: logging.LogRecord) -> bool:
        shown = []
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None) or _CONTEXT[name].get()
            setattr(record, name, value)
            if value:
                shown.append(f"{name.removesuffix('_id')}={value}")
        record.context = f" [{' '.join(shown)}]" if shown else ""
        return True


# logging level -> syslog priority
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


def journal_priority(levelno: int) -> int:
    for level in sorted(_PRIORITY, reverse=True):
        if levelno >= level:
            return _PRIORITY[level]
    return 7


class JournaldHandler(logging.Handler):
    """Sends each record to journald as one entry with structured fields."""

    def __init__(self, send: JournalSend | None = None, *, identifier: str = SYSLOG_IDENTIFIER) -> None:
        super().__init__()
        if send is None:
            # systemd-python; journald_available() checked it
            send = importlib.import_module("systemd.journal").send
        self._send = send
        self._identifier = identifier
        self.addFilter(ContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            fields: dict[str, Any] = {
                "PRIORITY": str(journal_priority(record.levelno)),
                "SYSLOG_IDENTIFIER": self._identifier,
                "LOGGER": record.name,
                "THREAD_NAME": record.threadName or "",
                "CODE_FILE": record.pathname,
                "CODE_LINE": record.lineno,
                "CODE_FUNC": record.funcName,
            }
            for name, field in CONTEXT_FIELDS.items():
                value = getattr(record, name, None)
                if value:
                    fields[field] = str(value)
            self._send(message, **fields)
        except Exception:
            self.handleError(record)


def journald_available(environ: dict[str, str] | None = None) -> bool:
    """True when stderr is connected to journald (systemd sets ``JOURNAL_STREAM``) and
    systemd-python is installed."""
    env = os.environ if environ is None else environ
    stream = env.get("JOURNAL_STREAM", "")
    if not stream:
        return False
    try:
        device, inode = (int(part) for part in stream.split(":"))
        stat = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    if (stat.st_dev, stat.st_ino) != (device, inode):
        return False
    try:
        journal = importlib.import_module("systemd.journal")
    except ImportError:
        return False
    return hasattr(journal, "send")


def configure_logging(level: int = logging.INFO, *, journald: bool | None = None) -> str:
    """Replace the root handlers: journald when available (or forced), else plain stderr lines.

    Returns "journald" or "plain".
    """
    use_journald = journald_available() if journald is None else journald
    handler: logging.Handler
    if use_journald:
        handler = JournaldHandler()
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.addFilter(ContextFilter())
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return "journald" if use_journald else "plain"
