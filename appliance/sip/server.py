"""The SIP user agent server: one UDP socket, requests in, responses and BYEs out, calls managed.

Calls are limited (over ``max_calls``: 503 with Retry-After, or 486 Busy Here), peers are checked against ``allow_from`` (403),
malformed messages are answered with 400 or dropped, and a call whose RTP stops for
``rtp_timeout_s`` is ended. Every datagram is handled in isolation: an error in one never reaches
another call or the daemon.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Coroutine
from typing import Any, cast

from appliance.ratelog import ThrottledLog
from appliance.rtp.stream import MediaParams, RtpStream
from appliance.sip import tcp
from appliance.sip.call import HANDLER_GRACE_S, Call, CallAudio, CallHandler, CallState
from appliance.sip.calls import CallTable
from appliance.sip.checks import SUPPORTED_METHODS, check_request
from appliance.sip.dialog import make_response
from appliance.sip.digest import ExtensionSecret
from appliance.sip.indialog import DialogFlow
from appliance.sip.invite import InviteFlow
from appliance.sip.labels import Availability
from appliance.sip.message import SipRequest, SipResponse, SipSyntaxError, parse_message
from appliance.sip.params import SipParams
from appliance.sip.register import Registration, read_password
from appliance.sip.stats import ServerStats
from appliance.sip.tcp import SipTcpConnection, TcpLimits
from appliance.sip.tls import SipTls, TlsFailed, sip_tls
from appliance.sip.tls_accept import listen_tls
from appliance.sip.transactions import ResponseCache
from appliance.sip.transport import Address, SipTransport

__all__ = ["ServerStats", "SipServer"]

log = logging.getLogger(__name__)

_WATCH_INTERVAL_S = 0.25
KEEPALIVE_MAX_S = 30.0
_RESPONSE_FIELDS = ("Via", "From", "To", "Call-ID", "CSeq")


class SipServer(asyncio.DatagramProtocol):
    """The socket side and the call lifecycle; INVITEs go to ``InviteFlow``, requests inside a call
    and responses to ours to ``DialogFlow``, both over one ``SipTransport``."""

    def __init__(
        self, config: SipParams, handler: CallHandler, *, accepting: bool = True, tls: SipTls | None = None
    ) -> None:
        """``accepting`` False: every INVITE and OPTIONS gets 503 with Retry-After (the engines are
        still loading: a proxy sends the calls elsewhere meanwhile). ``tls``: SIP over TLS's contexts
        (``sip.tls.sip_tls``; made here from the settings when they ask for TLS and none is given)."""
        self.config = config
        self.tls = tls if tls is not None or not config.tls_listening else sip_tls(config)
        self._tls_server: asyncio.Server | None = None
        self.accepting = accepting
        self.stats = ServerStats()
        self._noisy = ThrottledLog(log)  # what the network can make happen thousands of times a second
        self._allowed = [ipaddress.ip_network(net, strict=False) for net in config.allow_from]
        if config.registrar:  # the site's phone system sends the extension's calls from there
            self._allowed.append(ipaddress.ip_network(config.registrar_address[0]))
        self.registration: Registration | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._tcp_server: asyncio.AbstractServer | None = None
        self._tcp_limits: TcpLimits | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._next_rtp_port = config.rtp_port_min
        self.transport = SipTransport(config.advertise_host or config.bind_host, config.port)
        self.table = CallTable(self.end_call)
        self.invites = InviteFlow(
            config,
            self.stats,
            self.transport,
            self.table,
            handler=self._with_transfer(handler),
            open_stream=self.open_stream,
            end_call=self.end_call,
            spawn=self._spawn,
            noisy=self._noisy,
            accepting=lambda: self.accepting,
        )
        self.dialogs = DialogFlow(
            self.transport,
            self.table,
            user_agent=config.user_agent,
            fail_invite=self.invites.send_final_failure,
            end_call=self.end_call,
            spawn=self._spawn,
            t1_s=config.t1_s,
            credentials=self._extension_credentials,
        )

    def _extension_credentials(self) -> ExtensionSecret | None:
        """The registered extension's digest user and password, for the PBX when it challenges a REFER."""
        registration = self.registration
        if registration is None or registration.password is None:
            return None
        return ExtensionSecret(
            registration.auth_user, registration.password, registration.registrar, registration.realm
        )

    def _with_transfer(self, handler: CallHandler) -> CallHandler:
        """``handler``, given calls that can be transferred with this server's REFER."""

        async def run(call: CallAudio) -> None:
            if isinstance(call, Call):
                call.transferring = self.dialogs.send_refer
            await handler(call)

        return run

    @property
    def calls(self) -> dict[str, Call]:
        return self.table.calls

    @property
    def tcp_listening(self) -> bool:
        return self._tcp_server is not None

    @property
    def local_port(self) -> int:
        return self.transport.local_port

    # --- lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport.cache = ResponseCache(loop.time)
        await loop.create_datagram_endpoint(
            lambda: self, local_addr=(self.config.bind_host, self.config.port)
        )
        assert self.transport.udp is not None
        self.transport.local_port = int(self.transport.udp.get_extra_info("sockname")[1])
        limits = self._tcp_limits = TcpLimits(
            allowed=self._allowed_peer,
            max_per_source=self.config.tcp_max_per_source,
            idle_timeout_s=self.config.tcp_idle_timeout_s,
            message_timeout_s=self.config.tcp_message_timeout_s,
        )
        if self.config.tcp:
            try:
                self._tcp_server = await loop.create_server(
                    lambda: SipTcpConnection(self._on_stream_message, self.transport.tcp, limits),
                    self.config.bind_host,
                    self.local_port,
                )
            except OSError as err:
                log.warning("SIP over TCP not available on port %d (%s); UDP only", self.local_port, err)
        await self._listen_tls(limits)
        self._watcher = loop.create_task(self._watch_calls(), name="sip-watch")
        if self.config.registrar and self.accepting:
            self._start_registration()
        log.info(
            "SIP listening on %s:%d (UDP%s, max %d calls)%s",
            self.config.bind_host,
            self.local_port,
            ", TCP" if self._tcp_server is not None else "",
            self.config.max_calls,
            f", TLS on {self.transport.tls_port} ({self.tls.fingerprint})"
            if self._tls_server and self.tls
            else "",
        )

    async def _listen_tls(self, limits: TcpLimits) -> None:
        if self.tls is None:
            return
        self._tls_server = await listen_tls(
            self.tls,
            self.config,
            limits,
            lambda: SipTcpConnection(self._on_stream_message, self.transport.tcp, limits),
            self._on_tls_refused,
        )
        if self._tls_server is not None:
            self.transport.tls_port = int(self._tls_server.sockets[0].getsockname()[1])

    def _on_tls_refused(self, why: str) -> None:
        self.stats.tls_failed_incoming += 1
        self._noisy.log(logging.WARNING, "tls-incoming", "SIP: %s", why)

    @property
    def tls_port(self) -> int | None:
        return self.transport.tls_port

    def _start_registration(self) -> None:
        try:
            password = read_password(self.config.register_password_file)
        except OSError as err:
            password = None
            log.error("SIP: cannot read sip.register_password_file: %s", err)
        over_tls = self.config.register_transport == "tls"
        port = self.transport.tls_port if over_tls and self.transport.tls_port else self.local_port
        self.registration = Registration(
            self.config, self.transport.send, port, password, connect=self._connect, connected=self._connected
        )
        self.registration.start()

    async def _connect(self, address: Address) -> None:
        """A TCP connection to ``address`` (the registrar), unless one is open; what it brings is read as
        what comes on the listener's connections."""
        assert self._tcp_limits is not None, "connect() before start()"
        tls = self.tls if self.config.register_transport == "tls" else None
        try:
            await tcp.connect(address, self.transport.tcp, self._on_stream_message, self._tcp_limits, tls=tls)
        except TlsFailed as err:
            self.stats.tls_failed += 1
            self._noisy.log(logging.ERROR, "tls", "SIP: %s", err)
            raise

    def _connected(self, address: Address) -> bool:
        connection = self.transport.tcp.get(address)
        return connection is not None and connection.open

    async def stop(self) -> None:
        # The calls' sessions stop first, while the rest of the daemon (the trace store) is still
        # there: a reply cut by the shutdown is stored as such. Then each caller gets a BYE.
        handlers = [
            c.handler_task
            for c in self.calls.values()
            if c.handler_task is not None and not c.handler_task.done()
        ]
        for task in handlers:
            task.cancel()
        if handlers:
            await asyncio.wait(handlers, timeout=HANDLER_GRACE_S)
        for call in list(self.calls.values()):
            await self.end_call(call, "appliance shutting down", send_bye=True)
        if self._watcher is not None:
            self._watcher.cancel()
        self.invites.stop()
        self.dialogs.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(
            *self._tasks, *([self._watcher] if self._watcher else []), return_exceptions=True
        )
        if self.registration is not None:
            await self.registration.stop()
        for listener in (self._tcp_server, self._tls_server):
            if listener is not None:
                listener.close()
        for connection in list(self.transport.tcp.values()):
            connection.abort()
        await asyncio.sleep(0)  # their sockets close on the loop's next turn
        if self.transport.udp is not None:
            self.transport.udp.close()

    # --- datagrams -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport.udp = cast(
            asyncio.DatagramTransport, transport
        )  # selector transports do not subclass it

    def error_received(self, exc: Exception) -> None:
        log.debug("SIP socket error: %s", exc)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.stats.datagrams += 1
        self._spawn(self._handle_datagram(data, (str(addr[0]), int(addr[1]))))

    def _on_stream_message(self, data: bytes, source: Address) -> None:
        self.stats.stream_messages += 1
        self._spawn(self._handle_datagram(data, source))

    async def _handle_datagram(self, data: bytes, source: Address) -> None:
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
                if self.registration is None or not self.registration.on_response(message):
                    self.dialogs.on_response(message, source)
                return
            request = message
            await self._on_request(request, source)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.internal_errors += 1
            log.exception("SIP: error handling a datagram from %s:%d", *source)
            if request is not None and request.method != "ACK":
                self.transport.send(make_response(request, 500, source=source).to_bytes(), source)

    def _on_malformed(self, err: SipSyntaxError, source: Address) -> None:
        self.stats.malformed += 1
        message = err.message
        answerable = (
            isinstance(message, SipRequest)
            and message.method != "ACK"
            and all(message.get(name) for name in _RESPONSE_FIELDS)
            and self._allowed_peer(source[0])
        )
        self._noisy.info(
            "malformed",
            "SIP: malformed message from %s:%d (%s); %s",
            *source,
            err.problem,
            "answered" if answerable else "dropped",
        )
        if answerable and message is not None:
            reason = "Version Not Supported" if err.status == 505 else f"Bad Request ({err.problem})"[:200]
            self.transport.send(make_response(message, err.status, reason, source=source).to_bytes(), source)

    # --- requests --------------------------------------------------------------------------------------
    async def _on_request(self, request: SipRequest, source: Address) -> None:
        if not self._allowed_peer(source[0]):
            self.stats.forbidden += 1
            self._noisy.info(
                "forbidden", "SIP: %s from %s:%d refused: not in sip.allow_from", request.method, *source
            )
            if request.method != "ACK":
                self.transport.respond(request, source, 403, "Forbidden (address not allowed)")
            return
        if request.method == "ACK":
            self._on_ack(request)
            return
        cached = self.transport.cached_answer(request)
        if cached is not None:  # a retransmission: repeat the last response
            self.transport.send(cached, source)
            return
        rejection = check_request(request, secure=self.transport.secure(source))
        if rejection is not None:
            self.stats.rejected += 1
            self._noisy.info(
                "rejected",
                "SIP: %s from %s:%d rejected: %d %s",
                request.method,
                *source,
                rejection.status,
                rejection.reason,
            )
            self.transport.respond(
                request, source, rejection.status, rejection.reason, headers=rejection.headers
            )
            return
        if request.method == "INVITE":
            await self.invites.on_invite(request, source)
        elif request.method == "CANCEL":
            self.dialogs.on_cancel(request, source)
        elif request.method == "BYE":
            await self.dialogs.on_bye(request, source)
        elif request.method == "OPTIONS":
            self._answer_options(request, source)
        elif request.method == "INFO":
            self.dialogs.on_info(request, source)
        elif request.method == "NOTIFY":
            self.dialogs.on_notify(request, source)

    def _answer_options(self, request: SipRequest, source: Address) -> None:
        """A proxy's keepalive probe: 200 while a call can be taken, 503 with Retry-After when full or
        still loading, so that a dispatcher sends the next call elsewhere; the state either way."""
        occupied, limit = self.table.occupied(), self.config.max_calls
        full = Availability.FULL if occupied >= limit else Availability.READY
        state = full if self.accepting else Availability.LOADING
        headers = [
            *self._capabilities(source),
            ("X-Appliance-State", state.value),
            ("X-Appliance-Calls", f"{occupied}/{limit}"),
        ]
        if self.registration is not None:
            status = self.registration.status
            headers.append(("X-Appliance-Registration", f"{status.state} {status.user}@{status.registrar}"))
        if state != Availability.READY:
            headers.append(("Retry-After", str(self.config.retry_after_s)))
            self.transport.respond(request, source, 503, headers=headers)
        else:
            self.transport.respond(request, source, 200, headers=headers)

    def _capabilities(self, source: Address) -> list[tuple[str, str]]:
        return [
            ("Allow", ", ".join(SUPPORTED_METHODS)),
            ("Accept", "application/sdp"),
            ("Contact", self.transport.contact_for(source)),
            ("Server", self.config.user_agent),
        ]

    def _allowed_peer(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._allowed)

    def _on_ack(self, ack: SipRequest) -> None:
        if self.invites.on_ack_of_failure(ack):
            return
        call = self.table.find(ack)
        if call is not None:
            self.invites.on_dialog_ack(call, ack)

    # --- calls -----------------------------------------------------------------------------------------
    async def end_call(self, call: Call, reason: str, *, send_bye: bool) -> None:
        if call.ended:
            return
        was = call.state
        call.mark_ended(reason)
        self.table.forget(call)
        for retx in (call.ok_retx,):
            if retx is not None:
                retx.stop()
        current = asyncio.current_task()
        if call.answer_task is not None and call.answer_task is not current:
            call.answer_task.cancel()
        if send_bye and was in (CallState.ANSWERED, CallState.ESTABLISHED):
            self.dialogs.send_bye(call)
        await call.stream.close()
        self.stats.calls_ended += 1
        log.info("call %s ended: %s (%s)", call.call_id, reason, _stream_summary(call))
        task = call.handler_task
        if task is not None and task is not current and not task.done():
            self._spawn(_cancel_after(task, HANDLER_GRACE_S))

    async def _watch_calls(self) -> None:
        loop = asyncio.get_running_loop()
        pinged = loop.time()
        while True:
            await asyncio.sleep(_WATCH_INTERVAL_S)
            if loop.time() - pinged >= self._keepalive_s:
                pinged = loop.time()
                self._ping_registrar()
            for call in list(self.calls.values()):
                last = call.stream.last_received_s
                if call.state in (CallState.ANSWERED, CallState.ESTABLISHED) and last is not None:
                    silent_s = loop.time() - last
                    if silent_s > self.config.rtp_timeout_s:
                        self._spawn(self.end_call(call, f"no RTP for {silent_s:.1f} s", send_bye=True))

    @property
    def _keepalive_s(self) -> float:
        """Often enough that neither side's idle timer closes the registrar's connection."""
        return min(KEEPALIVE_MAX_S, self.config.tcp_idle_timeout_s / 4)

    def _ping_registrar(self) -> None:
        """RFC 5626's double-CRLF keep-alive on the connection to the registrar (TCP or TLS): the
        registrar answers with a CRLF, and the connection stays open for the calls it sends back on it."""
        if self.registration is None or not self.registration.over_tcp:
            return
        connection = self.transport.tcp.get(self.registration.registrar)
        if connection is not None and connection.open:
            connection.write(b"\r\n\r\n")

    def _dropped(self, what: str) -> None:
        if what == "key":
            self.stats.keys_refused += 1
        elif what == "srtp":
            self.stats.srtp_rejected += 1
        else:
            self.stats.media_dropped += 1

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def open_stream(self, params: MediaParams, label: str) -> RtpStream | None:
        """A stream on the next free even port of the configured range, or None if all are taken."""
        low, high = self.config.rtp_port_min + self.config.rtp_port_min % 2, self.config.rtp_port_max
        ports = list(range(low, high + 1, 2))
        start = ports.index(self._next_rtp_port) if self._next_rtp_port in ports else 0
        for port in ports[start:] + ports[:start]:
            stream = RtpStream(
                params,
                jitter_depth_packets=self.config.jitter_depth_packets,
                label=label,
                latch=self.config.rtp_latch,
                on_dropped=self._dropped,
            )
            try:
                await stream.open(self.config.bind_host, port)
            except OSError:
                continue
            self._next_rtp_port = port + 2 if port + 2 <= high else low
            return stream
        return None


def _stream_summary(call: Call) -> str:
    s = call.stream.stats
    return (
        f"rtp in {s.packets_received}, out {s.packets_sent} (longest gap {s.longest_send_gap_s * 1000:.0f} ms), "
        f"bad {s.bad_packets}, dtmf {''.join(s.digits) or '-'}"
    )


async def _cancel_after(task: asyncio.Task[None], grace_s: float) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(task), grace_s)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        task.cancel()
    except Exception:  # the handler's own error was logged by its runner
        pass
