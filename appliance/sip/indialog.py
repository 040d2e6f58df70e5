"""Requests inside a call (CANCEL, BYE, INFO) and the BYE the appliance sends: a mixin of ``SipServer``."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from appliance.sip.call import Call, CallState
from appliance.sip.headers import host_is_ip, parse_uri, parse_via
from appliance.sip.transactions import Retransmitter, transaction_key

if TYPE_CHECKING:
    from appliance.config import SipConfig
    from appliance.sip.message import SipRequest
    from appliance.sip.tcp import SipTcpConnection

log = logging.getLogger(__name__)


class InDialogMixin:
    if TYPE_CHECKING:
        config: SipConfig
        local_host: str
        local_port: int
        _pending: dict[tuple[str, ...], Call]
        _client_retx: dict[str, Retransmitter]
        _tcp_connections: dict[tuple[str, int], SipTcpConnection]

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
        def send_final_failure(
            self,
            invite: SipRequest,
            source: tuple[str, int],
            status: int,
            *,
            to_tag: str | None = None,
            headers: tuple[tuple[str, str], ...] = (),
        ) -> None: ...
        def contact_for(self, source: tuple[str, int]) -> str: ...
        async def end_call(self, call: Call, reason: str, *, send_bye: bool) -> None: ...
        def _send(self, data: bytes, address: tuple[str, int]) -> None: ...
        def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None: ...

    def on_cancel(self, cancel: SipRequest, source: tuple[str, int]) -> None:
        invite_key = transaction_key(cancel, "INVITE")
        call = self._pending.get(invite_key)
        if call is None:
            self.respond(cancel, source, 481)
            return
        self.respond(cancel, source, 200)
        if call.state is CallState.RINGING and call.invite is not None:
            self._pending.pop(invite_key, None)
            self.send_final_failure(call.invite, source, 487, to_tag=call.dialog.local_tag)
            self._spawn(self.end_call(call, "cancelled by the caller", send_bye=False))

    async def on_bye(self, bye: SipRequest, source: tuple[str, int]) -> None:
        call = self.find_call(bye)
        if call is None:
            self.respond(bye, source, 481)
            return
        self.respond(bye, source, 200)
        await self.end_call(call, "caller hung up", send_bye=False)

    def on_info(self, info: SipRequest, source: tuple[str, int]) -> None:
        call = self.find_call(info)
        if call is None:
            self.respond(info, source, 481)
            return
        if (info.get("Content-Type") or "").lower().startswith("application/dtmf-relay"):
            for line in info.body.decode("utf-8", "replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip().lower() == "signal" and value.strip():
                    call.stream.stats.digits.append(value.strip())
                    log.info("call %s: DTMF %s (SIP INFO)", call.call_id, value.strip())
        self.respond(info, source, 200)

    def send_bye(self, call: Call) -> None:
        over_tcp = call.peer in self._tcp_connections
        bye = call.dialog.make_request(
            "BYE",
            via_host=self.local_host,
            via_port=self.local_port,
            contact=self.contact_for(call.peer),
            transport="TCP" if over_tcp else "UDP",
        )
        bye.add("User-Agent", self.config.user_agent)
        data = bye.to_bytes()
        destination = call.peer if over_tcp else self._destination(call)
        branch = parse_via(bye.get("Via") or "").branch or ""
        self._client_retx[branch] = Retransmitter(
            lambda: self._send(data, destination),
            lambda: self._forget_client(branch),
            timeout_s=4.0,
            max_sends=1 if over_tcp else None,  # a stream does not lose it
        )

    def _forget_client(self, branch: str) -> None:
        self._client_retx.pop(branch, None)

    def _destination(self, call: Call) -> tuple[str, int]:
        """In-dialog requests go to the next hop if it is an IP address, else where the INVITE came from
        (no name resolution: the appliance makes no DNS queries)."""
        try:
            uri = parse_uri(call.dialog.next_hop_uri(), "next hop")
        except ValueError:
            return call.peer
        if uri.host and host_is_ip(uri.host):
            return uri.host.strip("[]"), uri.port or 5060
        return call.peer
