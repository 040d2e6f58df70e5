"""Digest authentication answers: RFC 7616's own examples (MD5 and SHA-256), and challenges this client
cannot answer named."""

from __future__ import annotations

import pytest

from appliance.sip.digest import ChallengeError, authorization, digest_response, parse_challenge

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
