"""What a configuration change needs from the machine, checked before it is written: the bundle folder
it names holds a bundle, the trace database's folder is writable, and a listener moved to another
address or port can bind there. The schema and the bundle's models are checked elsewhere
(``config_file.validate_file_data``); these are the machine's facts that would stop the next start."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from appliance.config import ConfigProblem, Settings


def placement_problems(new: Settings, running: Settings) -> list[ConfigProblem]:
    return [*_folder_problems(new, running), *_listener_problems(new, running)]


def _folder_problems(new: Settings, running: Settings) -> list[ConfigProblem]:
    problems = []
    bundle = new.bundle.dir
    if bundle != running.bundle.dir and not (bundle / "manifest.json").is_file():
        problems.append(
            ConfigProblem(
                "bundle.dir",
                f"{bundle} holds no engine bundle (no manifest.json); build one there first "
                f"(python -m build_scripts bundle --out {bundle}) or keep {running.bundle.dir}",
                str(bundle),
            )
        )
    db_path = new.trace.db_path
    if db_path != running.trace.db_path and not _can_create_in(db_path.parent):
        problems.append(
            ConfigProblem(
                "trace.db_path",
                f"{db_path.parent} cannot be written by this service; choose a folder it may write",
                str(db_path),
            )
        )
    return problems


def _can_create_in(folder: Path) -> bool:
    """True when ``folder`` exists and is writable, or its nearest existing parent is."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


def _listener_problems(new: Settings, running: Settings) -> list[ConfigProblem]:
    """A listener moved to another address: it must bind there (its current one is the daemon's own)."""
    wanted = []
    if new.sip.enabled and new.sip.port and (new.sip.bind_host, new.sip.port) != _sip(running):
        wanted.append(("sip.port", new.sip.bind_host, new.sip.port, socket.SOCK_DGRAM))
        if new.sip.tcp:
            wanted.append(("sip.port", new.sip.bind_host, new.sip.port, socket.SOCK_STREAM))
    if new.admin.enabled and (new.admin.bind_host, new.admin.port) != (
        running.admin.bind_host,
        running.admin.port,
    ):
        wanted.append(("admin.port", new.admin.bind_host, new.admin.port, socket.SOCK_STREAM))
    problems = []
    for key, host, port, kind in wanted:
        why = _bind_error(host, port, kind)
        if why is not None:
            protocol = "UDP" if kind == socket.SOCK_DGRAM else "TCP"
            problems.append(ConfigProblem(key, f"{protocol} {host}:{port} cannot be used: {why}", port))
    return problems


def _sip(settings: Settings) -> tuple[str, int] | None:
    return (settings.sip.bind_host, settings.sip.port) if settings.sip.enabled else None


def _bind_error(host: str, port: int, kind: int) -> str | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, kind) as probe:
            if kind == socket.SOCK_STREAM:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
            probe.bind((host, port))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            return "another program already listens there (choose a free port, or stop that program)"
        if err.errno == errno.EADDRNOTAVAIL:
            return "this machine has no such address (use one of its own, or 0.0.0.0)"
        if err.errno == errno.EACCES:
            return "ports below 1024 need a privilege this service does not have (choose 1024 or above)"
        return str(err)
    return None
