"""The SIP user agent server: one UDP socket, requests in, responses and BYEs out, calls managed.

Calls are limited (486 Busy Here over ``max_calls``), peers are checked against ``allow_from`` (403),
malformed messages are answered with 400 or dropped, and a call whose RTP stops for
``rtp_timeout_s`` is ended. Every datagram is handled in isolation: an error in one never reaches
another call or the daemon.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, cast

from appliance.config import SipConfig
from appliance.rtp.stream import MediaParams, RtpStream
from appliance.sip.call import HANDLER_GRACE_S, Call, CallHandler, CallState
from appliance.sip.checks import SUPPORTED_METHODS, check_request
from appliance.sip.dialog import Dialog, make_response, new_tag
from appliance.sip.headers import parse_via
from appliance.sip.indialog import InDialogMixin
from appliance.sip.invite import InviteMixin
from appliance.sip.message import SipRequest, SipResponse, SipSyntaxError, parse_message
from appliance.sip.tcp import SipTcpConnection
from appliance.sip.transactions import ResponseCache, Retransmitter, transaction_key

log = logging.getLogger(__name__)

_WATCH_INTERVAL_S = 0.25
_RESPONSE_FIELDS = ("Via", "From", "To", "Call-ID", "CSeq")


@dataclass
class ServerStats:
    datagrams: int = 0
    stream_messages: int = 0
    malformed: int = 0
    rejected: int = 0
    forbidden: int = 0
    busy: int = 0
    calls_started: int = 0
    calls_ended: int = 0
    internal_errors: int = 0


class SipServer(asyncio.DatagramProtocol, InviteMixin, InDialogMixin):
    def __init__(self, config: SipConfig, handler: CallHandler) -> None:
        self.config = config
        self.handler = handler
        self.stats = ServerStats()
        self.calls: dict[str, Call] = {}  # by local tag
        self._reserved_calls = 0
        self._allowed = [ipaddress.ip_network(net, strict=False) for net in config.allow_from]
        self._transport: asyncio.DatagramTransport | None = None
        self._cache: ResponseCache | None = None
        self._pending: dict[tuple[str, ...], Call] = {}  # INVITE transaction -> call, until answered
        self._final_retx: dict[tuple[str, ...], Retransmitter] = {}  # non-2xx INVITE responses
        self._client_retx: dict[str, Retransmitter] = {}  # our BYEs, by branch
        self._tasks: set[asyncio.Task[None]] = set()
        self._tcp_server: asyncio.AbstractServer | None = None
        self._tcp_connections: dict[tuple[str, int], SipTcpConnection] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._next_rtp_port = config.rtp_port_min
        self.local_host = config.advertise_host or config.bind_host
        self.local_port = config.port

    # --- lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._cache = ResponseCache(loop.time)
        await loop.create_datagram_endpoint(
            lambda: self, local_addr=(self.config.bind_host, self.config.port)
        )
        assert self._transport is not None
        self.local_port = int(self._transport.get_extra_info("sockname")[1])
        if self.config.tcp:
            try:
                self._tcp_server = await loop.create_server(
                    lambda: SipTcpConnection(self._on_stream_message, self._tcp_connections),
                    self.config.bind_host,
                    self.local_port,
                )
            except OSError as err:
                log.warning("SIP over TCP not available on port %d (%s); UDP only", self.local_port, err)
        self._watcher = loop.create_task(self._watch_calls(), name="sip-watch")
        log.info(
            "SIP listening on %s:%d (UDP%s, max %d calls)",
            self.config.bind_host,
            self.local_port,
            ", TCP" if self._tcp_server is not None else "",
            self.config.max_calls,
        )

    async def stop(self) -> None:
        for call in list(self.calls.values()):
            await self.end_call(call, "appliance shutting down", send_bye=True)
        if self._watcher is not None:
            self._watcher.cancel()
        for retx in [*self._final_retx.values(), *self._client_retx.values()]:
            retx.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(
            *self._tasks, *([self._watcher] if self._watcher else []), return_exceptions=True
        )
        if self._tcp_server is not None:
            self._tcp_server.close()
            for connection in list(self._tcp_connections.values()):
                connection.close()
        if self._transport is not None:
            self._transport.close()

    def contact_for(self, source: tuple[str, int]) -> str:
        """Our Contact for a peer: with ``transport=tcp`` when it talks to us over TCP."""
        tcp = ";transport=tcp" if source in self._tcp_connections else ""
        return f"<sip:appliance@{self.local_host}:{self.local_port}{tcp}>"

    # --- datagrams -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)  # selector transports do not subclass it

    def error_received(self, exc: Exception) -> None:
        log.debug("SIP socket error: %s", exc)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.stats.datagrams += 1
        self._spawn(self._handle_datagram(data, (str(addr[0]), int(addr[1]))))

    def _on_stream_message(self, data: bytes, source: tuple[str, int]) -> None:
        self.stats.stream_messages += 1
        self._spawn(self._handle_datagram(data, source))

    async def _handle_datagram(self, data: bytes, source: tuple[str, int]) -> None:
        if not data.strip(b"\r\n \t\x00"):
            return  # keep-alive
        request: SipRequest | None = None
        try:
            try:
                message = parse_message(data)
            except SipSyntaxError as err:
                self._on_malformed(err, source)
                return
            if isinstance(message, SipResponse):
                self._on_response(message)
                return
            request = message
            await self._on_request(request, source)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.internal_errors += 1
            log.exception("SIP: error handling a datagram from %s:%d", *source)
            if request is not None and request.method != "ACK":
                self._send(make_response(request, 500, source=source).to_bytes(), source)

    def _on_malformed(self, err: SipSyntaxError, source: tuple[str, int]) -> None:
        self.stats.malformed += 1
        message = err.message
        answerable = (
            isinstance(message, SipRequest)
            and message.method != "ACK"
            and all(message.get(name) for name in _RESPONSE_FIELDS)
            and self._allowed_peer(source[0])
        )
        log.info(
            "SIP: malformed message from %s:%d (%s); %s",
            *source,
            err.problem,
            "answered" if answerable else "dropped",
        )
        if answerable and message is not None:
            reason = "Version Not Supported" if err.status == 505 else f"Bad Request ({err.problem})"[:200]
            self._send(make_response(message, err.status, reason, source=source).to_bytes(), source)

    def _send(self, data: bytes, address: tuple[str, int]) -> None:
        connection = self._tcp_connections.get(address)
        if connection is not None:
            connection.write(data)
            return
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(data, address)

    def respond(
        self,
        request: SipRequest,
        source: tuple[str, int],
        status: int,
        reason: str | None = None,
        *,
        to_tag: str | None = None,
        headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> bytes:
        """Answer ``request`` to where it came from, and remember the answer for retransmissions."""
        response = make_response(
            request, status, reason, to_tag=to_tag, source=source, headers=headers, body=body
        )
        data = response.to_bytes()
        self._send(data, source)
        assert self._cache is not None
        self._cache.remember(transaction_key(request), data, source)
        return data

    # --- requests --------------------------------------------------------------------------------------
    async def _on_request(self, request: SipRequest, source: tuple[str, int]) -> None:
        if not self._allowed_peer(source[0]):
            self.stats.forbidden += 1
            log.info("SIP: %s from %s:%d refused: not in sip.allow_from", request.method, *source)
            if request.method != "ACK":
                self.respond(request, source, 403, "Forbidden (address not allowed)")
            return
        if request.method == "ACK":
            self._on_ack(request)
            return
        assert self._cache is not None
        cached = self._cache.lookup(transaction_key(request))
        if cached is not None:  # a retransmission: repeat the last response
            self._send(cached.data, source)
            return
        rejection = check_request(request)
        if rejection is not None:
            self.stats.rejected += 1
            log.info(
                "SIP: %s from %s:%d rejected: %d %s",
                request.method,
                *source,
                rejection.status,
                rejection.reason,
            )
            self.respond(request, source, rejection.status, rejection.reason, headers=rejection.headers)
            return
        if request.method == "INVITE":
            await self.on_invite(request, source)
        elif request.method == "CANCEL":
            self.on_cancel(request, source)
        elif request.method == "BYE":
            await self.on_bye(request, source)
        elif request.method == "OPTIONS":
            self.respond(request, source, 200, headers=self._capabilities(source))
        elif request.method == "INFO":
            self.on_info(request, source)

    def _capabilities(self, source: tuple[str, int]) -> list[tuple[str, str]]:
        return [
            ("Allow", ", ".join(SUPPORTED_METHODS)),
            ("Accept", "application/sdp"),
            ("Contact", self.contact_for(source)),
            ("Server", self.config.user_agent),
        ]

    def _allowed_peer(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._allowed)

    def find_call(self, request: SipRequest) -> Call | None:
        return next((call for call in self.calls.values() if call.dialog.matches(request)), None)

    def _on_ack(self, ack: SipRequest) -> None:
        retx = self._final_retx.pop(transaction_key(ack, "INVITE"), None)
        if retx is not None:  # ACK of a non-2xx final response
            retx.stop()
            return
        call = self.find_call(ack)
        if call is not None:
            self.on_dialog_ack(call, ack)

    def _on_response(self, response: SipResponse) -> None:
        hops = response.get_list("Via")
        try:
            branch = parse_via(hops[0]).branch if hops else None
        except ValueError:
            branch = None
        retx = self._client_retx.pop(branch or "", None)
        if retx is not None:
            retx.stop()
        else:
            log.debug("SIP: dropped a response (%d) that matches no request of ours", response.status)

    # --- calls -----------------------------------------------------------------------------------------
    async def end_call(self, call: Call, reason: str, *, send_bye: bool) -> None:
        if call.ended:
            return
        was = call.state
        call.mark_ended(reason)
        self.calls.pop(call.dialog.local_tag, None)
        self._pending = {key: c for key, c in self._pending.items() if c is not call}
        for retx in (call.ok_retx,):
            if retx is not None:
                retx.stop()
        current = asyncio.current_task()
        if call.answer_task is not None and call.answer_task is not current:
            call.answer_task.cancel()
        if send_bye and was in (CallState.ANSWERED, CallState.ESTABLISHED):
            self.send_bye(call)
        await call.stream.close()
        self.stats.calls_ended += 1
        log.info("call %s ended: %s (%s)", call.call_id, reason, _stream_summary(call))
        task = call.handler_task
        if task is not None and task is not current and not task.done():
            self._spawn(_cancel_after(task, HANDLER_GRACE_S))

    async def _watch_calls(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_WATCH_INTERVAL_S)
            for call in list(self.calls.values()):
                last = call.stream.last_received_s
                if call.state in (CallState.ANSWERED, CallState.ESTABLISHED) and last is not None:
                    silent_s = loop.time() - last
                    if silent_s > self.config.rtp_timeout_s:
                        self._spawn(self.end_call(call, f"no RTP for {silent_s:.1f} s", send_bye=True))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def new_call(self, invite: SipRequest, stream: RtpStream, source: tuple[str, int]) -> Call:
        dialog = Dialog.from_invite(invite, new_tag())
        call = Call(
            dialog, stream, peer=source, end=lambda c, reason, bye: self.end_call(c, reason, send_bye=bye)
        )
        call.invite = invite
        self.calls[dialog.local_tag] = call
        self.stats.calls_started += 1
        return call

    async def open_stream(self, params: MediaParams, label: str) -> RtpStream | None:
        """A stream on the next free even port of the configured range, or None if all are taken."""
        low, high = self.config.rtp_port_min + self.config.rtp_port_min % 2, self.config.rtp_port_max
        ports = list(range(low, high + 1, 2))
        start = ports.index(self._next_rtp_port) if self._next_rtp_port in ports else 0
        for port in ports[start:] + ports[:start]:
            stream = RtpStream(params, jitter_depth_packets=self.config.jitter_depth_packets, label=label)
            try:
                await stream.open(self.config.bind_host, port)
            except OSError:
                continue
            self._next_rtp_port = port + 2 if port + 2 <= high else low
            return stream
        return None


def _stream_summary(call: Call) -> str:
    s = call.stream.stats
    return f"rtp in {s.packets_received}, out {s.packets_sent}, bad {s.bad_packets}, dtmf {''.join(s.digits) or '-'}"


async def _cancel_after(task: asyncio.Task[None], grace_s: float) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(task), grace_s)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        task.cancel()
    except Exception:  # the handler's own error was logged by its runner
        pass
