"""SDP offer/answer for one audio stream (RFC 4566, RFC 3264).

The appliance speaks G.711 only: it picks the first of PCMU/PCMA in the caller's order, adds
telephone-event (RFC 4733) when offered, and rejects every other media line with port 0. With
``sip.media_encryption`` it takes SRTP offers (RTP/SAVP, keys in ``a=crypto`` lines, RFC 4568) and, set to
"srtp", refuses plain RTP.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Literal

from appliance.rtp.srtp import CryptoOffer, SrtpKeys, our_crypto, parse_crypto

STATIC_PAYLOADS = {0: ("PCMU", 8000), 8: ("PCMA", 8000)}
SUPPORTED_CODECS = ("PCMU", "PCMA")
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
PLAIN, SECURE = "RTP/AVP", "RTP/SAVP"
Encryption = Literal["none", "optional", "srtp"]
_REVERSE = {"sendrecv": "sendrecv", "sendonly": "recvonly", "recvonly": "sendonly", "inactive": "inactive"}


class SdpError(ValueError):
    """A session description that cannot be read or has nothing the appliance can use."""


@dataclass
class MediaSection:
    media: str
    port: int
    protocol: str
    formats: list[str]
    connection: str | None = None
    rtpmap: dict[int, tuple[str, int]] = field(default_factory=dict)
    fmtp: dict[int, str] = field(default_factory=dict)
    direction: str | None = None
    ptime_ms: int | None = None
    crypto: list[CryptoOffer] = field(default_factory=list)  # the usable a=crypto lines, in offered order
    crypto_lines: int = 0  # every a=crypto line, usable or not

    @property
    def srtp(self) -> bool:
        return self.protocol.upper() == SECURE


@dataclass
class SessionDescription:
    origin: str = ""
    connection: str | None = None
    direction: str = "sendrecv"
    media: list[MediaSection] = field(default_factory=list)


@dataclass(frozen=True)
class AudioAnswer:
    """What was agreed: where to send, which codec, and the answer text to send back."""

    remote_host: str
    remote_port: int
    codec: str
    payload_type: int
    telephone_event_pt: int | None
    direction: str  # as seen from the appliance
    sdp: str
    srtp: SrtpKeys | None = None


def parse_sdp(data: bytes | str) -> SessionDescription:
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as err:
        raise SdpError(f"session description is not UTF-8 (byte {err.start})") from err
    session = SessionDescription()
    current: MediaSection | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if not line:
            continue
        if len(line) < 2 or line[1] != "=":
            raise SdpError(f"line {line[:40]!r} is not 'type=value'")
        kind, value = line[0], line[2:]
        if kind == "o":
            session.origin = value
        elif kind == "c":
            address = _connection_address(value)
            if current is None:
                session.connection = address
            else:
                current.connection = address
        elif kind == "m":
            current = _media_line(value)
            session.media.append(current)
        elif kind == "a":
            _attribute(value, session, current)
    if not session.media:
        raise SdpError("no m= line")
    return session


class SdpHostName(SdpError):
    """A connection address given as a host name: legal SDP, but resolving it would send a DNS query
    from the media path (and block it); the appliance takes IP addresses only."""


def _connection_address(value: str) -> str:
    parts = value.split()
    if len(parts) != 3 or parts[0] != "IN" or parts[1] not in ("IP4", "IP6"):
        raise SdpError(f"c= line {value[:40]!r} is not 'IN IP4 address'")
    text = parts[2].split("/")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise SdpHostName(
            f"c= address {text[:60]!r} is a host name, not an IP address (this device resolves no "
            "names for media: have the phone system send its media address as a number)"
        ) from None
    if address.version != (4 if parts[1] == "IP4" else 6):
        raise SdpError(f"c= line {value[:60]!r}: {text} is not an {parts[1]} address")
    return text


def _media_line(value: str) -> MediaSection:
    parts = value.split()
    if len(parts) < 4 or not parts[1].split("/")[0].isdigit():
        raise SdpError(f"m= line {value[:60]!r} is not 'media port proto formats'")
    port = int(parts[1].split("/")[0])
    if port > 65535:
        raise SdpError(f"m= port {port} is out of range")
    return MediaSection(media=parts[0], port=port, protocol=parts[2], formats=parts[3:])


def _attribute(value: str, session: SessionDescription, media: MediaSection | None) -> None:
    name, _, rest = value.partition(":")
    if name in DIRECTIONS:
        if media is None:
            session.direction = name
        else:
            media.direction = name
        return
    if media is None:
        return
    if name == "rtpmap":
        pt_text, _, encoding = rest.partition(" ")
        parts = encoding.strip().split("/")
        if pt_text.isdigit() and len(parts) >= 2 and parts[1].isdigit():
            media.rtpmap[int(pt_text)] = (parts[0], int(parts[1]))
    elif name == "fmtp":
        pt_text, _, params = rest.partition(" ")
        if pt_text.isdigit():
            media.fmtp[int(pt_text)] = params.strip()
    elif name == "ptime" and rest.strip().isdigit():
        media.ptime_ms = int(rest.strip())
    elif name == "crypto":
        media.crypto_lines += 1
        crypto = parse_crypto(rest)
        if crypto is not None and len(media.crypto) < 16:
            media.crypto.append(crypto)


def _encoding(media: MediaSection, fmt: str) -> tuple[str, int] | None:
    if not fmt.isdigit():
        return None
    pt = int(fmt)
    if pt in media.rtpmap:
        name, rate = media.rtpmap[pt]
        return name.upper() if name.upper() in SUPPORTED_CODECS else name.lower(), rate
    return STATIC_PAYLOADS.get(pt)


def negotiate(
    offer: SessionDescription,
    *,
    local_host: str,
    local_port: int,
    session_id: int,
    session_version: int,
    codecs: tuple[str, ...] = SUPPORTED_CODECS,
    encryption: Encryption = "none",
) -> AudioAnswer:
    """Answer ``offer``: the first usable audio line gets the local port, every other line port 0.
    ``encryption`` "optional" prefers an SRTP line to a plain one; "srtp" takes SRTP lines only."""
    usable: list[tuple[int, MediaSection, str, int, int | None, CryptoOffer | None]] = []
    for index, media in enumerate(offer.media):
        if media.media != "audio" or media.port == 0 or media.protocol.upper() not in (PLAIN, SECURE):
            continue
        crypto = media.crypto[0] if media.crypto and encryption != "none" else None
        if media.srtp and crypto is None:
            continue  # SRTP we cannot key (or were told not to use)
        if encryption == "srtp" and crypto is None:
            continue
        found = [(int(fmt), enc) for fmt in media.formats if (enc := _encoding(media, fmt)) is not None]
        audio = [(pt, enc[0]) for pt, enc in found if enc[0] in codecs and enc[1] == 8000]
        if not audio:
            continue
        events = [pt for pt, enc in found if enc == ("telephone-event", 8000)]
        usable.append((index, media, audio[0][1], audio[0][0], events[0] if events else None, crypto))
    if not usable:
        raise SdpError(_nothing_usable(offer, encryption))
    index, media, codec, pt, event_pt, crypto = next((u for u in usable if u[5] is not None), usable[0])
    remote_host = media.connection or offer.connection
    if remote_host is None:
        raise SdpError("the audio line has no connection address (c=)")
    offered_direction = media.direction or offer.direction
    if remote_host in ("0.0.0.0", "::"):  # RFC 2543 hold
        offered_direction = "sendonly" if offered_direction == "sendrecv" else offered_direction
    direction = _REVERSE.get(offered_direction, "sendrecv")
    mine = our_crypto(crypto) if crypto is not None else None
    lines = [
        "v=0",
        f"o=appliance {session_id} {session_version} IN IP4 {local_host}",
        "s=appliance",
        f"c=IN IP4 {local_host}",
        "t=0 0",
    ]
    for i, other in enumerate(offer.media):
        if i != index:
            lines.append(f"m={other.media} 0 {other.protocol} {' '.join(other.formats)}")
            continue
        formats = [str(pt)] + ([str(event_pt)] if event_pt is not None else [])
        lines.append(f"m=audio {local_port} {media.protocol} {' '.join(formats)}")
        if mine is not None:
            lines.append(mine.line())
        lines.append(f"a=rtpmap:{pt} {codec}/8000")
        if event_pt is not None:
            lines.append(f"a=rtpmap:{event_pt} telephone-event/8000")
            lines.append(f"a=fmtp:{event_pt} 0-16")
        lines.append("a=ptime:20")
        lines.append(f"a={direction}")
    return AudioAnswer(
        remote_host=remote_host,
        remote_port=media.port,
        codec=codec,
        payload_type=pt,
        telephone_event_pt=event_pt,
        direction=direction,
        sdp="\r\n".join(lines) + "\r\n",
        srtp=None if crypto is None or mine is None else SrtpKeys(crypto.suite, mine.key, crypto.key),
    )


def _nothing_usable(offer: SessionDescription, encryption: Encryption) -> str:
    offered = ", ".join(f"{m.media} {m.protocol} {' '.join(m.formats)}" for m in offer.media)
    audio = [m for m in offer.media if m.media == "audio" and m.port != 0]
    if audio and any(m.crypto_lines and not m.crypto for m in audio) and not any(m.crypto for m in audio):
        return (
            f"SRTP offered with no key this device can use ({offered}): it takes AES_CM_128_HMAC_SHA1_80 or "
            "_32 with one inline key and no MKI"
        )
    if encryption == "srtp" and audio and not any(m.crypto for m in audio):
        return (
            f'plain RTP offered ({offered}) but this device requires SRTP (sip.media_encryption = "srtp"): '
            "have the phone system offer SRTP with SDES keys (RTP/SAVP, a=crypto AES_CM_128_HMAC_SHA1_80), "
            'or set sip.media_encryption = "optional"'
        )
    if encryption == "none" and audio and all(m.srtp for m in audio):
        return (
            f'only SRTP offered ({offered}) and sip.media_encryption is "none": set it to "optional" '
            'or "srtp" to take encrypted calls'
        )
    return f"no audio line with PCMU or PCMA at 8000 Hz over RTP/AVP or RTP/SAVP (offered: {offered})"


def new_crypto() -> CryptoOffer:
    """The appliance's key for an offer of its own."""
    return our_crypto(CryptoOffer(1, "AES_CM_128_HMAC_SHA1_80", b""))


def keys_from_answer(answer: SessionDescription, offered: CryptoOffer | None) -> SrtpKeys | None:
    """The call's keys when the appliance offered ``offered``: the answer's key with the same tag."""
    if offered is None:
        return None
    for media in answer.media:
        if media.media == "audio" and media.port != 0:
            for crypto in media.crypto:
                if crypto.tag == offered.tag and crypto.suite == offered.suite:
                    return SrtpKeys(offered.suite, offered.key, crypto.key)
    return None


def build_offer(
    *,
    local_host: str,
    local_port: int,
    session_id: int,
    session_version: int,
    crypto: CryptoOffer | None = None,
    srtp_only: bool = False,
) -> str:
    """The appliance's own offer, for an INVITE that came without one (answer arrives in the ACK): with
    ``crypto`` a key for SRTP, over RTP/SAVP when ``srtp_only`` (else RTP/AVP, taken either way)."""
    protocol = SECURE if crypto is not None and srtp_only else PLAIN
    return (
        "\r\n".join(
            [
                "v=0",
                f"o=appliance {session_id} {session_version} IN IP4 {local_host}",
                "s=appliance",
                f"c=IN IP4 {local_host}",
                "t=0 0",
                f"m=audio {local_port} {protocol} 0 8 101",
                *([crypto.line()] if crypto is not None else []),
                "a=rtpmap:0 PCMU/8000",
                "a=rtpmap:8 PCMA/8000",
                "a=rtpmap:101 telephone-event/8000",
                "a=fmtp:101 0-16",
                "a=ptime:20",
                "a=sendrecv",
            ]
        )
        + "\r\n"
    )
