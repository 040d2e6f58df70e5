"""SIP message framing, header fields, request checks and responses, with plain values."""

from __future__ import annotations

import pytest

from appliance.sip.checks import check_request
from appliance.sip.dialog import make_response
from appliance.sip.headers import HeaderError, parse_cseq, parse_name_addr, parse_uri, parse_via
from appliance.sip.message import SipRequest, SipResponse, SipSyntaxError, parse_message, split_list


def invite(
    *extra: str, body: str = "", top_via: str = "SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK776asdhds;rport"
) -> bytes:
    lines = [
        "INVITE sip:appliance@192.0.2.1 SIP/2.0",
        f"Via: {top_via}",
        "Via: SIP/2.0/UDP 192.0.2.20;branch=z9hG4bKnashds8",
        "Max-Forwards: 70",
        'From: "Alice" <sip:alice@example.com>;tag=1928301774',
        "To: <sip:appliance@192.0.2.1>",
        "Call-ID: a84b4c76e66710@pc33.example.com",
        "CSeq: 314159 INVITE",
        "Contact: <sip:alice@192.0.2.10:5062>",
        "Record-Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>",
        "Record-Route: <sip:p3.example.com;lr>",
        *extra,
    ]
    if body:
        lines.append("Content-Type: application/sdp")
    return ("\r\n".join(lines) + f"\r\nContent-Length: {len(body)}\r\n\r\n" + body).encode()


def test_request_parses_with_fields_in_order_and_body() -> None:
    message = parse_message(invite(body="v=0\r\n"))
    assert isinstance(message, SipRequest)
    assert (message.method, message.uri, message.version) == ("INVITE", "sip:appliance@192.0.2.1", "SIP/2.0")
    assert message.get_list("Via")[1] == "SIP/2.0/UDP 192.0.2.20;branch=z9hG4bKnashds8"
    assert message.get_list("Record-Route") == [
        "<sip:p1.example.com;lr>",
        "<sip:p2.example.com;lr>",
        "<sip:p3.example.com;lr>",
    ]
    assert message.body == b"v=0\r\n"
    assert check_request(message) is None


def test_compact_forms_and_case_map_to_canonical_names() -> None:
    data = (
        b"OPTIONS sip:a@b SIP/2.0\r\nv: SIP/2.0/UDP h;branch=z9hG4bK1\r\nf: <sip:x@y>;tag=1\r\nt: sip:a@b\r\n"
        b"i: abc\r\nCSEQ: 1 OPTIONS\r\nm: <sip:x@h>\r\nl: 0\r\nk: timer\r\nc: application/sdp\r\n\r\n"
    )
    message = parse_message(data)
    assert [name for name, _ in message.headers] == [
        "Via", "From", "To", "Call-ID", "CSeq", "Contact", "Content-Length", "Supported", "Content-Type",
    ]  # fmt: skip
    assert message.get("call-id") == message.get("i") == "abc"


def test_folded_lines_are_joined() -> None:
    data = b"OPTIONS sip:a@b SIP/2.0\r\nSubject: first\r\n  second\r\n\tthird\r\nCall-ID: x\r\n\r\n"
    message = parse_message(data)
    assert message.get("Subject") == "first second third"
    assert message.get("Call-ID") == "x"


def test_body_is_content_length_bytes_and_trailing_bytes_are_ignored() -> None:
    data = invite(body="v=0\r\n").replace(b"Content-Length: 5", b"Content-Length: 3") + b"garbage"
    assert parse_message(data).body == b"v=0"
    no_length = invite(body="").replace(b"Content-Length: 0\r\n", b"") + b"rest"
    assert parse_message(no_length).body == b"rest"  # UDP: without Content-Length the body runs to the end


def test_leading_crlf_keepalives_are_skipped() -> None:
    assert isinstance(parse_message(b"\r\n\r\n" + invite()), SipRequest)


@pytest.mark.parametrize(
    ("data", "problem", "status"),
    [
        (b"INVITE sip:a@b SIP/2.0\r\nCall-ID: x\r\n", "no empty line", 400),
        (b"INVITE sip:a@b SIP/2.0 extra\r\n\r\n", "single spaces", 400),
        (b"INV(TE sip:a@b SIP/2.0\r\n\r\n", "not a token", 400),
        (b"INVITE sip:a@b SIP/3.0\r\nCall-ID: x\r\n\r\n", "use SIP/2.0", 505),
        (b"INVITE sip:a@b HTTP/1.1\r\n\r\n", "bad protocol version", 400),
        (b"INVITE sip:a@b SIP/2.0\r\nNo colon here\r\n\r\n", "malformed header line", 400),
        (b"INVITE sip:a@b SIP/2.0\r\n continuation\r\n\r\n", "continuation line", 400),
        (b"INVITE sip:a@b SIP/2.0\r\nContent-Length: 10\r\n\r\nshort", "larger than the 5 bytes", 400),
        (
            b"INVITE sip:a@b SIP/2.0\r\nContent-Length: 1\r\nl: 1\r\n\r\nx",
            "more than one Content-Length",
            400,
        ),
        (b"INVITE sip:a@b SIP/2.0\r\nSubject: \xff\xfe\r\n\r\n", "not UTF-8", 400),
        (b"SIP/2.0 99 Odd\r\n\r\n", "bad status line", 400),
    ],
)
def test_malformed_messages_are_refused_with_the_problem_named(
    data: bytes, problem: str, status: int
) -> None:
    with pytest.raises(SipSyntaxError, match=problem) as caught:
        parse_message(data)
    assert caught.value.status == status


def test_response_parses_and_serializes_with_content_length() -> None:
    response = parse_message(b"SIP/2.0 180 Ringing\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\r\n")
    assert isinstance(response, SipResponse)
    assert (response.status, response.reason) == (180, "Ringing")
    response.body = b"abc"
    assert (
        response.to_bytes()
        == b"SIP/2.0 180 Ringing\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 3\r\n\r\nabc"
    )


def test_serialize_then_parse_round_trip() -> None:
    message = parse_message(invite(body="v=0\r\n"))
    again = parse_message(message.to_bytes())
    assert again == message


def test_split_list_respects_quotes_and_angle_brackets() -> None:
    value = '"Doe, John" <sip:j@x;a=1,2>;q=0.5, <sip:k@y>, sip:z@w'
    assert split_list(value) == ['"Doe, John" <sip:j@x;a=1,2>;q=0.5', "<sip:k@y>", "sip:z@w"]


def test_via_parsing_with_lws_and_parameters() -> None:
    via = parse_via("SIP / 2.0 / udp  [2001:db8::1]:5070 ; branch = z9hG4bKx ; rport ; received=192.0.2.9")
    assert (via.transport, via.host, via.port, via.branch) == ("UDP", "[2001:db8::1]", 5070, "z9hG4bKx")
    assert via.params["rport"] is None and via.params["received"] == "192.0.2.9"
    for bad in [
        "SIP/2.0/UDP",
        "SIP/2.0/UDP host;;",
        "SIP/2.0/UDP host;branch",
        "SIP/3.0/UDP host",
        "SIP/2.0/UDP h:99999",
    ]:
        with pytest.raises(HeaderError):
            parse_via(bad)


def test_name_addr_forms() -> None:
    quoted = parse_name_addr('"J \\"R\\"" <sip:j@example.com;transport=udp>;tag=abc;x', "From")
    assert (quoted.display, quoted.uri, quoted.tag, quoted.params["x"]) == (
        '"J \\"R\\""',
        "sip:j@example.com;transport=udp",
        "abc",
        None,
    )
    bare = parse_name_addr("sip:user@example.com ;tag = 77", "To")
    assert (bare.display, bare.uri, bare.tag) == (None, "sip:user@example.com", "77")
    tokens = parse_name_addr("Alice Smith<sip:a@example.com>", "From")
    assert tokens.display == "Alice Smith"
    for bad in [
        '"open <sip:a@b>',
        "Doe, John <sip:a@b>",
        "< sip:a@b >",
        "sip:a@b?x=y",
        "<sip:a@b",
        "<sip:a@b>;;",
    ]:
        with pytest.raises(HeaderError):
            parse_name_addr(bad, "To")


def test_uri_and_cseq() -> None:
    uri = parse_uri("sip:alice:secret@[2001:db8::5]:5080;transport=udp;lr?subject=x")
    assert (uri.user, uri.host, uri.port, uri.params, uri.has_headers) == (
        "alice:secret",
        "[2001:db8::5]",
        5080,
        {"transport": "udp", "lr": None},
        True,
    )
    assert parse_uri("tel:+1-201-555-0123").scheme == "tel"
    assert parse_cseq("0009 INVITE").number == 9
    for bad in ["1", "x INVITE", "4294967296 INVITE", "1 IN VITE"]:
        with pytest.raises(HeaderError):
            parse_cseq(bad)


def test_response_copies_via_from_to_callid_cseq_and_record_route() -> None:
    request = parse_message(invite())
    assert isinstance(request, SipRequest)
    response = make_response(request, 180, to_tag="as83kd", source=("203.0.113.7", 40000))
    assert (
        response.get_list("Via")[0]
        == "SIP/2.0/UDP 192.0.2.10:5062;branch=z9hG4bK776asdhds;rport=40000;received=203.0.113.7"
    )
    assert response.get_list("Via")[1] == "SIP/2.0/UDP 192.0.2.20;branch=z9hG4bKnashds8"
    assert response.get("To") == "<sip:appliance@192.0.2.1>;tag=as83kd"
    assert (response.get("From"), response.get("Call-ID"), response.get("CSeq")) == (
        request.get("From"),
        request.get("Call-ID"),
        "314159 INVITE",
    )
    assert response.get_all("Record-Route") == request.get_all("Record-Route")
    trying = make_response(request, 100, to_tag="as83kd")
    assert trying.get("To") == "<sip:appliance@192.0.2.1>" and trying.get("Record-Route") is None
    busy = make_response(request, 486, to_tag="as83kd")
    assert busy.get("Record-Route") is None  # no dialog from a failure


def test_received_is_added_only_when_the_source_differs_without_rport() -> None:
    request = parse_message(invite(top_via="SIP/2.0/UDP 192.0.2.10;branch=z9hG4bK1"))
    same = make_response(request, 200, source=("192.0.2.10", 5060))
    assert same.get_list("Via")[0] == "SIP/2.0/UDP 192.0.2.10;branch=z9hG4bK1"
    other = make_response(request, 200, source=("198.51.100.1", 5060))
    assert other.get_list("Via")[0] == "SIP/2.0/UDP 192.0.2.10;branch=z9hG4bK1;received=198.51.100.1"


def test_existing_to_tag_is_kept() -> None:
    request = parse_message(
        invite().replace(b"To: <sip:appliance@192.0.2.1>", b"To: <sip:appliance@192.0.2.1>;tag=old")
    )
    assert make_response(request, 200, to_tag="new").get("To") == "<sip:appliance@192.0.2.1>;tag=old"


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ((b"CSeq: 314159 INVITE", b"CSeq: 314159 BYE"), 400),
        ((b"Max-Forwards: 70", b"Max-Forwards: 256"), 400),
        ((b"Call-ID: a84b4c76e66710@pc33.example.com\r\n", b""), 400),
        ((b"INVITE sip:appliance@192.0.2.1", b"INVITE sips:appliance@192.0.2.1"), 416),
        ((b"Max-Forwards: 70", b"Require: 100rel"), 420),
        ((b"Max-Forwards: 70", b"Accept: text/html"), 406),
        ((b"Max-Forwards: 70", b"Date: Sat, 13 Nov 2010 23:29:00 PST"), 400),
    ],
)
def test_request_checks_pick_the_rfc_3261_response(change: tuple[bytes, bytes], status: int) -> None:
    request = parse_message(invite().replace(*change))
    assert isinstance(request, SipRequest)
    rejection = check_request(request)
    assert rejection is not None and rejection.status == status
    if status == 420:
        assert ("Unsupported", "100rel") in rejection.headers


def _request(data: bytes) -> SipRequest:
    request = parse_message(data)
    assert isinstance(request, SipRequest)
    return request


def test_methods_not_served_get_405_with_allow_or_501() -> None:
    rejection = check_request(_request(invite().replace(b"INVITE", b"REGISTER")))
    assert rejection is not None and rejection.status == 405
    assert dict(rejection.headers)["Allow"] == "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, NOTIFY"
    unknown = check_request(_request(invite().replace(b"INVITE", b"FROBNICATE")))
    assert unknown is not None and unknown.status == 501


def test_invite_with_a_body_that_is_not_sdp_gets_415() -> None:
    rejection = check_request(_request(invite(body="hello").replace(b"application/sdp", b"text/plain")))
    assert rejection is not None and rejection.status == 415
