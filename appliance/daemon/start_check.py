"""Whether a configuration can start on this machine: one answer for the admin page's write,
`appliance config check` and the daemon's own start.

A configuration that passes the schema can still stop the next start: a model the bundle lacks, a
trace database that is a folder, two listeners on one port, a microphone that is not there. Each such
fact becomes a ``ConfigProblem`` naming the key and the fix. Problems of the local audio devices are
kept apart (``StartCheck.audio``): the daemon starts without its local session then, with SIP and
the admin page up; any other problem stops the start, and the daemon falls back to the last
configuration that started.

``running``: the settings of the daemon that is running now (the admin write): the ports it holds
are its own, and the accounts it has are not given up by a change of file.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from appliance.config import ConfigProblem, Settings

SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class StartCheck:
    problems: list[ConfigProblem] = field(default_factory=list)  # the daemon cannot start with these
    audio: list[ConfigProblem] = field(default_factory=list)  # ... it starts without its local session

    @property
    def all(self) -> list[ConfigProblem]:
        return [*self.problems, *self.audio]


def check_start(
    settings: Settings,
    *,
    config_path: Path | None = None,
    running: Settings | None = None,
    probe_audio: bool = True,
    ports_free: bool = True,
) -> StartCheck:
    """``ports_free`` False: listeners are checked for clashes only (`appliance config check`, run
    while the daemon may hold its own ports)."""
    from appliance.daemon.start_problems import startup_problems

    problems = [
        *startup_problems(settings),
        *_trace_problems(settings, config_path),
        *_listener_problems(settings, running, ports_free=ports_free),
        *_account_problems(settings, running),
    ]
    return StartCheck(problems, _audio_problems(settings) if probe_audio else [])


# --- files ------------------------------------------------------------------------------------------
def _trace_problems(settings: Settings, config_path: Path | None) -> list[ConfigProblem]:
    db_path = settings.trace.db_path
    key, value = "trace.db_path", str(db_path)
    others = {
        "the configuration file": config_path,
        "admin.users_file": settings.admin.users_file,
        "admin.password_file": settings.admin.password_file,
    }
    for what, path in others.items():
        if path is not None and _same_file(db_path, path):
            return [
                ConfigProblem(key, f"{db_path} is {what}; give the turn database a file of its own", value)
            ]
    if db_path.exists():
        if not db_path.is_file():
            return [ConfigProblem(key, f"{db_path} is a folder, not a file; name a file inside it", value)]
        if not os.access(db_path, os.R_OK | os.W_OK):
            return [ConfigProblem(key, f"{db_path} cannot be written by this service; fix its owner", value)]
        if db_path.stat().st_size and not _starts_with(db_path, SQLITE_HEADER):
            return [
                ConfigProblem(
                    key,
                    f"{db_path} holds something other than a turn database; choose a new file name",
                    value,
                )
            ]
        return []
    if not _can_create_in(db_path.parent):
        return [
            ConfigProblem(
                key,
                f"{db_path.parent} cannot be written by this service; choose a folder it may write",
                value,
            )
        ]
    return []


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _starts_with(path: Path, header: bytes) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(header)) == header
    except OSError:
        return False


def _can_create_in(folder: Path) -> bool:
    """True when a file can be made in ``folder``, or in its nearest existing parent (tried, not read
    from the mode bits: root passes every access() check, yet cannot write /proc or a read-only mount)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            if not candidate.is_dir():
                return False
            try:
                with tempfile.TemporaryFile(dir=candidate):
                    return True
            except OSError:
                return False
    return False


def _account_problems(settings: Settings, running: Settings | None) -> list[ConfigProblem]:
    """A change of accounts file that leaves nobody able to log in. (A device with no account yet
    starts: the page then says how to create one on the device.)"""
    from appliance.admin.users import UserDirectory, UserFileError

    admin = settings.admin
    if not admin.enabled or running is None or not running.admin.enabled:
        return []
    if (admin.users_file, admin.password_file) == (running.admin.users_file, running.admin.password_file):
        return []

    def accounts(users_file: Path, password_file: Path) -> int | str:
        try:
            return len(UserDirectory(users_file, password_file).users())
        except UserFileError as err:
            return str(err)

    now, new = (
        accounts(running.admin.users_file, running.admin.password_file),
        accounts(admin.users_file, admin.password_file),
    )
    if isinstance(new, str):
        return [ConfigProblem("admin.users_file", f"cannot be read: {new}", str(admin.users_file))]
    if new == 0 and now != 0:
        return [
            ConfigProblem(
                "admin.users_file",
                f"{admin.users_file} holds no account (and admin.password_file none either): nobody could "
                "log in; create one first (appliance admin passwd --user NAME --role admin) or keep "
                f"{running.admin.users_file}",
                str(admin.users_file),
            )
        ]
    return []


# --- listeners --------------------------------------------------------------------------------------
def _listener_problems(
    settings: Settings, running: Settings | None, *, ports_free: bool
) -> list[ConfigProblem]:
    """Each listener asked for must bind, and no two on one address: the SIP port (UDP, and TCP when
    ``sip.tcp``), SIP over TLS and the admin page (TCP). A listener the running daemon holds already is
    its own."""
    wanted: list[tuple[str, str, int, int]] = []
    if settings.sip.enabled and settings.sip.port:
        wanted.append(("sip.port", settings.sip.bind_host, settings.sip.port, socket.SOCK_DGRAM))
        if settings.sip.tcp:
            wanted.append(("sip.port", settings.sip.bind_host, settings.sip.port, socket.SOCK_STREAM))
    if settings.sip.enabled and settings.sip.tls_listening and settings.sip.tls_port:
        wanted.append(("sip.tls_port", settings.sip.bind_host, settings.sip.tls_port, socket.SOCK_STREAM))
    if settings.admin.enabled:
        wanted.append(("admin.port", settings.admin.bind_host, settings.admin.port, socket.SOCK_STREAM))
    problems = []
    for index, (key, host, port, kind) in enumerate(wanted):
        protocol = "UDP" if kind == socket.SOCK_DGRAM else "TCP"
        clash = next(
            (k for k, h, p, t in wanted[:index] if t == kind and p == port and _overlap(h, host)), None
        )
        if clash is not None and clash != key:
            problems.append(
                ConfigProblem(
                    key, f"{protocol} port {port} is {clash} too; give each listener its own port", port
                )
            )
            continue
        if not ports_free or (running is not None and _holds(running, key, host, port, kind)):
            continue
        why = _bind_error(host, port, kind)
        if why is not None:
            problems.append(ConfigProblem(key, f"{protocol} {host}:{port} cannot be used: {why}", port))
    return problems


def _overlap(a: str, b: str) -> bool:
    return a == b or a in ("0.0.0.0", "::") or b in ("0.0.0.0", "::")


def _holds(running: Settings, key: str, host: str, port: int, kind: int) -> bool:
    if key == "sip.port":
        sip = running.sip
        return (
            sip.enabled
            and (sip.bind_host, sip.port) == (host, port)
            and (kind == socket.SOCK_DGRAM or sip.tcp)
        )
    if key == "sip.tls_port":
        sip = running.sip
        return sip.enabled and sip.tls_listening and (sip.bind_host, sip.tls_port) == (host, port)
    admin = running.admin
    return admin.enabled and (admin.bind_host, admin.port) == (host, port)


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
        if isinstance(err, socket.gaierror) or err.errno in (errno.EINVAL, errno.EAFNOSUPPORT):
            return f"{host!r} is not an address of this machine (use an IP address such as 0.0.0.0)"
        return str(err)
    return None


# --- audio ------------------------------------------------------------------------------------------
def _audio_problems(settings: Settings) -> list[ConfigProblem]:
    from appliance.audio.devices import probe_device

    audio = settings.audio
    problems = []
    for kind, mode, device, key, needed in (
        ("input", audio.input, audio.input_device, "audio.input", "microphone"),
        ("output", audio.output, audio.output_device, "audio.output", "speaker"),
    ):
        if mode != needed:
            continue  # "auto" takes a device when there is one: none there is a normal case (the demo turn)
        probe = probe_device(kind, device)
        if probe.available:
            continue
        named = f"audio.{kind}_device" if device is not None else key
        problems.append(
            ConfigProblem(
                named,
                f"no {needed} here: {probe.reason} (connect one and name it by its sounddevice name or "
                f"index, `python -m sounddevice` lists them; or set {key} = 'auto' or 'none')",
                device if device is not None else mode,
            )
        )
    return problems
