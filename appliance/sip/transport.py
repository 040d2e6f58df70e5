"""How the SIP server talks: one UDP socket and the TCP connections beside it, the response cache
that answers retransmitted requests, and the appliance's own Contact.

The INVITE flow and the in-dialog flow are given one ``SipTransport`` and never see the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from appliance.sip.call import Call
from appliance.sip.dialog import make_response
from appliance.sip.message import SipRequest
from appliance.sip.tcp import SipTcpConnection
from appliance.sip.transactions import ResponseCache, transaction_key

Address = tuple[str, int]
Headers = tuple[tuple[str, str], ...] | list[tuple[str, str]]
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class EndCall(Protocol):
    def __call__(self, call: Call, reason: str, *, send_bye: bool) -> Coroutine[Any, Any, None]: ...


class SipTransport:
    def __init__(self, local_host: str, local_port: int) -> None:
        self.local_host = local_host
        self.local_port = local_port
        self.tls_port: int | None = None  # the TLS listener's, once it listens
        self.udp: asyncio.DatagramTransport | None = None
        self.tcp: dict[Address, SipTcpConnection] = {}
        self.cache: ResponseCache | None = None  # made on start, with the event loop's clock

    def over_tcp(self, address: Address) -> bool:
        """Over a connection (TCP or TLS) rather than UDP."""
        return address in self.tcp

    def secure(self, address: Address) -> bool:
        connection = self.tcp.get(address)
        return connection is not None and connection.secure

    def via(self, address: Address) -> tuple[str, int]:
        """The transport and port our Via names towards ``address``."""
        if self.secure(address) and self.tls_port is not None:
            return "TLS", self.tls_port
        return ("TCP" if self.over_tcp(address) else "UDP"), self.local_port

    def send(self, data: bytes, address: Address) -> None:
        connection = self.tcp.get(address)
        if connection is not None:
            connection.write(data)
            return
        if self.udp is not None and not self.udp.is_closing():
            self.udp.sendto(data, address)

    def contact_for(self, source: Address) -> str:
        """Our Contact for a peer: with ``transport=tcp`` or ``tls`` as it talks to us."""
        name, port = self.via(source)
        param = "" if name == "UDP" else f";transport={name.lower()}"
        return f"<sip:appliance@{self.local_host}:{port}{param}>"

    def remember(self, request: SipRequest, data: bytes, source: Address) -> None:
        """Keep ``data`` as the answer to ``request``, for its retransmissions."""
        if self.cache is not None:
            self.cache.remember(transaction_key(request), data, source)

    def cached_answer(self, request: SipRequest) -> bytes | None:
        entry = self.cache.lookup(transaction_key(request)) if self.cache is not None else None
        return None if entry is None else entry.data

    def respond(
        self,
        request: SipRequest,
        source: Address,
        status: int,
        reason: str | None = None,
        *,
        to_tag: str | None = None,
        headers: Headers = (),
        body: bytes = b"",
    ) -> bytes:
        """Answer ``request`` to where it came from, and remember the answer for retransmissions."""
        response = make_response(
            request, status, reason, to_tag=to_tag, source=source, headers=headers, body=body
        )
        data = response.to_bytes()
        self.send(data, source)
        self.remember(request, data, source)
        return data
