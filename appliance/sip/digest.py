"""HTTP digest authentication as SIP uses it (RFC 3261 section 22, RFC 8760 for SHA-256): the answer
to a registrar's or proxy's 401/407 challenge, as an Authorization or Proxy-Authorization header."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from appliance.sip.message import SipResponse

ALGORITHMS = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}
_PARAM = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]+)\s*(?:,|$)')


class ChallengeError(ValueError):
    """A challenge this client cannot answer (another scheme, an unknown algorithm, no nonce)."""


class ChallengeRefused(ChallengeError):
    """A challenge from someone who must not get a digest of the extension's password."""


@dataclass(frozen=True)
class Challenge:
    realm: str
    nonce: str
    algorithm: str = "MD5"
    opaque: str | None = None
    qop: tuple[str, ...] = ()
    stale: bool = False


def parse_challenge(header: str) -> Challenge:
    """A ``WWW-Authenticate`` / ``Proxy-Authenticate`` value, e.g. ``Digest realm="pbx", nonce="..."``."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "digest":
        raise ChallengeError(f"the challenge is {scheme or 'empty'}, not Digest")
    params: dict[str, str] = {}
    position = 0
    while position < len(rest):
        found = _PARAM.match(rest, position)
        if found is None:
            raise ChallengeError(f"unreadable challenge parameters: {rest[position : position + 40]!r}")
        value = found[2]
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[found[1].lower()] = value
        position = found.end()
    if "realm" not in params or "nonce" not in params:
        raise ChallengeError("the challenge has no realm or no nonce")
    algorithm = params.get("algorithm", "MD5").upper()
    if algorithm not in ALGORITHMS:
        raise ChallengeError(f"digest algorithm {algorithm} is not supported (MD5 and SHA-256 are)")
    qop = tuple(q.strip() for q in params.get("qop", "").split(",") if q.strip())
    if qop and "auth" not in qop:
        raise ChallengeError(f"only qop=auth is supported, the challenge offers {','.join(qop)}")
    return Challenge(
        realm=params["realm"],
        nonce=params["nonce"],
        algorithm=algorithm,
        opaque=params.get("opaque"),
        qop=qop,
        stale=params.get("stale", "").lower() == "true",
    )


def challenge_of(response: SipResponse) -> tuple[Challenge, str]:
    """The digest challenge of a 401 (WWW-Authenticate) or 407 (Proxy-Authenticate) and the header
    that answers it (Authorization or Proxy-Authorization). Raises ChallengeError."""
    www = response.status == 401
    challenge = parse_challenge(response.get("WWW-Authenticate" if www else "Proxy-Authenticate") or "")
    return challenge, "Authorization" if www else "Proxy-Authorization"


def answer(
    response: SipResponse, *, method: str, uri: str, username: str, password: str
) -> tuple[Challenge, tuple[str, str]]:
    """``response``'s (a 401 or 407) challenge, and the header that answers it with these credentials:
    the one digest answerer of REGISTER and REFER. Raises ChallengeError."""
    challenge, header = challenge_of(response)
    value = authorization(challenge, method=method, uri=uri, username=username, password=password)
    return challenge, (header, value)


def _hex(algorithm: str, text: str) -> str:
    return ALGORITHMS[algorithm](text.encode("utf-8")).hexdigest()


def digest_response(
    challenge: Challenge,
    *,
    method: str,
    uri: str,
    username: str,
    password: str,
    cnonce: str,
    nonce_count: int = 1,
) -> str:
    """The ``response`` value (RFC 7616 section 3.4.1)."""
    ha1 = _hex(challenge.algorithm, f"{username}:{challenge.realm}:{password}")
    ha2 = _hex(challenge.algorithm, f"{method}:{uri}")
    if challenge.qop:
        return _hex(challenge.algorithm, f"{ha1}:{challenge.nonce}:{nonce_count:08x}:{cnonce}:auth:{ha2}")
    return _hex(challenge.algorithm, f"{ha1}:{challenge.nonce}:{ha2}")


def authorization(
    challenge: Challenge,
    *,
    method: str,
    uri: str,
    username: str,
    password: str,
    nonce_count: int = 1,
    cnonce: str | None = None,
) -> str:
    """The Authorization (or Proxy-Authorization) header value answering ``challenge``."""
    cnonce = cnonce or secrets.token_hex(8)
    response = digest_response(
        challenge,
        method=method,
        uri=uri,
        username=username,
        password=password,
        cnonce=cnonce,
        nonce_count=nonce_count,
    )
    fields = [
        f'username="{_quoted(username)}"',
        f'realm="{_quoted(challenge.realm)}"',
        f'nonce="{_quoted(challenge.nonce)}"',
        f'uri="{_quoted(uri)}"',
        f'response="{response}"',
        f"algorithm={challenge.algorithm}",
    ]
    if challenge.opaque is not None:
        fields.append(f'opaque="{_quoted(challenge.opaque)}"')
    if challenge.qop:
        fields += ["qop=auth", f"nc={nonce_count:08x}", f'cnonce="{cnonce}"']
    return "Digest " + ", ".join(fields)


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class ExtensionSecret:
    """The extension's credentials and who may ask for them: the registrar's address, and the realm it
    challenged the registration with (None until it has)."""

    user: str
    password: str
    registrar: tuple[str, int]
    realm: str | None = None

    def answer(
        self, response: SipResponse, sent_to: tuple[str, int], *, method: str, uri: str
    ) -> tuple[str, str]:
        """The header answering ``response``'s challenge to a request that was sent to ``sent_to``, when
        that peer may have it. Raises ChallengeError (ChallengeRefused when it may not)."""
        challenge, credentials = answer(
            response, method=method, uri=uri, username=self.user, password=self.password
        )
        refused = self.refusal(challenge, sent_to)
        if refused is not None:
            raise ChallengeRefused(refused)  # the digest made here is dropped, never sent
        return credentials

    def refusal(self, challenge: Challenge, sent_to: tuple[str, int]) -> str | None:
        """Why a request sent to ``sent_to`` must not be repeated with a digest of the password for
        ``challenge``; None when it may. The repeated request goes where the first went, so a request
        to anyone but the phone system (a REFER to a caller's own contact) would hand its digest to
        someone who could guess the password from it offline, whoever the 401 claims to come from."""
        if sent_to != self.registrar:
            return (
                f"a request to {sent_to[0]}:{sent_to[1]} was challenged for the extension's password, but "
                f"only requests to the phone system at sip.registrar ({self.registrar[0]}:"
                f"{self.registrar[1]}) carry it"
            )
        if self.realm is not None and challenge.realm != self.realm:
            return (
                f"the challenge is for realm {challenge.realm[:64]!r}, not the phone system's "
                f"{self.realm[:64]!r} (learnt at registration)"
            )
        return None
