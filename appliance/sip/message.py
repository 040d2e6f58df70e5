"""SIP messages (RFC 3261 section 7): framing, parse and serialize.

A message keeps its header fields as (name, value) pairs in wire order, names in their canonical
spelling (compact forms expanded), values with folded lines joined. Parsing here is the framing only;
``headers.py`` reads the individual fields and ``checks.py`` decides whether a request is acceptable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SIP_VERSION = "SIP/2.0"
CRLF = "\r\n"

COMPACT_FORMS = {
    "a": "Accept-Contact",
    "b": "Referred-By",
    "c": "Content-Type",
    "e": "Content-Encoding",
    "f": "From",
    "i": "Call-ID",
    "k": "Supported",
    "l": "Content-Length",
    "m": "Contact",
    "o": "Event",
    "r": "Refer-To",
    "s": "Subject",
    "t": "To",
    "u": "Allow-Events",
    "v": "Via",
    "x": "Session-Expires",
    "y": "Identity",
}
_CANONICAL = {
    name.lower(): name
    for name in (
        "Accept",
        "Allow",
        "Call-ID",
        "Contact",
        "Content-Length",
        "Content-Type",
        "CSeq",
        "Date",
        "From",
        "Max-Forwards",
        "Proxy-Require",
        "Reason",
        "Record-Route",
        "Require",
        "Route",
        "Server",
        "Supported",
        "To",
        "Unsupported",
        "User-Agent",
        "Via",
        "Warning",
        "Retry-After",
        *COMPACT_FORMS.values(),
    )
}
_TOKEN = re.compile(r"^[A-Za-z0-9\-.!%*_+`'~]+$")
_VERSION = re.compile(r"^SIP/(\d+)\.(\d+)$", re.IGNORECASE)


class SipSyntaxError(ValueError):
    """A datagram that is not a well-formed SIP message.

    ``status`` is the response a request deserves (400, or 505 for another SIP version); ``message``
    is whatever could be read of it, so the response can still carry its Via, From, To, Call-ID, CSeq.
    """

    def __init__(self, problem: str, *, status: int = 400, message: SipMessage | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.status = status
        self.message = message


def canonical_name(name: str) -> str:
    lowered = name.lower()
    if lowered in COMPACT_FORMS:
        return COMPACT_FORMS[lowered]
    return _CANONICAL.get(lowered, name)


def is_token(text: str) -> bool:
    return bool(_TOKEN.match(text))


def split_outside_quotes(text: str, separator: str, *, angle_brackets: bool = False) -> list[str]:
    """Split at ``separator`` outside quoted strings (and outside <...> when ``angle_brackets``)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    angle = 0
    for char in text:
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif angle_brackets and char == "<":
            angle += 1
        elif angle_brackets and char == ">":
            angle = max(0, angle - 1)
        elif char == separator and angle == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def split_list(value: str) -> list[str]:
    """Split a header value at commas outside quoted strings and <...>; elements are stripped."""
    return [part.strip() for part in split_outside_quotes(value, ",", angle_brackets=True)]


@dataclass
class SipMessage:
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def get(self, name: str) -> str | None:
        """The first field named ``name`` (any spelling, compact forms too), or None."""
        wanted = canonical_name(name)
        return next((value for key, value in self.headers if key == wanted), None)

    def get_all(self, name: str) -> list[str]:
        wanted = canonical_name(name)
        return [value for key, value in self.headers if key == wanted]

    def get_list(self, name: str) -> list[str]:
        """Every element of a list header across all its fields, e.g. each Via hop in order."""
        return [part for value in self.get_all(name) for part in split_list(value)]

    def count(self, name: str) -> int:
        wanted = canonical_name(name)
        return sum(1 for key, _ in self.headers if key == wanted)

    def set(self, name: str, value: str) -> None:
        """Replace every field named ``name`` by one with ``value`` (appended if absent)."""
        wanted = canonical_name(name)
        kept = [(key, val) for key, val in self.headers if key != wanted]
        index = next((i for i, (key, _) in enumerate(self.headers) if key == wanted), len(kept))
        kept.insert(min(index, len(kept)), (wanted, value))
        self.headers = kept

    def add(self, name: str, value: str) -> None:
        self.headers.append((canonical_name(name), value))

    def remove(self, name: str) -> None:
        wanted = canonical_name(name)
        self.headers = [(key, val) for key, val in self.headers if key != wanted]

    def start_line(self) -> str:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        lines = [self.start_line()]
        lines += [f"{name}: {value}" for name, value in self.headers if name != "Content-Length"]
        lines.append(f"Content-Length: {len(self.body)}")
        return (CRLF.join(lines) + CRLF + CRLF).encode("utf-8") + self.body


@dataclass
class SipRequest(SipMessage):
    method: str = "OPTIONS"
    uri: str = ""
    version: str = SIP_VERSION

    def start_line(self) -> str:
        return f"{self.method} {self.uri} {self.version}"


@dataclass
class SipResponse(SipMessage):
    status: int = 200
    reason: str = "OK"
    version: str = SIP_VERSION

    def start_line(self) -> str:
        return f"{self.version} {self.status} {self.reason}"


def parse_message(data: bytes) -> SipRequest | SipResponse:
    """Frame one SIP message from a UDP datagram.

    Leading CRLFs (keep-alives) are skipped; the body is Content-Length bytes, or the rest of the
    datagram without one; bytes after the body are ignored (RFC 3261 section 18.3).
    """
    data = data.lstrip(b"\r\n")
    end = data.find(b"\r\n\r\n")
    if end < 0:
        raise SipSyntaxError("no empty line after the header fields")
    try:
        head = data[:end].decode("utf-8")
    except UnicodeDecodeError as err:
        raise SipSyntaxError(f"header section is not UTF-8 (byte {err.start})") from err
    rest = data[end + 4 :]
    lines = head.split(CRLF)
    start, header_lines = lines[0], lines[1:]
    message = _parse_start_line(start)
    message.headers = _parse_header_lines(header_lines, message)
    message.body = _read_body(rest, message)
    if isinstance(message, SipRequest):
        match = _VERSION.match(message.version)
        if match is None:
            raise SipSyntaxError(f"bad protocol version {message.version!r}", message=message)
        if message.version != SIP_VERSION:
            raise SipSyntaxError(
                f"SIP version {message.version} is not supported; use SIP/2.0", status=505, message=message
            )
    return message


def _parse_start_line(line: str) -> SipRequest | SipResponse:
    if line.startswith("SIP/"):
        parts = line.split(" ", 2)
        if len(parts) < 3 or not re.fullmatch(r"[1-6]\d\d", parts[1]):
            raise SipSyntaxError(f"bad status line {line[:80]!r}")
        if not _VERSION.match(parts[0]):
            raise SipSyntaxError(f"bad protocol version {parts[0]!r}")
        return SipResponse(status=int(parts[1]), reason=parts[2], version=parts[0])
    parts = line.split(" ")
    if len(parts) != 3 or not all(parts):
        raise SipSyntaxError(
            f"request line must be METHOD SP Request-URI SP SIP-Version with single spaces: {line[:80]!r}"
        )
    method, uri, version = parts
    if not is_token(method):
        raise SipSyntaxError(f"method {method[:40]!r} is not a token")
    return SipRequest(method=method, uri=uri, version=version)


def _parse_header_lines(lines: list[str], message: SipMessage) -> list[tuple[str, str]]:
    unfolded: list[str] = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            if not unfolded:
                raise SipSyntaxError("continuation line before the first header field", message=message)
            unfolded[-1] += " " + line.strip()
        else:
            unfolded.append(line)
    headers: list[tuple[str, str]] = []
    for line in unfolded:
        name, colon, value = line.partition(":")
        name = name.rstrip(" \t")
        if not colon or not is_token(name):
            message.headers = headers
            raise SipSyntaxError(f"malformed header line {line[:60]!r}", message=message)
        headers.append((canonical_name(name), value.strip(" \t")))
    return headers


def _read_body(rest: bytes, message: SipMessage) -> bytes:
    lengths = message.get_all("Content-Length")
    if not lengths:
        return rest
    if len(lengths) > 1:
        raise SipSyntaxError("more than one Content-Length", message=message)
    text = lengths[0].strip()
    if not text.isdigit() or not text.isascii():
        raise SipSyntaxError(f"Content-Length {text[:20]!r} is not a non-negative number", message=message)
    length = int(text)
    if length > len(rest):
        raise SipSyntaxError(
            f"Content-Length {length} is larger than the {len(rest)} bytes of body received", message=message
        )
    return rest[:length]
