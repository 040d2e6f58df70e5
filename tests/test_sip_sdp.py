"""SDP offer/answer (RFC 3264) and dialog state, with plain values."""

from __future__ import annotations

import pytest

from appliance.sip.dialog import Dialog, DialogState
from appliance.sip.message import SipRequest, parse_message
from appliance.sip.sdp import SUPPORTED_CODECS, AudioAnswer, SdpError, build_offer, negotiate, parse_sdp
from appliance.sip.transactions import transaction_key


def offer(*media: str, session: str = "c=IN IP4 192.0.2.50") -> str:
    return (
        "\r\n".join(
            ["v=0", "o=alice 2890844526 2890844526 IN IP4 192.0.2.50", "s=-", session, "t=0 0", *media]
        )
        + "\r\n"
    )


def answer(text: str, *, codecs: tuple[str, ...] = SUPPORTED_CODECS) -> AudioAnswer:
    return negotiate(
        parse_sdp(text),
        local_host="192.0.2.1",
        local_port=40000,
        session_id=7,
        session_version=1,
        codecs=codecs,
    )


def test_first_g711_codec_in_the_callers_order_wins() -> None:
    result = answer(
        offer(
            "m=audio 49170 RTP/AVP 18 8 0 101",
            "a=rtpmap:18 G729/8000",
            "a=rtpmap:101 telephone-event/8000",
            "a=fmtp:101 0-15",
        )
    )
    assert (result.codec, result.payload_type, result.telephone_event_pt) == ("PCMA", 8, 101)
    assert (result.remote_host, result.remote_port, result.direction) == ("192.0.2.50", 49170, "sendrecv")
    lines = result.sdp.split("\r\n")
    assert "m=audio 40000 RTP/AVP 8 101" in lines
    assert "a=rtpmap:8 PCMA/8000" in lines and "a=rtpmap:101 telephone-event/8000" in lines
    assert "c=IN IP4 192.0.2.1" in lines and "o=appliance 7 1 IN IP4 192.0.2.1" in lines
    assert result.sdp.endswith("\r\n")


def test_dynamic_payload_numbers_and_configured_codecs() -> None:
    result = answer(
        offer("m=audio 4000 RTP/AVP 96 97", "a=rtpmap:96 pcmu/8000", "a=rtpmap:97 telephone-event/8000")
    )
    assert (result.codec, result.payload_type, result.telephone_event_pt) == ("PCMU", 96, 97)
    only_pcma = answer(offer("m=audio 4000 RTP/AVP 0 8"), codecs=("PCMA",))
    assert only_pcma.codec == "PCMA"


def test_other_media_lines_are_refused_with_port_zero_in_the_same_order() -> None:
    result = answer(
        offer("m=video 51372 RTP/AVP 31", "m=audio 49170 RTP/AVP 0", "c=IN IP4 192.0.2.99", "a=ptime:20")
    )
    media = [line for line in result.sdp.split("\r\n") if line.startswith("m=")]
    assert media == ["m=video 0 RTP/AVP 31", "m=audio 40000 RTP/AVP 0"]
    assert result.remote_host == "192.0.2.99"  # media-level c= wins


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        ("a=sendonly", "recvonly"),
        ("a=recvonly", "sendonly"),
        ("a=inactive", "inactive"),
        ("a=sendrecv", "sendrecv"),
    ],
)
def test_direction_is_mirrored(attribute: str, expected: str) -> None:
    result = answer(offer("m=audio 49170 RTP/AVP 0", attribute))
    assert result.direction == expected and f"a={expected}" in result.sdp


def test_hold_with_zero_address_is_treated_as_sendonly() -> None:
    assert answer(offer("m=audio 49170 RTP/AVP 0", session="c=IN IP4 0.0.0.0")).direction == "recvonly"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (offer("m=audio 49170 RTP/AVP 18", "a=rtpmap:18 G729/8000"), "no audio line with PCMU or PCMA"),
        (offer("m=audio 49170 RTP/SAVP 0"), "only SRTP offered"),
        (offer("m=audio 0 RTP/AVP 0"), "no audio line"),
        (offer("m=audio 49170 RTP/AVP 96", "a=rtpmap:96 PCMU/16000"), "no audio line"),
        (offer("m=audio 49170 RTP/AVP 0", session="s=x"), "no connection address"),
        ("v=0\r\no=x\r\n", "no m= line"),
        ("v=0\r\nthis is not sdp\r\n", "is not 'type=value'"),
        (offer("m=audio 99999 RTP/AVP 0"), "out of range"),
        (offer("m=audio 49170 RTP/AVP 0", session="c=IN IP4"), "is not 'IN IP4 address'"),
    ],
)
def test_unusable_offers_are_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(SdpError, match=problem):
        answer(text)


def test_own_offer_lists_both_codecs_and_events() -> None:
    text = build_offer(local_host="192.0.2.1", local_port=40002, session_id=1, session_version=1)
    parsed = parse_sdp(text)
    assert parsed.media[0].formats == ["0", "8", "101"] and parsed.media[0].port == 40002
    # and an answer to it (as an ACK would carry) negotiates back to what it chose
    assert answer(offer("m=audio 6000 RTP/AVP 8 101", "a=rtpmap:101 telephone-event/8000")).codec == "PCMA"


INVITE = (
    b"INVITE sip:appliance@192.0.2.1 SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP pbx.example.com;branch=z9hG4bKabc\r\n"
    b'From: "Desk 12" <sip:12@pbx.example.com>;tag=fromtag\r\n'
    b"To: Appliance <sip:appliance@192.0.2.1>;x=1\r\n"
    b"Call-ID: call-1@pbx\r\n"
    b"CSeq: 10 INVITE\r\n"
    b"Contact: <sip:12@192.0.2.77:5062>\r\n"
    b"Record-Route: <sip:192.0.2.5;lr>, <sip:192.0.2.6;lr>\r\n"
    b"Content-Length: 0\r\n\r\n"
)


def _request(data: bytes) -> SipRequest:
    message = parse_message(data)
    assert isinstance(message, SipRequest)
    return message


def test_dialog_from_invite_and_the_bye_it_builds() -> None:
    dialog = Dialog.from_invite(_request(INVITE), local_tag="mytag")
    assert dialog.state is DialogState.EARLY
    assert (dialog.call_id, dialog.remote_tag, dialog.remote_target, dialog.remote_cseq) == (
        "call-1@pbx",
        "fromtag",
        "sip:12@192.0.2.77:5062",
        10,
    )
    assert dialog.route_set == ["<sip:192.0.2.5;lr>", "<sip:192.0.2.6;lr>"]
    cseq_before = dialog.local_cseq
    bye = dialog.make_request(
        "BYE", via_host="192.0.2.1", via_port=5060, contact="<sip:appliance@192.0.2.1:5060>"
    )
    assert bye.uri == "sip:12@192.0.2.77:5062"
    assert bye.get_all("Route") == ["<sip:192.0.2.5;lr>", "<sip:192.0.2.6;lr>"]
    assert bye.get("From") == "Appliance <sip:appliance@192.0.2.1>;x=1;tag=mytag"
    assert bye.get("To") == '"Desk 12" <sip:12@pbx.example.com>;tag=fromtag'
    assert bye.get("CSeq") == f"{cseq_before + 1} BYE"
    assert bye.get(
        "Via",
    ).startswith("SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK")  # type: ignore[union-attr]
    assert dialog.next_hop_uri() == "sip:192.0.2.5;lr"
    reparsed = _request(bye.to_bytes())
    assert reparsed.get("Call-ID") == "call-1@pbx"


def test_dialog_matches_in_dialog_requests_and_orders_cseq() -> None:
    dialog = Dialog.from_invite(_request(INVITE), local_tag="mytag")
    bye = (
        INVITE.replace(b"INVITE sip", b"BYE sip")
        .replace(b"10 INVITE", b"11 BYE")
        .replace(b";x=1", b";x=1;tag=mytag")
    )
    assert dialog.matches(_request(bye))
    assert not dialog.matches(_request(bye.replace(b"tag=mytag", b"tag=other")))
    assert not dialog.matches(_request(bye.replace(b"call-1@pbx", b"call-2@pbx")))
    assert dialog.accept_cseq(_request(bye))
    assert not dialog.accept_cseq(_request(bye))  # the same CSeq again is out of order
    assert dialog.accept_cseq(_request(bye.replace(b"BYE sip", b"ACK sip").replace(b"11 BYE", b"10 ACK")))


def test_transaction_keys_match_ack_and_cancel_to_their_invite() -> None:
    invite = _request(INVITE)
    cancel = _request(INVITE.replace(b"INVITE sip", b"CANCEL sip").replace(b"10 INVITE", b"10 CANCEL"))
    assert transaction_key(cancel, "INVITE") == transaction_key(invite)
    assert transaction_key(cancel) != transaction_key(invite)
    old_style = _request(INVITE.replace(b";branch=z9hG4bKabc", b";branch=1234"))
    assert transaction_key(old_style)[0] == "2543"
    retransmitted = _request(INVITE.replace(b";branch=z9hG4bKabc", b";branch=1234"))
    assert transaction_key(old_style) == transaction_key(retransmitted)
