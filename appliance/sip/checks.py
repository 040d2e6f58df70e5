"""Whether a request can be served, and if not, which response it gets (RFC 3261 section 8.2).

Pure: a parsed request in, ``None`` or a ``Rejection`` out. Order follows section 8.2: syntax of the
fields the server relies on (400), then method (405/501), URI scheme (416), extensions (420),
content (415/406).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.sip.headers import HeaderError, parse_cseq, parse_name_addr, parse_uri, parse_via
from appliance.sip.message import SipRequest

SUPPORTED_METHODS = ("INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "INFO", "NOTIFY")
# Methods this server knows but does not serve: 405 with Allow; anything else gets 501.
KNOWN_METHODS = frozenset({"REGISTER", "PRACK", "SUBSCRIBE", "PUBLISH", "MESSAGE", "REFER", "UPDATE"})
SUPPORTED_SCHEMES = frozenset({"sip"})
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset()
SINGLE_VALUE_HEADERS = ("To", "From", "Call-ID", "CSeq", "Max-Forwards", "Content-Type", "Content-Length")
_DATE = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")
_ACCEPTED_BODY = ("application/sdp", "application/*", "*/*")


@dataclass(frozen=True)
class Rejection:
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def syntax_problem(request: SipRequest) -> str | None:
    """The first problem with the fields a response and a dialog depend on, or None."""
    missing = [name for name in ("Via", "From", "To", "Call-ID", "CSeq") if request.get(name) is None]
    if missing:
        return f"missing header field(s): {', '.join(missing)}"
    for name in SINGLE_VALUE_HEADERS:
        if request.count(name) > 1:
            return f"more than one {name} header field"
    try:
        cseq = parse_cseq(request.get("CSeq") or "")
        if cseq.method != request.method:
            return f"CSeq method {cseq.method} does not match the request method {request.method}"
        for hop in request.get_list("Via"):
            parse_via(hop)
        parse_name_addr(request.get("From") or "", "From")
        parse_name_addr(request.get("To") or "", "To")
        for contact in request.get_list("Contact"):
            if contact != "*":
                parse_name_addr(contact, "Contact")
        for name in ("Record-Route", "Route"):
            for hop in request.get_list(name):
                parse_name_addr(hop, name)
    except HeaderError as err:
        return str(err)
    max_forwards = request.get("Max-Forwards")
    if max_forwards is not None and (not max_forwards.isdigit() or int(max_forwards) > 255):
        return f"Max-Forwards {max_forwards[:20]!r} is not a number from 0 to 255"
    if not request.get("Call-ID"):
        return "empty Call-ID"
    date = request.get("Date")
    if date is not None and not _DATE.match(date):
        return "Date must be an RFC 1123 date in GMT"
    if not request.uri.lower().startswith(("sip:", "sips:")):
        return _foreign_uri_problem(request.uri)
    try:
        uri = parse_uri(request.uri, "Request-URI")
    except HeaderError as err:
        return str(err)
    if uri.has_headers:
        return "Request-URI must not carry header fields ('?')"
    return None


def _foreign_uri_problem(uri: str) -> str | None:
    try:
        parse_uri(uri, "Request-URI")
    except HeaderError as err:
        return str(err)
    return None  # a well-formed URI of another scheme: 416, decided below


def check_request(request: SipRequest, *, secure: bool = False) -> Rejection | None:
    """``None`` when the request can be served, else the response it must get (``sips:`` only over
    TLS: ``secure``)."""
    problem = syntax_problem(request)
    if problem is not None:
        return Rejection(400, f"Bad Request ({problem})"[:200])
    allow = (("Allow", ", ".join(SUPPORTED_METHODS)),)
    if request.method not in SUPPORTED_METHODS:
        if request.method in KNOWN_METHODS:
            return Rejection(405, "Method Not Allowed", allow)
        return Rejection(501, "Not Implemented", allow)
    schemes = SUPPORTED_SCHEMES | {"sips"} if secure else SUPPORTED_SCHEMES
    if request.uri.partition(":")[0].lower() not in schemes:
        return Rejection(416, "Unsupported URI Scheme")
    if request.method not in ("ACK", "CANCEL"):
        unsupported = [opt for opt in request.get_list("Require") if opt and opt not in SUPPORTED_EXTENSIONS]
        if unsupported:
            return Rejection(420, "Bad Extension", (("Unsupported", ", ".join(unsupported)),))
    if request.method == "INVITE":
        content_type = (request.get("Content-Type") or "").split(";")[0].strip().lower()
        if request.body and content_type != "application/sdp":
            return Rejection(415, "Unsupported Media Type", (("Accept", "application/sdp"),))
        accepts = [value.split(";")[0].strip().lower() for value in request.get_list("Accept")]
        if accepts and not any(value in _ACCEPTED_BODY for value in accepts):
            return Rejection(406, "Not Acceptable", (("Accept", "application/sdp"),))
    return None
