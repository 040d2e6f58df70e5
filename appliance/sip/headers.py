"""Reading the header fields a user agent server relies on: Via, From/To/Contact, CSeq, URIs.

Each ``parse_*`` raises ``HeaderError`` naming the field and what is wrong with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.sip.message import is_token, split_outside_quotes

MAX_CSEQ = 2**31 - 1
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+\-.]*$")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-.]+)$")
_VIA = re.compile(r"^SIP\s*/\s*(\d+\.\d+)\s*/\s*([^\s/;]+)\s+([^\s;]+)\s*(.*)$", re.IGNORECASE | re.DOTALL)
_WS = re.compile(r"\s")
MAGIC_COOKIE = "z9hG4bK"


class HeaderError(ValueError):
    """A header field that cannot be read."""


def parse_params(text: str, where: str) -> dict[str, str | None]:
    """``;name=value;flag`` parameters (LWS allowed around ``;`` and ``=``); names lower-cased."""
    params: dict[str, str | None] = {}
    text = text.strip()
    if not text:
        return params
    if not text.startswith(";"):
        raise HeaderError(f"{where}: unexpected {text[:20]!r} before the parameters")
    for piece in split_outside_quotes(text[1:], ";"):
        name, equals, value = piece.partition("=")
        name, value = name.strip(), value.strip()
        if not name or not is_token(name):
            raise HeaderError(f"{where}: empty or malformed parameter {piece.strip()[:30]!r}")
        if equals:
            if not value or not (is_token(value) or _is_quoted(value) or _HOST.match(value)):
                raise HeaderError(f"{where}: parameter {name!r} has a malformed value {value[:30]!r}")
            params[name.lower()] = value
        else:
            params[name.lower()] = None
    return params


def format_params(params: dict[str, str | None]) -> str:
    return "".join(f";{k}" if v is None else f";{k}={v}" for k, v in params.items())


@dataclass(frozen=True)
class Uri:
    scheme: str
    user: str | None = None
    host: str = ""
    port: int | None = None
    params: dict[str, str | None] = field(default_factory=dict)
    has_headers: bool = False
    text: str = ""

    def __str__(self) -> str:
        return self.text


def parse_uri(text: str, where: str = "URI") -> Uri:
    if not text or _WS.search(text):
        raise HeaderError(f"{where}: URI {text[:60]!r} is empty or contains whitespace")
    scheme, colon, rest = text.partition(":")
    if not colon or not _SCHEME.match(scheme) or not rest:
        raise HeaderError(f"{where}: {text[:60]!r} does not start with a URI scheme")
    if scheme.lower() not in ("sip", "sips"):
        return Uri(scheme=scheme.lower(), text=text)
    user: str | None = None
    at = rest.rfind("@")
    if at >= 0:
        user, rest = rest[:at], rest[at + 1 :]
    hostport, _, after = rest.partition(";")
    has_headers = "?" in rest
    if has_headers:
        hostport = hostport.partition("?")[0]
        after = after.partition("?")[0]
    host, port = _split_hostport(hostport, where)
    params = parse_params(";" + after, where) if after else {}
    return Uri(scheme.lower(), user, host, port, params, has_headers, text)


def _split_hostport(hostport: str, where: str) -> tuple[str, int | None]:
    if hostport.startswith("["):
        close = hostport.find("]")
        host, port_text = hostport[: close + 1], hostport[close + 1 :]
        port_text = port_text[1:] if port_text.startswith(":") else port_text
    else:
        host, _, port_text = hostport.partition(":")
    if not host or not _HOST.match(host):
        raise HeaderError(f"{where}: bad host {host[:40]!r}")
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise HeaderError(f"{where}: bad port {port_text[:10]!r}")
    return host, int(port_text)


@dataclass(frozen=True)
class NameAddr:
    """A From, To, Contact, Route or Record-Route value."""

    uri: str
    display: str | None = None
    params: dict[str, str | None] = field(default_factory=dict)

    @property
    def tag(self) -> str | None:
        return self.params.get("tag")


def parse_name_addr(value: str, where: str) -> NameAddr:
    text = value.strip()
    display: str | None = None
    if text.startswith('"'):
        close = _closing_quote(text)
        if close < 0:
            raise HeaderError(f"{where}: unterminated quoted display name")
        display, text = text[: close + 1], text[close + 1 :].lstrip()
        if not text.startswith("<"):
            raise HeaderError(f"{where}: a quoted display name must be followed by <URI>")
    elif "<" in text:
        display = text[: text.index("<")].strip()
        if display and not all(is_token(word) for word in display.split()):
            raise HeaderError(f"{where}: display name {display[:40]!r} must be quoted")
        text = text[text.index("<") :]
    if text.startswith("<"):
        close = text.find(">")
        if close < 0:
            raise HeaderError(f"{where}: '<' without '>'")
        uri, rest = text[1:close], text[close + 1 :]
        if uri != uri.strip():
            raise HeaderError(f"{where}: whitespace inside <{uri.strip()[:40]}>")
        parse_uri(uri, where)
    else:
        uri, _, rest = text.partition(";")
        rest = ";" + rest if rest or text.endswith(";") else ""
        uri = uri.strip()
        if "?" in uri or "," in uri:
            raise HeaderError(f"{where}: a URI with '?' or ',' must be enclosed in <>")
        parse_uri(uri, where)
    return NameAddr(uri=uri, display=display or None, params=parse_params(rest, where))


@dataclass(frozen=True)
class Via:
    transport: str
    host: str
    port: int | None
    params: dict[str, str | None]

    @property
    def branch(self) -> str | None:
        return self.params.get("branch")


def parse_via(value: str) -> Via:
    match = _VIA.match(value.strip())
    if match is None:
        raise HeaderError(f"Via: cannot read {value[:60]!r}; expected SIP/2.0/UDP host[:port];params")
    version, transport, sent_by, rest = match.groups()
    if version != "2.0":
        raise HeaderError(f"Via: SIP version {version} is not 2.0")
    host, port = _split_hostport(sent_by, "Via")
    params = parse_params(rest, "Via")
    for key in ("branch", "received", "maddr", "ttl"):
        if key in params and params[key] is None:
            raise HeaderError(f"Via: parameter {key!r} needs a value")
    return Via(transport.upper(), host, port, params)


@dataclass(frozen=True)
class CSeq:
    number: int
    method: str


def parse_cseq(value: str) -> CSeq:
    parts = value.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[0].isascii():
        raise HeaderError(f"CSeq: expected 'number METHOD', got {value[:40]!r}")
    number = int(parts[0])
    if number > MAX_CSEQ:
        raise HeaderError(f"CSeq: {parts[0][:24]} is larger than 2**31 - 1")
    if not is_token(parts[1]):
        raise HeaderError(f"CSeq: method {parts[1][:30]!r} is not a token")
    return CSeq(number, parts[1])


def _closing_quote(text: str) -> int:
    escaped = False
    for index in range(1, len(text)):
        char = text[index]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            return index
    return -1


def _is_quoted(text: str) -> bool:
    return text.startswith('"') and _closing_quote(text) == len(text) - 1
