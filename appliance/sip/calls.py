"""The calls the server holds: established ones by local tag, ringing ones by INVITE transaction,
and the slots held while an RTP port opens (so a second INVITE sees them taken)."""

from __future__ import annotations

from appliance.rtp.stream import RtpStream
from appliance.sip.call import Call
from appliance.sip.dialog import Dialog, new_tag
from appliance.sip.message import SipRequest
from appliance.sip.transport import Address, EndCall


class CallTable:
    def __init__(self, end_call: EndCall) -> None:
        self.calls: dict[str, Call] = {}  # by local tag
        self.pending: dict[tuple[str, ...], Call] = {}  # INVITE transaction -> call, until answered
        self.reserved = 0
        self._end_call = end_call

    def occupied(self) -> int:
        return len(self.calls) + self.reserved

    def find(self, request: SipRequest) -> Call | None:
        return next((call for call in self.calls.values() if call.dialog.matches(request)), None)

    def new(self, invite: SipRequest, stream: RtpStream, source: Address) -> Call:
        dialog = Dialog.from_invite(invite, new_tag())
        call = Call(
            dialog, stream, peer=source, end=lambda c, reason, bye: self._end_call(c, reason, send_bye=bye)
        )
        call.invite = invite
        self.calls[dialog.local_tag] = call
        return call

    def forget(self, call: Call) -> None:
        self.calls.pop(call.dialog.local_tag, None)
        self.pending = {key: c for key, c in self.pending.items() if c is not call}
