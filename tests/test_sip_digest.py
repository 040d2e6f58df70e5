"""Digest authentication answers: RFC 7616's own examples (MD5 and SHA-256), challenges this client
cannot answer named, and the extension's password answered only to the phone system."""

from __future__ import annotations

import pytest

from appliance.sip.digest import (
    ChallengeError,
    ChallengeRefused,
    ExtensionSecret,
    authorization,
    digest_response,
    parse_challenge,
)
from appliance.sip.message import SipResponse

# RFC 7616 section 3.9.1: user Mufasa, password "Circle of Life", GET /dir/index.html.
RFC_CHALLENGE = (
    'Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm={algorithm}, '
    'nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"'
)
RFC_CNONCE = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("MD5", "8ca523f5e9506fed4657c9700eebdbec"),
        ("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"),
    ],
)
def test_the_rfc_examples_give_the_rfc_responses(algorithm: str, expected: str) -> None:
    challenge = parse_challenge(RFC_CHALLENGE.format(algorithm=algorithm))
    assert challenge.algorithm == algorithm and challenge.qop == ("auth", "auth-int")
    response = digest_response(
        challenge,
        method="GET",
        uri="/dir/index.html",
        username="Mufasa",
        password="Circle of Life",
        cnonce=RFC_CNONCE,
    )
    assert response == expected


def test_the_header_carries_what_the_server_needs_and_escapes_quotes() -> None:
    challenge = parse_challenge('Digest realm="pbx \\"east\\"", nonce="abc", stale=TRUE')
    assert challenge.realm == 'pbx "east"' and challenge.stale and challenge.qop == ()
    header = authorization(
        challenge, method="REGISTER", uri="sip:10.0.0.1", username="kiosk", password="s3cret"
    )
    assert header.startswith(
        'Digest username="kiosk", realm="pbx \\"east\\"", nonce="abc", uri="sip:10.0.0.1"'
    )
    assert "algorithm=MD5" in header and "qop" not in header and "s3cret" not in header


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ('Basic realm="pbx"', "not Digest"),
        ('Digest realm="pbx"', "no realm or no nonce"),
        ('Digest realm="pbx", nonce="n", algorithm=SHA-512-256', "SHA-512-256 is not supported"),
        ('Digest realm="pbx", nonce="n", qop="auth-int"', "only qop=auth"),
        ('Digest realm="pbx", nonce', "unreadable"),
    ],
)
def test_challenges_it_cannot_answer_are_named(header: str, problem: str) -> None:
    with pytest.raises(ChallengeError, match=problem):
        parse_challenge(header)


def _challenge(status: int, realm: str = "pbx") -> SipResponse:
    response = SipResponse(status=status, reason="Unauthorized")
    header = "WWW-Authenticate" if status == 401 else "Proxy-Authenticate"
    response.add(header, f'Digest realm="{realm}", nonce="n0"')
    return response


def test_the_extensions_digest_goes_to_the_phone_system_alone() -> None:
    pbx = ("10.0.0.1", 5060)
    secret = ExtensionSecret("kiosk", "s3cret", registrar=pbx, realm="pbx")
    name, value = secret.answer(_challenge(407), pbx, method="REFER", uri="sip:caller@10.0.0.9")
    assert name == "Proxy-Authorization" and 'username="kiosk"' in value and "s3cret" not in value
    assert secret.answer(_challenge(401), pbx, method="REFER", uri="sip:a@b")[0] == "Authorization"
    with pytest.raises(ChallengeRefused, match=r"only requests to the phone system at sip\.registrar"):
        secret.answer(_challenge(401), ("10.0.0.9", 5060), method="REFER", uri="sip:a@b")
    with pytest.raises(ChallengeRefused, match="not the phone system's 'pbx'"):
        secret.answer(_challenge(401, realm="other"), pbx, method="REFER", uri="sip:a@b")
