"""One daemon to a turn database: a second daemon on the same ``trace.db_path`` (a technician's
`appliance run` beside the service) would prune the first one's turns as its own, without a word.
The daemon holds an exclusive lock on ``<db>.lock`` for its life, with its process id in it; a second
one is refused with the holder's id. Readers (`python -m appliance.trace`, `appliance talk`) take
no lock."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path


class TurnDatabaseInUse(RuntimeError):
    """Another process holds the turn database; the message names it and the fix."""


_held: dict[Path, tuple[int, int]] = {}  # lock file -> (descriptor, holders in this process)
_guard = threading.Lock()


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


def claim(db_path: Path) -> Path:
    """Hold ``db_path``'s lock (again, within this process: a daemon that reloads keeps it). Raises
    TurnDatabaseInUse naming the process that holds it."""
    path = lock_path(db_path).absolute()
    with _guard:
        if path in _held:
            descriptor, holders = _held[path]
            _held[path] = (descriptor, holders + 1)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(descriptor)
            raise TurnDatabaseInUse(
                f"the turn database {db_path} is in use by another appliance daemon (process {holder}); "
                "stop that one (systemctl stop appliance), or give this one its own trace.db_path"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        _held[path] = (descriptor, 1)
        return path


def release(path: Path) -> None:
    """Let go of a lock ``claim`` returned (the last holder in this process unlocks it)."""
    with _guard:
        if path not in _held:
            return
        descriptor, holders = _held[path]
        if holders > 1:
            _held[path] = (descriptor, holders - 1)
            return
        del _held[path]
        os.close(descriptor)  # closing the descriptor releases the flock
