"""INVITE handling for the SIP server: new calls, re-INVITEs, the 2xx/ACK handshake, the handler.

A mixin of ``SipServer`` so the call flow reads top to bottom in one place.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from appliance.rtp.stream import MediaParams, RtpStream
from appliance.sip.call import Call, CallState
from appliance.sip.dialog import make_response
from appliance.sip.sdp import AudioAnswer, SdpError, SessionDescription, build_offer, negotiate, parse_sdp
from appliance.sip.transactions import Retransmitter, transaction_key

if TYPE_CHECKING:
    from appliance.config import SipConfig
    from appliance.sip.call import CallHandler
    from appliance.sip.message import SipRequest
    from appliance.sip.server import ServerStats

log = logging.getLogger(__name__)

MAX_FINAL_RETRANSMITTERS = 64


class InviteMixin:
    if TYPE_CHECKING:
        config: SipConfig
        handler: CallHandler
        stats: ServerStats
        calls: dict[str, Call]
        _reserved_calls: int
        local_host: str

        def contact_for(self, source: tuple[str, int]) -> str: ...

        _pending: dict[tuple[str, ...], Call]
        _final_retx: dict[tuple[str, ...], Retransmitter]

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
        ) -> bytes: ...
        def find_call(self, request: SipRequest) -> Call | None: ...
        def new_call(self, invite: SipRequest, stream: RtpStream, source: tuple[str, int]) -> Call: ...
        async def open_stream(self, params: MediaParams, label: str) -> RtpStream | None: ...
        async def end_call(self, call: Call, reason: str, *, send_bye: bool) -> None: ...
        def _send(self, data: bytes, address: tuple[str, int]) -> None: ...
        def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None: ...

    async def on_invite(self, invite: SipRequest, source: tuple[str, int]) -> None:
        if ";tag=" in (invite.get("To") or "").replace(" ", ""):
            await self._on_reinvite(invite, source)
            return
        if len(self.calls) + self._reserved_calls >= self.config.max_calls:
            self.stats.busy += 1
            log.info(
                "SIP: INVITE from %s:%d refused: %d calls already (sip.max_calls)", *source, len(self.calls)
            )
            self.send_final_failure(invite, source, 486)
            return
        offer = None
        if invite.body:
            try:
                offer = parse_sdp(invite.body)
                negotiate(
                    offer,
                    local_host=self.local_host,
                    local_port=0,
                    session_id=0,
                    session_version=0,
                    codecs=self.config.codecs,
                )
            except SdpError as err:
                log.info("SIP: INVITE from %s:%d refused: %s", *source, err)
                self.send_final_failure(
                    invite, source, 488, headers=(("Warning", f'304 appliance "{err}"'[:200]),)
                )
                return
        label = f"call {invite.get('Call-ID')}"
        self._reserved_calls += 1  # hold the slot while the port opens: a second INVITE must see it
        try:
            stream = await self.open_stream(MediaParams(source[0], 0, "PCMU", 0), label)
        finally:
            self._reserved_calls -= 1
        if stream is None:
            log.warning("SIP: no free RTP port in sip.rtp_port_min..rtp_port_max; INVITE refused with 503")
            self.send_final_failure(invite, source, 503, headers=(("Retry-After", "5"),))
            return
        call = self.new_call(invite, stream, source)
        key = transaction_key(invite)
        self._pending[key] = call
        self.respond(invite, source, 100)
        self.respond(
            invite,
            source,
            180,
            to_tag=call.dialog.local_tag,
            headers=(("Contact", self.contact_for(source)),),
        )
        body, params = self._session(call, offer)
        if params is not None:
            stream.update(params)
        call.answer_task = asyncio.get_running_loop().create_task(
            self._answer(call, invite, source, body, key)
        )

    def _session(self, call: Call, offer: SessionDescription | None) -> tuple[str, MediaParams | None]:
        """Our SDP for the 200 OK: the answer to ``offer``, or our own offer when there was none."""
        port = call.stream.local_port
        session_id = secrets.randbelow(2**31)
        call.session_id = session_id
        if offer is None:
            call.awaiting_answer = True
            return build_offer(
                local_host=self.local_host,
                local_port=port,
                session_id=session_id,
                session_version=call.session_version,
            ), None
        answer = negotiate(
            offer,
            local_host=self.local_host,
            local_port=port,
            session_id=session_id,
            session_version=call.session_version,
            codecs=self.config.codecs,
        )
        return answer.sdp, _params(answer)

    async def _answer(
        self, call: Call, invite: SipRequest, source: tuple[str, int], sdp: str, key: tuple[str, ...]
    ) -> None:
        if self.config.answer_delay_s > 0:
            await asyncio.sleep(self.config.answer_delay_s)
        if call.ended:
            return
        self._pending.pop(key, None)
        call.state = CallState.ANSWERED
        data = self.respond(
            invite,
            source,
            200,
            to_tag=call.dialog.local_tag,
            headers=(
                ("Contact", self.contact_for(source)),
                ("Allow", "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO"),
                ("Server", self.config.user_agent),
            ),
            body=sdp.encode(),
        )
        call.stream.start()
        call.ok_retx = Retransmitter(
            lambda: self._send(data, source), lambda: self._no_ack(call), already_sent=True
        )
        log.info("call %s answered (%s from %s:%d)", call.call_id, call.caller, *source)

    def _no_ack(self, call: Call) -> None:
        self._spawn(self.end_call(call, "no ACK for the 200 OK", send_bye=True))

    def on_dialog_ack(self, call: Call, ack: SipRequest) -> None:
        if call.ok_retx is not None:
            call.ok_retx.stop()
            call.ok_retx = None
        if call.awaiting_answer and ack.body:
            call.awaiting_answer = False
            try:
                answer = negotiate(
                    parse_sdp(ack.body),
                    local_host=self.local_host,
                    local_port=call.stream.local_port,
                    session_id=call.session_id,
                    session_version=call.session_version,
                    codecs=self.config.codecs,
                )
            except SdpError as err:
                log.info("call %s: unusable SDP answer in the ACK (%s); hanging up", call.call_id, err)
                self._spawn(self.end_call(call, "unusable SDP answer", send_bye=True))
                return
            call.stream.update(_params(answer))
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

    async def _on_reinvite(self, invite: SipRequest, source: tuple[str, int]) -> None:
        call = self.find_call(invite)
        if call is None or call.ended:
            self.respond(invite, source, 481)
            return
        if not call.dialog.accept_cseq(invite):
            self.respond(invite, source, 500, "Server Internal Error (CSeq out of order)")
            return
        if call.state is not CallState.ESTABLISHED or call.ok_retx is not None:
            self.respond(invite, source, 491)
            return
        call.session_version += 1
        if invite.body:
            try:
                answer = negotiate(
                    parse_sdp(invite.body),
                    local_host=self.local_host,
                    local_port=call.stream.local_port,
                    session_id=call.session_id,
                    session_version=call.session_version,
                    codecs=self.config.codecs,
                )
            except SdpError as err:
                call.session_version -= 1
                self.respond(invite, source, 488, headers=(("Warning", f'304 appliance "{err}"'[:200]),))
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
            call.awaiting_answer = True
            sdp = build_offer(
                local_host=self.local_host,
                local_port=call.stream.local_port,
                session_id=call.session_id,
                session_version=call.session_version,
            )
        data = self.respond(
            invite, source, 200, headers=(("Contact", self.contact_for(source)),), body=sdp.encode()
        )
        call.ok_retx = Retransmitter(
            lambda: self._send(data, source), lambda: self._no_ack(call), already_sent=True
        )

    def send_final_failure(
        self,
        invite: SipRequest,
        source: tuple[str, int],
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
        self.respond_raw(invite, data, source)
        old = self._final_retx.pop(key, None)
        if old is not None:
            old.stop()
        if len(self._final_retx) >= MAX_FINAL_RETRANSMITTERS:
            self._send(data, source)  # under a flood, answer once and do not repeat (no amplification)
            return
        self._final_retx[key] = Retransmitter(
            lambda: self._send(data, source), lambda: self._forget_final(key)
        )

    def _forget_final(self, key: tuple[str, ...]) -> None:
        self._final_retx.pop(key, None)

    def respond_raw(self, request: SipRequest, data: bytes, source: tuple[str, int]) -> None:
        cache = getattr(self, "_cache", None)
        if cache is not None:
            cache.remember(transaction_key(request), data, source)


def _params(answer: AudioAnswer) -> MediaParams:
    return MediaParams(
        remote_host=answer.remote_host,
        remote_port=answer.remote_port,
        codec=answer.codec,
        payload_type=answer.payload_type,
        telephone_event_pt=answer.telephone_event_pt,
        direction=answer.direction,
    )
