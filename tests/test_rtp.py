"""RTP media parts with plain values: packets, G.711, jitter buffer, DTMF events, 8 -> 16 kHz edge."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from appliance.rtp import g711
from appliance.rtp.dtmf import DtmfDetector, DtmfError, TelephoneEvent, parse_telephone_event
from appliance.rtp.jitter import JitterBuffer
from appliance.rtp.packet import RtpError, RtpPacket, looks_like_rtcp, parse_rtp
from appliance.rtp.resample import Upsampler2x, downsample_16k_to_8k

# --- packets -------------------------------------------------------------------------------------------


def test_rtp_packet_round_trip_keeps_every_field() -> None:
    packet = RtpPacket(
        payload_type=8,
        sequence=65535,
        timestamp=2**32 - 160,
        ssrc=0xDEADBEEF,
        payload=b"\xd5" * 160,
        marker=True,
        csrcs=(1, 2),
    )
    data = packet.to_bytes()
    assert len(data) == 12 + 8 + 160
    assert data[0] == 0x82 and data[1] == 0x88  # V=2, CC=2; M=1, PT=8
    assert parse_rtp(data) == packet


def test_rtp_parse_skips_extension_and_padding() -> None:
    header = (
        bytes([0x80 | 0x10 | 0x20, 0])
        + (7).to_bytes(2, "big")
        + (160).to_bytes(4, "big")
        + (5).to_bytes(4, "big")
    )
    extension = (0xBEDE).to_bytes(2, "big") + (1).to_bytes(2, "big") + b"\x01\x02\x03\x04"
    packet = parse_rtp(header + extension + b"abc" + b"\x00\x00\x03")
    assert (packet.sequence, packet.timestamp, packet.ssrc, packet.payload) == (7, 160, 5, b"abc")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\x80\x00\x00", "shorter than the 12-byte"),
        (bytes([0x40, 0]) + bytes(10), "version 1"),
        (bytes([0x8F, 0]) + bytes(10), "15 CSRCs"),
        (bytes([0x90, 0]) + bytes(10) + b"\x00\x00\x00\x09", "runs past"),
        (bytes([0xA0, 0]) + bytes(10) + b"\x00", "padding of 0"),
        (bytes([0xA0, 0]) + bytes(10) + b"\x30", "padding of 48"),
    ],
)
def test_rtp_parse_names_what_is_wrong(data: bytes, problem: str) -> None:
    with pytest.raises(RtpError, match=problem):
        parse_rtp(data)


def test_rtcp_is_told_apart_from_rtp() -> None:
    assert looks_like_rtcp(bytes([0x80, 200]) + bytes(6))  # sender report
    assert not looks_like_rtcp(RtpPacket(0, 1, 2, 3, b"x").to_bytes())


# --- G.711 ---------------------------------------------------------------------------------------------


def test_g711_known_code_points() -> None:
    # ITU-T G.711: mu-law 0xFF and A-law 0xD5 are the codes closest to zero; the extremes are +-32124 / +-32256.
    assert g711.ulaw_encode_int16(np.array([0], np.int16)) == b"\xff"
    assert g711.alaw_encode_int16(np.array([0], np.int16)) == b"\xd5"
    assert g711.ulaw_decode_int16(b"\x00\x80\xff\x7f").tolist() == [-32124, 32124, 0, 0]
    assert g711.alaw_decode_int16(b"\xd5\x55\xaa\x2a").tolist() == [8, -8, 32256, -32256]


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="audioop was removed in Python 3.13")
@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
def test_g711_matches_the_reference_codec_bit_for_bit(codec: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    every_sample = np.arange(-32768, 32768, dtype=np.int16)
    every_code = bytes(range(256))
    if codec == "PCMU":
        assert g711.ulaw_encode_int16(every_sample) == audioop.lin2ulaw(every_sample.tobytes(), 2)
        reference = audioop.ulaw2lin(every_code, 2)
        assert g711.ulaw_decode_int16(every_code).tobytes() == reference
    else:
        assert g711.alaw_encode_int16(every_sample) == audioop.lin2alaw(every_sample.tobytes(), 2)
        assert g711.alaw_decode_int16(every_code).tobytes() == audioop.alaw2lin(every_code, 2)


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
def test_g711_round_trip_of_speech_level_audio_is_about_35_db_snr(codec: str) -> None:
    rng = np.random.default_rng(1)
    audio = (0.1 * rng.standard_normal(8000)).astype(np.float32)
    decoded = g711.decode(g711.encode(audio, codec), codec)
    snr_db = 10 * np.log10(np.sum(audio**2) / np.sum((audio - decoded) ** 2))
    assert 30 < snr_db < 45
    assert decoded.dtype == np.float32 and len(decoded) == len(audio)


def test_g711_unknown_codec_is_named() -> None:
    with pytest.raises(ValueError, match="'G729'"):
        g711.encode(np.zeros(4, np.float32), "G729")


# --- jitter buffer -------------------------------------------------------------------------------------


def test_jitter_buffer_passes_in_order_packets_without_delay() -> None:
    buffer = JitterBuffer(depth_packets=3)
    assert [buffer.push(seq, bytes([seq])) for seq in range(5)] == [[bytes([s])] for s in range(5)]


def test_jitter_buffer_reorders_within_its_depth() -> None:
    buffer = JitterBuffer(depth_packets=3)
    out = []
    for seq in [0, 2, 1, 4, 3, 5]:
        out += buffer.push(seq, bytes([seq]))
    assert out == [bytes([s]) for s in range(6)]
    assert buffer.stats.lost == 0


def test_jitter_buffer_declares_a_loss_after_depth_later_packets() -> None:
    buffer = JitterBuffer(depth_packets=2)
    assert buffer.push(0, b"a") == [b"a"]
    assert buffer.push(2, b"c") == []
    assert buffer.push(3, b"d") == [None, b"c", b"d"]  # 1 is lost once 3 is 2 packets ahead
    assert buffer.push(1, b"b") == []  # too late
    assert (buffer.stats.lost, buffer.stats.late) == (1, 1)


def test_jitter_buffer_drops_duplicates_and_handles_sequence_wrap() -> None:
    buffer = JitterBuffer(depth_packets=2)
    out = []
    for seq in [65534, 65535, 65535, 0, 1]:
        out += buffer.push(seq, seq.to_bytes(2, "big"))
    assert out == [s.to_bytes(2, "big") for s in (65534, 65535, 0, 1)]
    assert buffer.stats.duplicate == 1


def test_jitter_buffer_treats_a_large_jump_as_a_new_stream_and_flushes() -> None:
    buffer = JitterBuffer(depth_packets=3, max_gap_packets=10)
    buffer.push(0, b"a")
    buffer.push(2, b"c")  # waiting for 1
    assert buffer.push(500, b"z") == [None, b"c", b"z"]
    assert buffer.stats.resets == 1
    buffer.push(502, b"y")
    assert buffer.flush() == [None, b"y"]
    assert buffer.held == 0


def test_jitter_buffer_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="depth_packets"):
        JitterBuffer(depth_packets=-1)
    with pytest.raises(ValueError, match="max_gap_packets"):
        JitterBuffer(depth_packets=5, max_gap_packets=5)


# --- DTMF ----------------------------------------------------------------------------------------------


def test_telephone_event_payload_round_trip() -> None:
    event = TelephoneEvent(event=11, end=True, volume_dbm0=10, duration_units=800)
    assert event.to_bytes() == bytes([11, 0x80 | 10, 0x03, 0x20])
    assert parse_telephone_event(event.to_bytes()) == event
    assert event.name == "#"
    with pytest.raises(DtmfError, match="needs 4"):
        parse_telephone_event(b"\x01")


def test_dtmf_detector_reports_each_press_once() -> None:
    detector = DtmfDetector()
    digits = []
    # "5": three updates and three copies of the end packet, all with timestamp 1000
    for duration, end in [(160, False), (320, False), (480, False), (640, True), (640, True), (640, True)]:
        digits += detector.feed(1000, TelephoneEvent(5, end, 10, duration).to_bytes())
    # "*" whose end packets were all lost: reported when "9" starts
    digits += detector.feed(3000, TelephoneEvent(10, False, 10, 160).to_bytes())
    digits += detector.feed(5000, TelephoneEvent(9, True, 10, 400).to_bytes())
    assert [(d.name, d.duration_s) for d in digits] == [("5", 0.08), ("*", 0.02), ("9", 0.05)]


# --- 8 kHz <-> 16 kHz ---------------------------------------------------------------------------------


def _tone(freq_hz: float, rate_hz: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return (0.5 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def _level_db(audio: np.ndarray, rate_hz: int, freq_hz: float) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    freqs = np.fft.rfftfreq(len(audio), 1 / rate_hz)
    return float(20 * np.log10(spectrum[np.argmin(np.abs(freqs - freq_hz))] + 1e-12))


@pytest.mark.parametrize("freq_hz", [300.0, 1000.0, 3000.0])
def test_upsampler_keeps_the_tone_and_suppresses_its_image_across_packet_edges(freq_hz: float) -> None:
    upsampler = Upsampler2x()
    tone = _tone(freq_hz, 8000, 1.0)
    out = np.concatenate([upsampler.process(tone[i : i + 160]) for i in range(0, len(tone), 160)])
    assert len(out) == 16000
    steady = out[1600:]
    assert np.sqrt(np.mean(steady**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.03)
    assert _level_db(steady, 16000, 8000 - freq_hz) < _level_db(steady, 16000, freq_hz) - 60


def test_upsampler_is_continuous_at_packet_edges_and_adds_under_2_ms_delay() -> None:
    whole, chunked = Upsampler2x(), Upsampler2x()
    tone = _tone(440.0, 8000, 0.2)
    reference = whole.process(tone)
    pieces = np.concatenate([chunked.process(tone[i : i + 160]) for i in range(0, len(tone), 160)])
    np.testing.assert_allclose(pieces, reference, atol=1e-6)
    impulse = np.zeros(160, np.float32)
    impulse[0] = 1.0
    assert int(np.argmax(Upsampler2x().process(impulse))) < 32  # 32 samples at 16 kHz = 2 ms


def test_downsample_to_8k_halves_the_length_and_keeps_speech_band() -> None:
    tone = _tone(1000.0, 16000, 0.5)
    out = downsample_16k_to_8k(tone)
    assert len(out) == 4000
    assert np.sqrt(np.mean(out[400:-400] ** 2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.03)
