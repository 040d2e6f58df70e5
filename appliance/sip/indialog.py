"""Requests inside a call (CANCEL, BYE, INFO), responses to our own requests, and the BYE the
appliance sends: a plain class over the server's transport and call table."""

from __future__ import annotations

import logging
from collections.abc import Callable

from appliance.sip.call import Call, CallState
from appliance.sip.calls import CallTable
from appliance.sip.headers import parse_uri, parse_via
from appliance.sip.message import SipRequest, SipResponse
from appliance.sip.transactions import Retransmitter, transaction_key
from appliance.sip.transport import Address, EndCall, SipTransport, Spawn
from engines.net import is_ip_literal

log = logging.getLogger(__name__)

FailInvite = Callable[..., None]  # InviteFlow.send_final_failure(invite, source, status, *, to_tag=...)


class DialogFlow:
    def __init__(
        self,
        transport: SipTransport,
        table: CallTable,
        *,
        user_agent: str,
        fail_invite: FailInvite,
        end_call: EndCall,
        spawn: Spawn,
    ) -> None:
        self.transport = transport
        self.table = table
        self.user_agent = user_agent
        self.fail_invite = fail_invite
        self.end_call = end_call
        self.spawn = spawn
        self.client_retx: dict[str, Retransmitter] = {}  # our BYEs, by branch

    def on_cancel(self, cancel: SipRequest, source: Address) -> None:
        invite_key = transaction_key(cancel, "INVITE")
        call = self.table.pending.get(invite_key)
        if call is None:
            self.transport.respond(cancel, source, 481)
            return
        self.transport.respond(cancel, source, 200)
        if call.state is CallState.RINGING and call.invite is not None:
            self.table.pending.pop(invite_key, None)
            self.fail_invite(call.invite, source, 487, to_tag=call.dialog.local_tag)
            self.spawn(self.end_call(call, "cancelled by the caller", send_bye=False))

    async def on_bye(self, bye: SipRequest, source: Address) -> None:
        call = self.table.find(bye)
        if call is None:
            self.transport.respond(bye, source, 481)
            return
        self.transport.respond(bye, source, 200)
        await self.end_call(call, "caller hung up", send_bye=False)

    def on_info(self, info: SipRequest, source: Address) -> None:
        call = self.table.find(info)
        if call is None:
            self.transport.respond(info, source, 481)
            return
        if (info.get("Content-Type") or "").lower().startswith("application/dtmf-relay"):
            for line in info.body.decode("utf-8", "replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip().lower() == "signal" and value.strip():
                    call.stream.stats.digits.append(value.strip())
                    log.info("call %s: DTMF %s (SIP INFO)", call.call_id, value.strip())
        self.transport.respond(info, source, 200)

    def send_bye(self, call: Call) -> None:
        over_tcp = self.transport.over_tcp(call.peer)
        bye = call.dialog.make_request(
            "BYE",
            via_host=self.transport.local_host,
            via_port=self.transport.local_port,
            contact=self.transport.contact_for(call.peer),
            transport="TCP" if over_tcp else "UDP",
        )
        bye.add("User-Agent", self.user_agent)
        data = bye.to_bytes()
        destination = call.peer if over_tcp else self._destination(call)
        branch = parse_via(bye.get("Via") or "").branch or ""
        self.client_retx[branch] = Retransmitter(
            lambda: self.transport.send(data, destination),
            lambda: self._forget_client(branch),
            timeout_s=4.0,
            max_sends=1 if over_tcp else None,  # a stream does not lose it
        )

    def on_response(self, response: SipResponse) -> None:
        """A response to one of our BYEs stops its retransmissions."""
        hops = response.get_list("Via")
        try:
            branch = parse_via(hops[0]).branch if hops else None
        except ValueError:
            branch = None
        retx = self.client_retx.pop(branch or "", None)
        if retx is not None:
            retx.stop()
        else:
            log.debug("SIP: dropped a response (%d) that matches no request of ours", response.status)

    def stop(self) -> None:
        for retx in self.client_retx.values():
            retx.stop()

    def _forget_client(self, branch: str) -> None:
        self.client_retx.pop(branch, None)

    def _destination(self, call: Call) -> Address:
        """In-dialog requests go to the next hop if it is an IP address, else where the INVITE came from
        (no name resolution: the appliance makes no DNS queries)."""
        try:
            uri = parse_uri(call.dialog.next_hop_uri(), "next hop")
        except ValueError:
            return call.peer
        if uri.host and is_ip_literal(uri.host.strip("[]")):
            return uri.host.strip("[]"), uri.port or 5060
        return call.peer
