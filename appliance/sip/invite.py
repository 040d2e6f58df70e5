"""INVITE handling: new calls, re-INVITEs, the 2xx/ACK handshake, failure answers, the call handler.

A plain class over the server's transport and call table, so the call flow reads top to bottom.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from appliance.ratelog import ThrottledLog
from appliance.rtp.srtp import SrtpKeys
from appliance.rtp.stream import MediaParams, RtpStream
from appliance.sip.call import Call, CallHandler, CallState
from appliance.sip.calls import CallTable
from appliance.sip.checks import SUPPORTED_METHODS
from appliance.sip.dialog import make_response
from appliance.sip.message import SipRequest
from appliance.sip.params import SipParams
from appliance.sip.sdp import (
    AudioAnswer,
    SdpError,
    SdpHostName,
    SessionDescription,
    build_offer,
    keys_from_answer,
    negotiate,
    new_crypto,
    parse_sdp,
)
from appliance.sip.stats import ServerStats
from appliance.sip.transactions import Retransmitter, transaction_key
from appliance.sip.transport import Address, EndCall, SipTransport, Spawn

log = logging.getLogger(__name__)

MAX_FINAL_RETRANSMITTERS = 64

OpenStream = Callable[[MediaParams, str], Awaitable[RtpStream | None]]


class InviteFlow:
    def __init__(
        self,
        config: SipParams,
        stats: ServerStats,
        transport: SipTransport,
        table: CallTable,
        *,
        handler: CallHandler,
        open_stream: OpenStream,
        end_call: EndCall,
        spawn: Spawn,
        noisy: ThrottledLog,
        accepting: Callable[[], bool] = lambda: True,
    ) -> None:
        """``noisy``: the log for what a caller can make happen at any rate (refused INVITEs)."""
        self.config = config
        self.noisy = noisy
        self.accepting = accepting
        self.stats = stats
        self.transport = transport
        self.table = table
        self.handler = handler
        self.open_stream = open_stream
        self.end_call = end_call
        self.spawn = spawn
        self.final_retx: dict[tuple[str, ...], Retransmitter] = {}  # non-2xx INVITE responses

    def negotiate(self, sdp: bytes | SessionDescription, call: Call | None) -> AudioAnswer:
        """Our answer to an SDP offer, on ``call``'s RTP port and session (before a call: a dry run)."""
        offer = parse_sdp(sdp) if isinstance(sdp, bytes) else sdp
        return negotiate(
            offer,
            local_host=self.transport.local_host,
            local_port=call.stream.local_port if call else 0,
            session_id=call.session_id if call else 0,
            session_version=call.session_version if call else 0,
            codecs=self.config.codecs,
            encryption=self.config.media_encryption,
        )

    async def on_invite(self, invite: SipRequest, source: Address) -> None:
        if ";tag=" in (invite.get("To") or "").replace(" ", ""):
            await self._on_reinvite(invite, source)
            return
        if not self.accepting():
            self.noisy.info(
                "invite_loading",
                "SIP: INVITE from %s:%d refused with 503: the engines are still loading",
                *source,
            )
            self.send_final_failure(
                invite, source, 503, headers=(("Retry-After", str(self.config.retry_after_s)),)
            )
            return
        if self.table.occupied() >= self.config.max_calls:
            self.stats.busy += 1
            status = self.config.full_status
            self.noisy.info(
                "invite_full",
                "SIP: INVITE from %s:%d refused with %d: %d calls already (sip.max_calls)",
                *source,
                status,
                len(self.table.calls),
            )
            retry = (("Retry-After", str(self.config.retry_after_s)),) if status == 503 else ()
            self.send_final_failure(invite, source, status, headers=retry)
            return
        offer = None
        if invite.body:
            try:
                offer = parse_sdp(invite.body)
                self.negotiate(offer, None)
            except SdpError as err:
                kind = "invite_sdp_host_name" if isinstance(err, SdpHostName) else "invite_sdp"
                self.noisy.info(kind, "SIP: INVITE from %s:%d refused with 488: %s", *source, err)
                self.send_final_failure(
                    invite, source, 488, headers=(("Warning", f'304 appliance "{err}"'[:200]),)
                )
                return
        label = f"call {invite.get('Call-ID')}"
        self.table.reserved += 1  # hold the slot while the port opens: a second INVITE must see it
        try:
            stream = await self.open_stream(MediaParams(source[0], 0, "PCMU", 0), label)
        finally:
            self.table.reserved -= 1
        if stream is None:
            self.noisy.log(
                logging.WARNING,
                "invite_no_port",
                "SIP: no free RTP port in sip.rtp_port_min..rtp_port_max; INVITE refused with 503",
            )
            self.send_final_failure(invite, source, 503, headers=(("Retry-After", "5"),))
            return
        call = self.table.new(invite, stream, source)
        self.stats.calls_started += 1
        key = transaction_key(invite)
        self.table.pending[key] = call
        self.transport.respond(invite, source, 100)
        self.transport.respond(
            invite,
            source,
            180,
            to_tag=call.dialog.local_tag,
            headers=(("Contact", self.transport.contact_for(source)),),
        )
        body, params = self._session(call, offer)
        if params is not None:
            stream.update(params)
        call.answer_task = asyncio.get_running_loop().create_task(
            self._answer(call, invite, source, body, key)
        )

    def _session(self, call: Call, offer: SessionDescription | None) -> tuple[str, MediaParams | None]:
        """Our SDP for the 200 OK: the answer to ``offer``, or our own offer when there was none."""
        session_id = secrets.randbelow(2**31)
        call.session_id = session_id
        if offer is None:
            return self._offer(call), None
        answer = self.negotiate(offer, call)
        return answer.sdp, _params(answer)

    async def _answer(
        self, call: Call, invite: SipRequest, source: Address, sdp: str, key: tuple[str, ...]
    ) -> None:
        if self.config.answer_delay_s > 0:
            await asyncio.sleep(self.config.answer_delay_s)
        if call.ended:
            return
        self.table.pending.pop(key, None)
        call.state = CallState.ANSWERED
        data = self.transport.respond(
            invite,
            source,
            200,
            to_tag=call.dialog.local_tag,
            headers=(
                ("Contact", self.transport.contact_for(source)),
                ("Allow", ", ".join(SUPPORTED_METHODS)),
                ("Server", self.config.user_agent),
            ),
            body=sdp.encode(),
        )
        call.stream.start()
        call.ok_retx = Retransmitter(
            lambda: self.transport.send(data, source),
            lambda: self._no_ack(call),
            t1_s=self.config.t1_s,
            already_sent=True,
        )
        log.info("call %s answered (%s from %s:%d)", call.call_id, call.caller, *source)

    def _no_ack(self, call: Call) -> None:
        self.spawn(self.end_call(call, "no ACK for the 200 OK", send_bye=True))

    def on_dialog_ack(self, call: Call, ack: SipRequest) -> None:
        if call.ok_retx is not None:
            call.ok_retx.stop()
            call.ok_retx = None
        if call.awaiting_answer and ack.body:
            call.awaiting_answer = False
            try:
                answered = parse_sdp(ack.body)
                answer = self.negotiate(answered, call)
                params = _params(answer, keys_from_answer(answered, call.offered_crypto))
                if self.config.media_encryption == "srtp" and params.srtp is None:
                    raise SdpError('the answer has no SRTP key for ours (sip.media_encryption = "srtp")')
            except SdpError as err:
                log.info("call %s: unusable SDP answer in the ACK (%s); hanging up", call.call_id, err)
                self.spawn(self.end_call(call, "unusable SDP answer", send_bye=True))
                return
            call.stream.update(params)
        if call.state is CallState.ANSWERED:
            call.state = CallState.ESTABLISHED
            call.handler_task = asyncio.get_running_loop().create_task(
                self._run_handler(call), name=f"call {call.call_id}"
            )

    async def _run_handler(self, call: Call) -> None:
        try:
            await self.handler(call)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("call %s: the call handler failed", call.call_id)
        if not call.ended:
            await self.end_call(call, "conversation over", send_bye=True)

    async def _on_reinvite(self, invite: SipRequest, source: Address) -> None:
        call = self.table.find(invite)
        if call is None or call.ended:
            self.transport.respond(invite, source, 481)
            return
        if not call.dialog.accept_cseq(invite):
            self.transport.respond(invite, source, 500, "Server Internal Error (CSeq out of order)")
            return
        if call.state is not CallState.ESTABLISHED or call.ok_retx is not None:
            self.transport.respond(invite, source, 491)
            return
        call.session_version += 1
        if invite.body:
            try:
                answer = self.negotiate(invite.body, call)
            except SdpError as err:
                call.session_version -= 1
                self.transport.respond(
                    invite, source, 488, headers=(("Warning", f'304 appliance "{err}"'[:200]),)
                )
                return
            call.stream.update(_params(answer))
            sdp = answer.sdp
            log.info(
                "call %s: re-INVITE, now %s to %s:%d (%s)",
                call.call_id,
                answer.codec,
                answer.remote_host,
                answer.remote_port,
                answer.direction,
            )
        else:
            sdp = self._offer(call)
        data = self.transport.respond(
            invite, source, 200, headers=(("Contact", self.transport.contact_for(source)),), body=sdp.encode()
        )
        call.ok_retx = Retransmitter(
            lambda: self.transport.send(data, source),
            lambda: self._no_ack(call),
            t1_s=self.config.t1_s,
            already_sent=True,
        )

    def _offer(self, call: Call) -> str:
        """Our own offer (an INVITE came without one): the answer comes in the ACK. With SRTP it carries
        the appliance's key, kept for when the answer brings the caller's."""
        call.awaiting_answer = True
        call.offered_crypto = new_crypto() if self.config.media_encryption != "none" else None
        return build_offer(
            local_host=self.transport.local_host,
            local_port=call.stream.local_port,
            session_id=call.session_id,
            session_version=call.session_version,
            crypto=call.offered_crypto,
            srtp_only=self.config.media_encryption == "srtp",
        )

    def send_final_failure(
        self,
        invite: SipRequest,
        source: Address,
        status: int,
        *,
        to_tag: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """A 3xx-6xx to an INVITE, repeated until the caller's ACK (RFC 3261 17.2.1)."""
        response = make_response(
            invite, status, source=source, to_tag=to_tag or "busy-" + secrets.token_hex(4), headers=headers
        )
        data = response.to_bytes()
        key = transaction_key(invite)
        self.transport.remember(invite, data, source)
        old = self.final_retx.pop(key, None)
        if old is not None:
            old.stop()
        if len(self.final_retx) >= MAX_FINAL_RETRANSMITTERS:
            self.transport.send(
                data, source
            )  # under a flood, answer once and do not repeat (no amplification)
            return
        self.final_retx[key] = Retransmitter(
            lambda: self.transport.send(data, source),
            lambda: self._forget_final(key),
            t1_s=self.config.t1_s,
        )

    def _forget_final(self, key: tuple[str, ...]) -> None:
        self.final_retx.pop(key, None)

    def on_ack_of_failure(self, ack: SipRequest) -> bool:
        """The ACK of a 3xx-6xx answer stops its retransmissions; True when it was one."""
        retx = self.final_retx.pop(transaction_key(ack, "INVITE"), None)
        if retx is None:
            return False
        retx.stop()
        return True

    def stop(self) -> None:
        for retx in self.final_retx.values():
            retx.stop()


def _params(answer: AudioAnswer, keys: SrtpKeys | None = None) -> MediaParams:
    """The stream's parameters for an agreed session; ``keys`` when the appliance made the offer."""
    return MediaParams(
        remote_host=answer.remote_host,
        remote_port=answer.remote_port,
        codec=answer.codec,
        payload_type=answer.payload_type,
        telephone_event_pt=answer.telephone_event_pt,
        direction=answer.direction,
        srtp=keys if keys is not None else answer.srtp,
    )
