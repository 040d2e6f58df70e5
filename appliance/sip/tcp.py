"""SIP over TCP: cut the byte stream into messages by Content-Length (RFC 3261 section 18.3).

Each connection hands complete messages to the server, which answers through the same connection
(responses go back to the address a request came from, and that address names the connection).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import cast

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


class SipTcpConnection(asyncio.Protocol):
    def __init__(
        self,
        on_message: Callable[[bytes, tuple[str, int]], None],
        connections: dict[tuple[str, int], SipTcpConnection],
    ) -> None:
        self._on_message = on_message
        self._connections = connections
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._closing = False
        self.peer: tuple[str, int] = ("", 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        host, port = transport.get_extra_info("peername")[:2]
        self.peer = (str(host), int(port))
        self._connections[self.peer] = self

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.pop(self.peer, None)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
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
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _drop(self, why: str) -> None:
        """Stop reading and close soon, so that a 400 for what was read can still be written."""
        log.info("SIP/TCP: closing the connection from %s:%d: %s", *self.peer, why)
        self._buffer = b""
        self._closing = True
        asyncio.get_running_loop().call_later(0.5, self.close)
