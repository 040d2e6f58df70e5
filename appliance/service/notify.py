"""sd_notify(3): tell systemd the daemon is ready, alive, what it is doing, and that it is stopping.

systemd-python's ``systemd.daemon.notify`` is used when it is installed; otherwise a datagram
socket speaks the same protocol to ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract
namespace). Outside systemd there is no ``$NOTIFY_SOCKET`` and every call is a no-op returning False.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
# A STATUS= line longer than this is cut: systemctl status shows one line.
MAX_STATUS_CHARS = 200

Sender = Callable[[str], bool]


def _systemd_sender() -> Sender | None:
    try:
        # By name: the checkout's own systemd/ folder (unit files) would shadow the package for mypy.
        daemon = importlib.import_module("systemd.daemon")  # systemd-python (optional)
    except ImportError:
        return None
    send = getattr(daemon, "notify", None)
    if send is None:  # a namespace package named systemd without the C module
        return None

    def sender(message: str) -> bool:
        return bool(send(message))

    return sender


def socket_send(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """The notify protocol without libsystemd: one datagram of ``KEY=VALUE`` lines."""
    env = os.environ if environ is None else environ
    address = env.get(NOTIFY_SOCKET_ENV, "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    elif not address.startswith("/"):
        log.warning("ignoring %s=%r: not a socket path", NOTIFY_SOCKET_ENV, address)
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
        except OSError as err:
            log.warning("cannot notify systemd at %s: %s", env.get(NOTIFY_SOCKET_ENV), err)
            return False
    return True


@dataclass(frozen=True)
class WatchdogSettings:
    interval_s: float  # systemd restarts the service when no ping arrives within this time

    @property
    def ping_every_s(self) -> float:
        return self.interval_s / 2  # what sd_watchdog_enabled(3) recommends


def watchdog_settings(environ: Mapping[str, str] | None = None) -> WatchdogSettings | None:
    """``WatchdogSec=`` as systemd passes it (``WATCHDOG_USEC``, ``WATCHDOG_PID``); None if off."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (e.g. our parent)
    try:
        interval_s = int(usec) / 1e6
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    return WatchdogSettings(interval_s) if interval_s > 0 else None


class Notifier:
    """Sends service state to systemd; safe to call anywhere, never raises."""

    def __init__(self, sender: Sender | None = None, *, prefer_systemd: bool = True) -> None:
        chosen = sender or (_systemd_sender() if prefer_systemd else None)
        self.backend = "custom" if sender else ("systemd-python" if chosen else "socket")
        self._send: Sender = chosen or socket_send

    @property
    def enabled(self) -> bool:
        return bool(os.environ.get(NOTIFY_SOCKET_ENV))

    def send(self, message: str) -> bool:
        try:
            return self._send(message)
        except Exception as err:  # a notify failure must never take the daemon down
            log.warning("sd_notify failed: %s", err)
            return False

    def ready(self, status: str | None = None) -> bool:
        return self.send(_with_status("READY=1", status))

    def status(self, text: str) -> bool:
        return self.send(_with_status("", text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        return self.send(_with_status("STOPPING=1", status))

    def failed(self, reason: str, errno: int | None = None) -> bool:
        head = f"ERRNO={errno}" if errno is not None else ""
        return self.send(_with_status(head, f"failed: {reason}"))


def _with_status(head: str, status: str | None) -> str:
    lines = [head] if head else []
    if status:
        one_line = " ".join(status.split())
        lines.append("STATUS=" + one_line[:MAX_STATUS_CHARS])
    return "\n".join(lines)
