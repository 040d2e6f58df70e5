"""Requests inside a call (CANCEL, BYE, INFO, NOTIFY), responses to our own requests, and the BYE and
REFER the appliance sends: a plain class over the server's transport and call table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from appliance.rtp.keys import KEYS
from appliance.sip.call import Call, CallState
from appliance.sip.calls import CallTable
from appliance.sip.client import Answered, ClientTransactions, NoAnswer
from appliance.sip.digest import ChallengeError, ChallengeRefused, ExtensionSecret
from appliance.sip.headers import parse_uri
from appliance.sip.message import SipRequest, SipResponse
from appliance.sip.transactions import transaction_key
from appliance.sip.transport import Address, EndCall, SipTransport, Spawn
from appliance.transfer import TransferFailed
from engines.net import is_ip_literal

log = logging.getLogger(__name__)

REFER_WAIT_S = 30.0  # for the REFER's answer, then for the target to answer
BYE_WAIT_S = 4.0  # our BYE is repeated this long at most: the call is over for us either way
FailInvite = Callable[..., None]  # InviteFlow.send_final_failure(invite, source, status, *, to_tag=...)
Credentials = Callable[[], ExtensionSecret | None]  # for the PBX's challenge, if configured


def _no_credentials() -> ExtensionSecret | None:
    return None


MAX_KEY_DURATION_MS = 10_000


def info_key(content_type: str, body: bytes) -> str:
    """The one key a SIP INFO carries: ``application/dtmf-relay`` ("Signal=5", "Duration=160") or
    ``application/dtmf`` ("5"). Raises ValueError naming what is wrong with the body."""
    text = body.decode("utf-8", "replace").strip()
    if content_type == "application/dtmf":
        fields = {"signal": text}
    else:
        fields = {}
        for line in text.splitlines():
            name, separator, value = line.partition("=")
            name = name.strip().lower()
            if not separator or name in fields:
                raise ValueError("a dtmf-relay body is one Signal= line and at most one Duration= line")
            fields[name] = value.strip()
    key = fields.get("signal", "")
    if len(key) != 1 or key.upper() not in KEYS:
        raise ValueError(f"Signal {key[:8]!r} is not one keypad key (0-9, *, #, A-D)")
    duration = fields.get("duration")
    if duration is not None and not (
        duration.isdigit() and len(duration) <= 5 and 0 < int(duration) <= MAX_KEY_DURATION_MS
    ):
        raise ValueError(f"Duration {duration[:8]!r} is not 1-{MAX_KEY_DURATION_MS} ms")
    return key.upper()


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
        t1_s: float,
        credentials: Credentials = _no_credentials,
    ) -> None:
        self.transport = transport
        self.credentials = credentials
        self.table = table
        self.user_agent = user_agent
        self.fail_invite = fail_invite
        self.end_call = end_call
        self.spawn = spawn
        self.client = ClientTransactions(transport.send, t1_s=t1_s)  # our BYEs and REFERs

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
        content_type = (info.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type in ("application/dtmf-relay", "application/dtmf"):
            try:
                key = info_key(content_type, info.body)
            except ValueError as err:
                self.transport.respond(info, source, 400, f"Bad Request ({err})"[:120])
                return
            call.stream.keys.admit(key, "SIP INFO")
        self.transport.respond(info, source, 200)

    def send_bye(self, call: Call) -> None:
        self._send_in_dialog(call, "BYE")

    async def send_refer(self, call: Call, target: str, *, timeout_s: float = REFER_WAIT_S) -> None:
        """A blind transfer (RFC 3515): REFER the caller to ``target`` and follow its NOTIFYs until the
        target answers. Raises TransferFailed saying why not (the call goes on either way). The phone
        system at sip.registrar, when it challenges the REFER (401/407), gets it again with the
        extension's credentials; nobody else does (a caller could take the digest and guess the password)."""
        progress: asyncio.Queue[int] = asyncio.Queue()
        call.refer_progress = progress
        headers = [("Refer-To", f"<{target}>"), ("Referred-By", self.transport.contact_for(call.peer))]
        try:
            request, destination, over_tcp = self._in_dialog(call, "REFER", headers)
            response, _ = await self.client.ask(request, destination, over_tcp=over_tcp, timeout_s=timeout_s)
            if response.status in (401, 407):
                answer = self._answer_challenge(response, destination, call.dialog.remote_target)
                response, _ = await self._ask(call, "REFER", [*headers, answer], timeout_s)
            if response.status >= 300:
                refused = f"{response.status} {response.reason}"
                raise TransferFailed(f"the phone system refused the transfer ({refused})")
            deadline = asyncio.get_running_loop().time() + timeout_s
            while True:
                status = await asyncio.wait_for(progress.get(), deadline - asyncio.get_running_loop().time())
                if 200 <= status < 300:
                    return
                if status >= 300:
                    raise TransferFailed(f"the transfer target did not answer ({status})")
        except (asyncio.TimeoutError, NoAnswer):
            raise TransferFailed(f"the transfer was not confirmed within {timeout_s:.0f} s") from None
        finally:
            call.refer_progress = None

    async def _ask(
        self, call: Call, method: str, headers: list[tuple[str, str]], timeout_s: float
    ) -> Answered:
        request, destination, over_tcp = self._in_dialog(call, method, headers)
        return await self.client.ask(request, destination, over_tcp=over_tcp, timeout_s=timeout_s)

    def _answer_challenge(self, response: SipResponse, sent_to: Address, uri: str) -> tuple[str, str]:
        """The Authorization (401) or Proxy-Authorization (407) header answering the REFER's challenge
        with the extension's credentials. Raises TransferFailed saying why there is none.

        Whom the REFER was sent to decides, never where the 401 came from: anyone on the LAN can send a
        UDP packet claiming the registrar's address, and the answer would go to the caller's contact."""
        secret = self.credentials()
        if secret is None:
            raise TransferFailed(
                f"the phone system asks for a password for the transfer ({response.status}): set "
                "sip.register_user and sip.register_password_file"
            )
        try:
            return secret.answer(response, sent_to, method="REFER", uri=uri)
        except ChallengeRefused as err:
            log.warning("SIP: a REFER challenge not answered: %s", err)
            why = f"the transfer was challenged by someone other than the phone system: {err}"
            raise TransferFailed(why) from None
        except ChallengeError as err:
            why = f"cannot answer the phone system's challenge for the transfer: {err}"
            raise TransferFailed(why) from None

    def on_notify(self, notify: SipRequest, source: Address) -> None:
        """A transfer's progress (Event: refer, a message/sipfrag body such as "SIP/2.0 180 Ringing")."""
        call = self.table.find(notify)
        if call is None:
            self.transport.respond(notify, source, 481)
            return
        self.transport.respond(notify, source, 200)
        event = (notify.get("Event") or "").split(";")[0].strip().lower()
        first = notify.body.decode("utf-8", "replace").strip().splitlines()[:1]
        parts = first[0].split() if first else []
        if event == "refer" and len(parts) >= 2 and parts[0].upper() == "SIP/2.0" and parts[1].isdigit():
            log.info("call %s: transfer progress %s", call.call_id, " ".join(parts[1:]))
            if call.refer_progress is not None:
                call.refer_progress.put_nowait(int(parts[1]))

    def _send_in_dialog(self, call: Call, method: str) -> None:
        request, destination, over_tcp = self._in_dialog(call, method, [])
        self.client.send(request, destination, over_tcp=over_tcp, timeout_s=BYE_WAIT_S)

    def _in_dialog(
        self, call: Call, method: str, headers: list[tuple[str, str]]
    ) -> tuple[SipRequest, Address, bool]:
        over_tcp = self.transport.over_tcp(call.peer)
        via_name, via_port = self.transport.via(call.peer)
        request = call.dialog.make_request(
            method,
            via_host=self.transport.local_host,
            via_port=via_port,
            contact=self.transport.contact_for(call.peer),
            transport=via_name,
        )
        for name, value in headers:
            request.add(name, value)
        request.add("User-Agent", self.user_agent)
        return request, call.peer if over_tcp else self._destination(call), over_tcp

    def on_response(self, response: SipResponse, source: Address) -> None:
        """A response to one of our requests stops its retransmissions (a provisional one too); a final
        one goes to whoever waits for it."""
        if not self.client.on_response(response, source):
            log.debug("SIP: dropped a response (%d) that matches no request of ours", response.status)

    def stop(self) -> None:
        self.client.stop()

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
