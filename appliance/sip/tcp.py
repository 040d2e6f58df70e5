"""SIP over TCP: cut the byte stream into messages by Content-Length (RFC 3261 section 18.3).

Each connection hands complete messages to the server, which answers through the same connection
(responses go back to the address a request came from, and that address names the connection).
Connections are bounded, so that nobody can hold the device's file descriptors: a peer outside
``allow_from`` is closed at once, one address gets ``max_per_source`` connections, a connection with
no data for ``idle_timeout_s`` is closed, and so is one that starts a message and does not finish it
within ``message_timeout_s``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from appliance.sip.tls import (
    HANDSHAKE_TIMEOUT_S,
    SipTls,
    TlsFailed,
    check_pin,
    explain,
    presented_fingerprint,
)

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 65536
_CONTENT_LENGTH = re.compile(rb"^(?:content-length|l)[ \t]*:[ \t]*(\S*)[ \t]*$", re.IGNORECASE | re.MULTILINE)


def stream_content_length(head: bytes) -> int | None:
    """The body length a stream message announces: 0 when absent, None when unusable."""
    values = _CONTENT_LENGTH.findall(head.replace(b"\r\n", b"\n"))
    if not values:
        return 0
    if len(values) > 1 or not values[0].isdigit():
        return None
    return int(values[0])


@dataclass(frozen=True)
class TcpLimits:
    allowed: Callable[[str], bool]
    max_per_source: int = 8
    idle_timeout_s: float = 120.0
    message_timeout_s: float = 10.0


class SipTcpConnection(asyncio.Protocol):
    def __init__(
        self,
        on_message: Callable[[bytes, tuple[str, int]], None],
        connections: dict[tuple[str, int], SipTcpConnection],
        limits: TcpLimits,
    ) -> None:
        self._on_message = on_message
        self._connections = connections
        self._limits = limits
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._closing = False
        self._idle: asyncio.TimerHandle | None = None
        self._unfinished: asyncio.TimerHandle | None = None
        self.peer: tuple[str, int] = ("", 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        host, port = transport.get_extra_info("peername")[:2]
        self.peer = (str(host), int(port))
        if not self._limits.allowed(self.peer[0]):
            log.debug("SIP/TCP: refused a connection from %s:%d: not in sip.allow_from", *self.peer)
            self._transport.abort()
            return
        same_source = sum(1 for other in self._connections if other[0] == self.peer[0])
        if same_source >= self._limits.max_per_source:
            log.debug("SIP/TCP: refused a connection from %s:%d: sip.tcp_max_per_source reached", *self.peer)
            self._transport.abort()
            return
        self._connections[self.peer] = self
        self._touch()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connections.get(self.peer) is self:
            del self._connections[self.peer]
        for timer in (self._idle, self._unfinished):
            if timer is not None:
                timer.cancel()

    def _touch(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # framing driven by hand, outside a server (tests of the cutter)
            return
        if self._idle is not None:
            self._idle.cancel()
        self._idle = loop.call_later(self._limits.idle_timeout_s, self._expire, "idle")
        if self._buffer.strip(b"\r\n"):
            if self._unfinished is None:
                self._unfinished = loop.call_later(
                    self._limits.message_timeout_s, self._expire, "message not finished in time"
                )
        elif self._unfinished is not None:
            self._unfinished.cancel()
            self._unfinished = None

    def _expire(self, why: str) -> None:
        log.debug("SIP/TCP: closing the connection from %s:%d: %s", *self.peer, why)
        self.close()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        try:
            self._cut()
        finally:
            if not self._closing:
                self._touch()

    def _cut(self) -> None:
        while True:
            self._buffer = self._buffer.lstrip(b"\r\n")  # keep-alives between messages
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    self._drop("no end of header fields within 64 KiB")
                return
            length = stream_content_length(self._buffer[:end])
            if length is None:  # the stream cannot be cut any more: let the parser answer 400, then close
                self._on_message(self._buffer[: end + 4], self.peer)
                self._drop("unusable Content-Length")
                return
            total = end + 4 + length
            if total > MAX_MESSAGE_BYTES:
                self._drop(f"message of {total} bytes is over 64 KiB")
                return
            if len(self._buffer) < total:
                return
            message, self._buffer = self._buffer[:total], self._buffer[total:]
            self._on_message(message, self.peer)

    def write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    @property
    def secure(self) -> bool:
        """Over TLS (the listener on sip.tls_port, or our connection to a registrar over TLS)."""
        return self._transport is not None and self._transport.get_extra_info("ssl_object") is not None

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, unsent data and a TLS goodbye dropped (the server stopping)."""
        if self._transport is not None:
            self._transport.abort()

    def _drop(self, why: str) -> None:
        """Stop reading and close soon, so that a 400 for what was read can still be written."""
        log.info("SIP/TCP: closing the connection from %s:%d: %s", *self.peer, why)
        self._buffer = b""
        self._closing = True
        asyncio.get_running_loop().call_later(0.5, self.close)


async def connect(
    address: tuple[str, int],
    connections: dict[tuple[str, int], SipTcpConnection],
    on_message: Callable[[bytes, tuple[str, int]], None],
    limits: TcpLimits,
    *,
    tls: SipTls | None = None,
) -> None:
    """A connection of ours to ``address`` (a registrar), over TLS with ``tls``, unless one is open: kept
    in ``connections`` and read into ``on_message`` as an accepted one is."""
    existing = connections.get(address)
    if existing is not None and existing.open:
        return
    try:
        transport, _ = await asyncio.get_running_loop().create_connection(
            lambda: SipTcpConnection(on_message, connections, limits),
            *address,
            ssl=tls.client if tls is not None else None,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls is not None else None,
        )
        if tls is not None:
            check_pin(tls, transport, address)
    except (OSError, asyncio.TimeoutError) as err:
        if tls is None:
            raise
        error = (
            err
            if isinstance(err, OSError)
            else OSError(f"no TLS handshake within {HANDSHAKE_TIMEOUT_S:.0f} s")
        )
        presented = (
            await presented_fingerprint(address) if isinstance(err, ssl.SSLCertVerificationError) else ""
        )
        raise TlsFailed(explain(error, address, presented)) from err
