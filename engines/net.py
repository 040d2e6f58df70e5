"""Which hosts the device may reach: the air gap's exceptions are named hosts and networks only."""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """``host`` is listed by name (case-insensitive), or is an address inside a listed network."""
    host = host.lower().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in allowed:
        entry = entry.lower().strip()
        if entry == host:
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def is_private_address(address: str) -> bool:
    """A loopback, link-local or private (RFC 1918, ULA) address: one on the site's own network."""
    ip = ipaddress.ip_address(address)
    return ip.is_private or ip.is_loopback or ip.is_link_local


# --- the name-lookup guard ------------------------------------------------------------------------
# The daemon resolves no names except where a technician allowed a host (the site LLM server, the
# http tool). Python's resolver calls are wrapped: an IP literal passes (no query is made for one),
# a name passes only inside ``name_lookup_allowed(host)``, anything else raises ``NameLookupRefused``.
# A lookup blocks its thread for up to the resolver's timeout, so one on the event loop would stall
# every call; refusing it also keeps the device from sending DNS queries.

_allowed_names: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "allowed_names", default=frozenset()
)
_RESOLVERS = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo")
# A socket given a (name, port) address resolves it in C, past the functions above.
_ADDRESSED = ("connect", "connect_ex", "sendto")
# Answered from /etc/hosts, never by a DNS server.
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class NameLookupRefused(OSError):
    """A host name was to be resolved outside the two places that may (``name_lookup_allowed``)."""


@contextlib.contextmanager
def name_lookup_allowed(host: str) -> Iterator[None]:
    """Let this thread (or task) resolve ``host``, a name the settings allowed, while inside."""
    token = _allowed_names.set(_allowed_names.get() | {host.lower().rstrip(".")})
    try:
        yield
    finally:
        _allowed_names.reset(token)


def is_ip_literal(host: str) -> bool:
    """``host`` is an IP address (IPv6 with a scope id too; without the brackets of a URI), not a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class NameLookupGuard:
    """Installed for the daemon's life (``install``/``uninstall``); ``refused`` holds the names it
    stopped, and ``on_refused(host, caller)`` is told of each."""

    def __init__(self, on_refused: Callable[[str, str], None]) -> None:
        self.on_refused = on_refused
        self.refused: list[str] = []
        self._originals: dict[str, Callable[..., Any]] = {}

    def install(self) -> None:
        if self._originals:
            return
        for name in _RESOLVERS:
            original = getattr(socket, name)
            self._originals[name] = original
            setattr(socket, name, self._wrap(name, original))
        for name in _ADDRESSED:
            method = getattr(socket.socket, name)
            self._originals["socket." + name] = method
            setattr(socket.socket, name, self._wrap_method(name, method))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            if name.startswith("socket."):
                setattr(socket.socket, name.removeprefix("socket."), original)
            else:
                setattr(socket, name, original)
        self._originals.clear()

    def _check(self, host: str, what: str) -> None:
        name = host.lower().rstrip(".")
        if name in ("", "<broadcast>"):
            return
        if not is_ip_literal(host) and name not in _LOCAL_NAMES and name not in _allowed_names.get():
            self._refuse(host, what)

    def _wrap_method(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(sock: socket.socket, *args: Any) -> Any:
            address = args[-1]
            if isinstance(address, tuple) and address and isinstance(address[0], str):
                self._check(address[0], f"socket.{name}")
            return method(sock, *args)

        guarded.__wrapped__ = method  # type: ignore[attr-defined]
        return guarded

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
            if name in ("gethostbyaddr", "getnameinfo"):
                # Reverse lookups always ask the resolver; they have no allow-listed use.
                target = str(host[0] if isinstance(host, tuple) else host)
                self._refuse(target, name)
            if host is not None:
                self._check(host.decode("idna") if isinstance(host, bytes) else str(host), name)
            return original(host, *args, **kwargs)

        guarded.__wrapped__ = original  # type: ignore[attr-defined]
        return guarded

    def _refuse(self, host: str, what: str) -> None:
        if len(self.refused) < 1000:
            self.refused.append(host)
        caller = _caller()
        self.on_refused(host, f"{what} from {caller}")
        raise NameLookupRefused(
            f"resolving {host!r} refused: this device looks up no names outside the hosts a technician "
            "allowed (llm_server.allowed_hosts, agent.allowed_hosts); use an IP address"
        )


def _caller() -> str:
    """The first frame outside this module and the socket module: who asked for the lookup."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, socket.__file__):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "?"
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
