"""SRTP for a call's media (RFC 3711) through libsrtp (pylibsrtp), with the keys from SDP (SDES, RFC 4568).

Each side of a call chooses its own master key and says it in its SDP ``a=crypto`` line: the caller's
key opens what it sends, the appliance's protects what the appliance sends. A packet that fails
authentication (or replays one already taken) is dropped and counted, never decoded.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from pylibsrtp import Error as SrtpLibraryError
from pylibsrtp import Policy, Session

# The suites the appliance takes (their SDES names) and libsrtp's profile for each.
SUITES: dict[str, int] = {
    "AES_CM_128_HMAC_SHA1_80": Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}
MASTER_KEY_BYTES = 30  # 16 bytes of key, 14 of salt, for both suites


class SrtpRejected(Exception):
    """A packet that did not authenticate, or one already received."""


@dataclass(frozen=True)
class CryptoOffer:
    """One ``a=crypto`` line: its tag, suite and the sender's master key (key and salt)."""

    tag: int
    suite: str
    key: bytes

    def line(self) -> str:
        return f"a=crypto:{self.tag} {self.suite} inline:{base64.b64encode(self.key).decode('ascii')}"


def parse_crypto(value: str) -> CryptoOffer | None:
    """``TAG SUITE inline:KEY[|lifetime][|MKI:len] [params]`` as a CryptoOffer; None for a line the
    appliance cannot use (another suite, a master key index, session parameters, several keys)."""
    parts = value.split()
    if len(parts) != 3 or not parts[0].isdigit() or len(parts[0]) > 9 or parts[1] not in SUITES:
        return None
    method, _, key_info = parts[2].partition(":")
    if method != "inline" or not key_info:
        return None
    encoded, *extra = key_info.split("|")
    if any(":" in item for item in extra):  # an MKI: the appliance keeps one key per direction
        return None
    try:
        key = base64.b64decode(encoded, validate=True)
    except ValueError:
        return None
    if len(key) != MASTER_KEY_BYTES:
        return None
    return CryptoOffer(int(parts[0]), parts[1], key)


def our_crypto(offer: CryptoOffer) -> CryptoOffer:
    """The answer to an offered key: the same tag and suite, a fresh key of the appliance's."""
    return CryptoOffer(offer.tag, offer.suite, secrets.token_bytes(MASTER_KEY_BYTES))


@dataclass(frozen=True)
class SrtpKeys:
    """A call's agreed keys: ``local`` protects what the appliance sends, ``remote`` opens what arrives."""

    suite: str
    local: bytes
    remote: bytes


class SrtpSession:
    """Both directions of one call's SRTP and SRTCP."""

    def __init__(self, keys: SrtpKeys) -> None:
        profile = SUITES[keys.suite]
        self._out = Session(Policy(key=keys.local, ssrc_type=Policy.SSRC_ANY_OUTBOUND, srtp_profile=profile))
        self._in = Session(Policy(key=keys.remote, ssrc_type=Policy.SSRC_ANY_INBOUND, srtp_profile=profile))

    def protect(self, rtp: bytes) -> bytes:
        return bytes(self._out.protect(rtp))

    def unprotect(self, srtp: bytes) -> bytes:
        try:
            return bytes(self._in.unprotect(srtp))
        except SrtpLibraryError as err:
            raise SrtpRejected(str(err)) from None

    def unprotect_rtcp(self, srtcp: bytes) -> bytes:
        try:
            return bytes(self._in.unprotect_rtcp(srtcp))
        except SrtpLibraryError as err:
            raise SrtpRejected(str(err)) from None
