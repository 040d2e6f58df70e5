"""SRTP media with SDES keys: the SDP offer/answer of keys (RFC 4568) and a call's stream protected with
libsrtp over real loopback sockets: audio and keypad events decoded, a forged or replayed packet dropped
and counted, plain RTP refused where SRTP is required."""

from __future__ import annotations

import asyncio
import base64
import secrets

import numpy as np
import pytest

from appliance.rtp import g711
from appliance.rtp.dtmf import TelephoneEvent
from appliance.rtp.packet import RtpPacket
from appliance.rtp.srtp import SrtpKeys, SrtpSession, parse_crypto
from appliance.rtp.stream import MediaParams, RtpStream
from appliance.sip.sdp import (
    AudioAnswer,
    Encryption,
    SdpError,
    build_offer,
    keys_from_answer,
    negotiate,
    parse_sdp,
)
from tests.test_sip_helpers import LOOPBACK, free_udp_port
from tests.test_sip_sdp import offer

KEY = secrets.token_bytes(30)
INLINE = base64.b64encode(KEY).decode()
SAVP = ("m=audio 49170 RTP/SAVP 0 101", f"a=crypto:7 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}|2^20")


def agree(text: str, encryption: Encryption) -> AudioAnswer:
    return negotiate(
        parse_sdp(text),
        local_host="192.0.2.1",
        local_port=40000,
        session_id=1,
        session_version=1,
        encryption=encryption,
    )


@pytest.mark.parametrize("encryption", ["optional", "srtp"])
def test_an_srtp_offer_is_answered_with_a_key_of_our_own(encryption: Encryption) -> None:
    result = agree(offer(*SAVP, "a=rtpmap:101 telephone-event/8000"), encryption)
    assert "m=audio 40000 RTP/SAVP 0 101" in result.sdp
    ours = [line for line in result.sdp.splitlines() if line.startswith("a=crypto:")]
    assert len(ours) == 1 and ours[0].startswith("a=crypto:7 AES_CM_128_HMAC_SHA1_80 inline:")
    mine = parse_crypto(ours[0].removeprefix("a=crypto:"))
    assert mine is not None and result.srtp == SrtpKeys("AES_CM_128_HMAC_SHA1_80", mine.key, KEY)
    assert mine.key != KEY


def test_plain_rtp_is_refused_when_srtp_is_required_and_taken_when_optional() -> None:
    plain = offer("m=audio 49170 RTP/AVP 0")
    with pytest.raises(SdpError, match=r"requires SRTP \(sip.media_encryption = \"srtp\"\)"):
        agree(plain, "srtp")
    taken = agree(plain, "optional")
    assert taken.srtp is None and "RTP/AVP" in taken.sdp and "a=crypto" not in taken.sdp
    with pytest.raises(SdpError, match="only SRTP offered"):
        agree(offer(*SAVP), "none")


def test_optional_prefers_the_encrypted_line_and_none_ignores_keys_in_plain_offers() -> None:
    both = offer("m=audio 49170 RTP/AVP 0", *SAVP)
    result = agree(both, "optional")
    assert result.srtp is not None and "m=audio 0 RTP/AVP 0" in result.sdp
    best_effort = offer("m=audio 49170 RTP/AVP 0", SAVP[1])  # keys offered over RTP/AVP
    assert agree(best_effort, "none").srtp is None
    assert agree(best_effort, "optional").srtp is not None


@pytest.mark.parametrize(
    "line",
    [
        f"a=crypto:1 AES_256_CM_HMAC_SHA1_80 inline:{INLINE}",  # a suite not taken
        f"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}|2^20|1:4",  # a master key index
        "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:c2hvcnQ=",  # a key of the wrong length
        "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:not*base64",
    ],
)
def test_keys_the_appliance_cannot_use_are_named(line: str) -> None:
    with pytest.raises(SdpError, match="no key this device can use"):
        agree(offer("m=audio 49170 RTP/SAVP 0", line), "srtp")


def test_our_own_offer_carries_our_key_and_the_answer_completes_the_pair() -> None:
    ours = parse_crypto(f"1 AES_CM_128_HMAC_SHA1_80 inline:{INLINE}")
    assert ours is not None
    text = build_offer(
        local_host="192.0.2.1", local_port=40000, session_id=1, session_version=1, crypto=ours, srtp_only=True
    )
    assert "m=audio 40000 RTP/SAVP 0 8 101" in text and ours.line() in text
    theirs = secrets.token_bytes(30)
    reply = offer(
        "m=audio 49170 RTP/SAVP 0",
        f"a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{base64.b64encode(theirs).decode()}",
    )
    assert keys_from_answer(parse_sdp(reply), ours) == SrtpKeys("AES_CM_128_HMAC_SHA1_80", KEY, theirs)
    assert keys_from_answer(parse_sdp(offer("m=audio 49170 RTP/AVP 0")), ours) is None


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(8000 * seconds)) / 8000
    return (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


def test_an_encrypted_stream_decodes_audio_and_keys_and_drops_forged_packets() -> None:
    """A caller's SRTP (its own key) reaches the stream as audio and a keypad digit; a packet with a
    broken tag, one replayed and one in plain RTP are dropped and counted; what the appliance sends
    opens with its key only."""
    caller_key, device_key = secrets.token_bytes(30), secrets.token_bytes(30)
    caller = SrtpSession(SrtpKeys("AES_CM_128_HMAC_SHA1_80", caller_key, device_key))

    async def scenario() -> tuple[list[np.ndarray], RtpStream, list[bytes]]:
        loop = asyncio.get_running_loop()
        received: list[bytes] = []

        class Phone(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: object) -> None:
                received.append(data)

        phone, _ = await loop.create_datagram_endpoint(Phone, local_addr=(LOOPBACK, 0))
        keys = SrtpKeys("AES_CM_128_HMAC_SHA1_80", device_key, caller_key)
        stream = RtpStream(
            MediaParams(LOOPBACK, phone.get_extra_info("sockname")[1], "PCMU", 0, 101, srtp=keys),
            label="srtp",
        )
        await stream.open(LOOPBACK, free_udp_port())
        tone = _tone(0.4)
        sent: list[bytes] = []
        for index in range(20):
            packet = RtpPacket(
                0, 100 + index, 160 * index, 42, g711.encode(tone[160 * index : 160 * (index + 1)], "PCMU")
            )
            sent.append(caller.protect(packet.to_bytes()))
            phone.sendto(sent[-1], (LOOPBACK, stream.local_port))
        for end, seq in ((False, 120), (True, 121), (True, 122)):
            event = RtpPacket(101, seq, 160 * 20, 42, TelephoneEvent(5, end, 10, 800).to_bytes())
            phone.sendto(caller.protect(event.to_bytes()), (LOOPBACK, stream.local_port))
        forged = bytearray(sent[3])
        forged[-1] ^= 0xFF
        phone.sendto(bytes(forged), (LOOPBACK, stream.local_port))
        phone.sendto(sent[5], (LOOPBACK, stream.local_port))  # replayed
        phone.sendto(RtpPacket(0, 200, 0, 42, b"\xff" * 160).to_bytes(), (LOOPBACK, stream.local_port))
        await asyncio.sleep(0.2)
        stream.start()
        stream.play(np.zeros(3200, dtype=np.float32))
        await asyncio.sleep(0.3)
        await stream.close()
        phone.close()
        return [frame async for frame in stream.frames()], stream, received

    frames, stream, received = asyncio.run(scenario())
    assert stream.stats.packets_received == 23
    assert stream.stats.digits == ["5"]
    assert stream.stats.srtp_rejected == 3
    audio = np.concatenate(frames)
    assert np.sqrt(np.mean(audio[800:5000] ** 2)) > 0.15
    assert received, "the stream sent nothing"
    opened = caller.unprotect(received[0])
    assert opened[1] & 0x7F == 0 and len(opened) == 12 + 160
    assert all(g711.encode(np.zeros(160, dtype=np.float32), "PCMU") not in packet for packet in received)
