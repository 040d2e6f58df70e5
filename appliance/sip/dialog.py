"""Dialog state and the messages a user agent server builds (RFC 3261 sections 8.2.6, 12, 15).

Pure: no sockets and no clock. ``make_response`` answers any request; ``Dialog`` remembers what an
INVITE set up and builds the in-dialog requests the appliance sends (BYE).
"""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, field

from appliance.sip.headers import MAGIC_COOKIE, format_params, parse_cseq, parse_name_addr, parse_via
from appliance.sip.message import SipMessage, SipRequest, SipResponse, split_list

REASONS = {
    100: "Trying",
    180: "Ringing",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    415: "Unsupported Media Type",
    481: "Call/Transaction Does Not Exist",
    486: "Busy Here",
    487: "Request Terminated",
    488: "Not Acceptable Here",
    491: "Request Pending",
    500: "Server Internal Error",
    503: "Service Unavailable",
    505: "Version Not Supported",
}


def new_tag() -> str:
    return secrets.token_hex(6)


def new_branch() -> str:
    return MAGIC_COOKIE + secrets.token_hex(8)


def make_response(
    request: SipMessage,
    status: int,
    reason: str | None = None,
    *,
    to_tag: str | None = None,
    source: tuple[str, int] | None = None,
    headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
    body: bytes = b"",
    content_type: str = "application/sdp",
) -> SipResponse:
    """A response to ``request``: Via (with received/rport for ``source``), From, To (+tag), Call-ID,
    CSeq copied; Record-Route copied when the response can establish a dialog."""
    response = SipResponse(status=status, reason=reason or REASONS.get(status, "Unknown"))
    vias = request.get_all("Via")
    if vias and source is not None:
        vias = [_stamp_top_via(vias[0], source), *vias[1:]]
    for via in vias:
        response.add("Via", via)
    for name in ("From", "To", "Call-ID", "CSeq"):
        value = request.get(name)
        if value is not None:
            if name == "To" and to_tag and status != 100 and not _has_tag(value):
                value = f"{value};tag={to_tag}"
            response.add(name, value)
    if isinstance(request, SipRequest) and request.method == "INVITE" and 100 < status < 300:
        for route in request.get_all("Record-Route"):
            response.add("Record-Route", route)
    for name, value in headers:
        response.add(name, value)
    if body:
        response.add("Content-Type", content_type)
        response.body = body
    return response


def _has_tag(value: str) -> bool:
    try:
        return parse_name_addr(value, "To").tag is not None
    except ValueError:
        return ";tag=" in value.replace(" ", "")


def _stamp_top_via(value: str, source: tuple[str, int]) -> str:
    """RFC 3261 18.2.1 ``received`` and RFC 3581 ``rport`` on the topmost Via hop."""
    hops = split_list(value)
    try:
        via = parse_via(hops[0])
    except ValueError:
        return value
    params = dict(via.params)
    host, port = source
    if via.host.strip("[]") != host or "rport" in params:
        params["received"] = host
    if "rport" in params:
        params["rport"] = str(port)
    sent_by = via.host if via.port is None else f"{via.host}:{via.port}"
    hops[0] = f"SIP/2.0/{via.transport} {sent_by}{format_params(params)}"
    return ", ".join(hops)


class DialogState(enum.Enum):
    EARLY = "early"
    CONFIRMED = "confirmed"
    TERMINATED = "terminated"


@dataclass
class Dialog:
    call_id: str
    local_tag: str
    remote_tag: str | None
    local_uri: str  # the To of the INVITE, without its tag
    remote_uri: str  # the From of the INVITE
    remote_target: str  # the Contact URI of the INVITE
    route_set: list[str] = field(default_factory=list)
    remote_cseq: int = 0
    local_cseq: int = 0
    state: DialogState = DialogState.EARLY

    @classmethod
    def from_invite(cls, invite: SipRequest, local_tag: str) -> Dialog:
        source = parse_name_addr(invite.get("From") or "", "From")
        target = parse_name_addr(invite.get("To") or "", "To")
        contacts = invite.get_list("Contact")
        remote_target = parse_name_addr(contacts[0], "Contact").uri if contacts else source.uri
        return cls(
            call_id=invite.get("Call-ID") or "",
            local_tag=local_tag,
            remote_tag=source.tag,
            local_uri=_without_tag(invite.get("To") or "", target.uri),
            remote_uri=invite.get("From") or "",
            remote_target=remote_target,
            route_set=invite.get_list("Record-Route"),
            remote_cseq=parse_cseq(invite.get("CSeq") or "").number,
            local_cseq=secrets.randbelow(10_000) + 1,
        )

    def matches(self, request: SipRequest) -> bool:
        if request.get("Call-ID") != self.call_id:
            return False
        try:
            to_tag = parse_name_addr(request.get("To") or "", "To").tag
            from_tag = parse_name_addr(request.get("From") or "", "From").tag
        except ValueError:
            return False
        return to_tag == self.local_tag and from_tag == self.remote_tag

    def accept_cseq(self, request: SipRequest) -> bool:
        """In-dialog requests must count up (RFC 3261 12.2.2); ACK and CANCEL reuse the INVITE's."""
        number = parse_cseq(request.get("CSeq") or "").number
        if request.method in ("ACK", "CANCEL"):
            return True
        if number <= self.remote_cseq:
            return False
        self.remote_cseq = number
        return True

    def make_request(
        self, method: str, *, via_host: str, via_port: int, contact: str, transport: str = "UDP"
    ) -> SipRequest:
        self.local_cseq += 1
        request = SipRequest(method=method, uri=self.remote_target)
        request.add("Via", f"SIP/2.0/{transport} {via_host}:{via_port};branch={new_branch()};rport")
        request.add("Max-Forwards", "70")
        for route in self.route_set:
            request.add("Route", route)
        request.add("From", f"{self.local_uri};tag={self.local_tag}")
        request.add("To", self.remote_uri)
        request.add("Call-ID", self.call_id)
        request.add("CSeq", f"{self.local_cseq} {method}")
        request.add("Contact", contact)
        return request

    def next_hop_uri(self) -> str:
        """Where an in-dialog request goes: the first loose route, else the remote target."""
        if self.route_set:
            return parse_name_addr(self.route_set[0], "Route").uri
        return self.remote_target


def _without_tag(header: str, uri: str) -> str:
    name_addr = parse_name_addr(header, "To")
    params = {k: v for k, v in name_addr.params.items() if k != "tag"}
    display = f"{name_addr.display} " if name_addr.display else ""
    return f"{display}<{uri}>{format_params(params)}"
