"""Real calls: SIPp on loopback as the caller's phone, the appliance's SIP server answering.

The caller's speech is a recording from ../shared/data sent as RTP (a pcap SIPp plays); the
appliance's RTP comes to a socket of the test, is decoded and transcribed with Whisper.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import jiwer
import numpy as np
import pytest

from appliance.rtp.packet import RtpPacket
from appliance.sip.call import Call, CallAudio
from appliance.sip.handlers import EchoHandler, PlaybackHandler
from appliance.sip.server import SipServer
from engines.audio import load_audio, resample
from engines.bundle import Bundle
from tests.test_sip_helpers import (
    RtpCapture,
    free_udp_port,
    requires_sipp,
    rtp_capture,
    run_sipp,
    running_server,
    speech_span_s,
    write_rtp_pcap,
)

pytestmark = requires_sipp

CALLER_WAV = "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav"
CALLER_TEXT = "she had your dark suit in greasy wash water all year"
REPLY_WAV = "speech/en/speechbrain_single-mic_example1.wav"
REPLY_TEXT = "the birch canoe slid on the smooth planks"
DTMF_PCAP = Path("/usr/share/sip-tester/dtmf_2833_1.pcap")


class Recorder:
    """Wraps a handler and keeps every call it was given, to look at after the call."""

    def __init__(self, inner: EchoHandler | PlaybackHandler) -> None:
        self.inner = inner
        self.calls: list[CallAudio] = []

    async def __call__(self, call: CallAudio) -> None:
        self.calls.append(call)
        await self.inner(call)


@pytest.fixture(scope="module")
def transcribe(bundle: Bundle) -> Iterator[object]:
    from faster_whisper import WhisperModel

    model = WhisperModel(
        str(bundle.path("asr/whisper-base/ct2/model.bin").parent),
        device="cpu",
        compute_type="int8",
        cpu_threads=2,
    )

    def run(audio_8k: np.ndarray) -> str:
        audio = resample(audio_8k, 8000, 16000)
        audio = (
            audio / max(float(np.abs(audio).max()), 1e-6) * 0.5
        )  # a phone line's level varies; Whisper likes it loud
        segments, _ = model.transcribe(audio, language="en", beam_size=1, vad_filter=False)
        return " ".join(segment.text for segment in segments)

    yield run


@pytest.fixture(scope="module")
def caller_pcaps(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    audio, rate = load_audio(data_dir / CALLER_WAV)
    assert rate == 8000
    audio = audio / float(np.abs(audio).max()) * 0.5  # the recording is quiet: a phone's gain
    folder = tmp_path_factory.mktemp("pcap")
    return {
        "PCMU": write_rtp_pcap(folder / "speech_pcmu.pcap", audio, codec="PCMU", payload_type=0),
        "PCMA": write_rtp_pcap(folder / "speech_pcma.pcap", audio, codec="PCMA", payload_type=8),
        "short": write_rtp_pcap(folder / "short.pcap", audio[:1600], codec="PCMU", payload_type=0),
    }


def normalise(text: str) -> str:
    return " ".join("".join(c for c in text.lower() if c.isalnum() or c.isspace()).split())


def assert_heard(reference: str, hypothesis: str) -> None:
    """Whisper base on twice-coded telephone audio: most words right (int8 Whisper hears "She had a
    dark suit and greasy wash for her all year", whatever the processor; on a loaded machine an echo
    with small gaps may lose a word), and at least 70% of the sentence's content words (four letters
    or more: 5 of the 7) there."""
    error_rate = float(jiwer.wer(normalise(reference), normalise(hypothesis)))
    assert error_rate <= 0.4, f"WER {error_rate:.2f}: {hypothesis!r}"
    content = [word for word in normalise(reference).split() if len(word) >= 4]
    heard = [word for word in content if word in normalise(hypothesis)]
    assert len(heard) >= 0.7 * len(content), f"heard {heard} of {content} in {hypothesis!r}"


def check_rtp_stream(packets: list[tuple[float, RtpPacket]], payload_type: int) -> None:
    """One SSRC, sequence +1 and timestamp +160 per packet, paced at 20 ms."""
    assert len(packets) > 50
    stream = [p for _, p in packets]
    assert {p.ssrc for p in stream} == {stream[0].ssrc}
    assert {p.payload_type for p in stream} == {payload_type}
    assert all((b.sequence - a.sequence) & 0xFFFF == 1 for a, b in itertools.pairwise(stream))
    assert all((b.timestamp - a.timestamp) & 0xFFFFFFFF == 160 for a, b in itertools.pairwise(stream))
    assert all(len(p.payload) == 160 for p in stream)
    gaps = np.diff([t for t, _ in packets])
    assert 0.018 < float(np.median(gaps)) < 0.022
    assert len(stream) / 50 == pytest.approx(packets[-1][0] - packets[0][0], abs=0.2)


def test_call_is_answered_echoes_the_callers_speech_and_ends_with_bye(
    tmp_path: Path, caller_pcaps: dict[str, Path], transcribe: object
) -> None:
    recorder = Recorder(EchoHandler())

    async def scenario() -> tuple[int, str, RtpCapture, SipServer]:
        port = free_udp_port()
        async with running_server(recorder) as server, rtp_capture(port) as capture:
            result = await run_sipp(
                "call.xml",
                server,
                keys={"rtp_port": str(port), "codecs": "0 8 101", "pcap": str(caller_pcaps["PCMU"])},
                pause_ms=4500,
                workdir=tmp_path,
            )
            await asyncio.sleep(0.1)
            assert server.calls == {}
            return result.returncode, result.output, capture, server

    returncode, output, capture, server = asyncio.run(scenario())
    assert returncode == 0, output
    assert server.stats.calls_started == server.stats.calls_ended == 1
    call = recorder.calls[0]
    assert isinstance(call, Call) and call.end_reason == "caller hung up"
    assert call.stream.stats.packets_received == 147 and call.stream.stats.bad_packets == 0
    check_rtp_stream(capture.packets, payload_type=0)
    echo = capture.audio_8k("PCMU")
    assert speech_span_s(echo, 8000) > 2.0
    text = transcribe(echo)  # type: ignore[operator]
    assert_heard(CALLER_TEXT, text)


def test_pcma_call_gets_a_recording_and_the_appliance_hangs_up(
    tmp_path: Path, data_dir: Path, caller_pcaps: dict[str, Path], transcribe: object
) -> None:
    recorder = Recorder(PlaybackHandler(data_dir / REPLY_WAV, lead_in_s=0.3))

    async def scenario() -> tuple[int, str, RtpCapture]:
        port = free_udp_port()
        async with running_server(recorder) as server, rtp_capture(port) as capture:
            result = await run_sipp(
                "call_until_bye.xml",
                server,
                keys={"rtp_port": str(port), "codecs": "8 0 101", "pcap": str(caller_pcaps["PCMA"])},
                workdir=tmp_path,
            )
            assert server.calls == {}
            return result.returncode, result.output, capture

    returncode, output, capture = asyncio.run(scenario())
    assert returncode == 0, output  # SIPp received the appliance's BYE and answered it
    call = recorder.calls[0]
    assert isinstance(call, Call) and call.end_reason == "conversation over"
    assert call.played_s == pytest.approx(3.26 + 0.3, abs=0.05)
    check_rtp_stream(capture.packets, payload_type=8)
    reply = capture.audio_8k("PCMA")
    text = transcribe(reply)  # type: ignore[operator]
    assert_heard(REPLY_TEXT, text)


def test_two_simultaneous_calls_are_answered_and_a_third_gets_503(
    tmp_path: Path, caller_pcaps: dict[str, Path], transcribe: object
) -> None:
    recorder = Recorder(EchoHandler())

    async def scenario() -> tuple[list[int], list[str], list[RtpCapture], int]:
        ports = [free_udp_port(), free_udp_port()]
        async with (
            running_server(recorder, max_calls=2) as server,
            rtp_capture(ports[0]) as first,
            rtp_capture(ports[1]) as second,
        ):
            calls = [
                run_sipp(
                    "call.xml",
                    server,
                    keys={"rtp_port": str(p), "codecs": "0 101", "pcap": str(caller_pcaps["PCMU"])},
                    pause_ms=5000,
                    workdir=tmp_path,
                )
                for p in ports
            ]
            tasks = [asyncio.ensure_future(c) for c in calls]
            while len(server.calls) < 2:
                await asyncio.sleep(0.05)
            busy = await run_sipp("busy.xml", server, keys={"rtp_port": "9", "codecs": "0"}, workdir=tmp_path)
            results = [*await asyncio.gather(*tasks), busy]
            return (
                [r.returncode for r in results],
                [r.output for r in results],
                [first, second],
                server.stats.busy,
            )

    returncodes, outputs, captures, busy = asyncio.run(scenario())
    assert returncodes == [0, 0, 0], outputs
    assert busy == 1 and len(recorder.calls) == 2
    for capture in captures:
        check_rtp_stream(capture.packets, payload_type=0)
        text = transcribe(capture.audio_8k("PCMU"))  # type: ignore[operator]
        assert_heard(CALLER_TEXT, text)


def test_peer_outside_allow_from_gets_403(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, str, int]:
        async with running_server(EchoHandler(), allow_from=("127.0.0.1/32",)) as server:
            result = await run_sipp(
                "forbidden.xml",
                server,
                keys={"rtp_port": "9", "codecs": "0"},
                local_ip="127.0.0.2",
                workdir=tmp_path,
            )
            return result.returncode, result.output, server.stats.forbidden

    returncode, output, forbidden = asyncio.run(scenario())
    assert returncode == 0, output
    assert forbidden >= 1


def test_call_whose_rtp_stops_is_ended_with_bye_after_rtp_timeout(
    tmp_path: Path, caller_pcaps: dict[str, Path]
) -> None:
    recorder = Recorder(EchoHandler())

    async def scenario() -> tuple[int, str, float]:
        async with running_server(recorder, rtp_timeout_s=1.0) as server:
            loop = asyncio.get_running_loop()
            started = loop.time()
            result = await run_sipp(
                "call_until_bye.xml",
                server,
                keys={"rtp_port": str(free_udp_port()), "codecs": "0", "pcap": str(caller_pcaps["short"])},
                workdir=tmp_path,
            )
            assert server.calls == {}
            return result.returncode, result.output, loop.time() - started

    returncode, output, elapsed_s = asyncio.run(scenario())
    assert returncode == 0, output  # the caller got a BYE although it never hung up
    call = recorder.calls[0]
    assert (
        isinstance(call, Call) and call.end_reason is not None and call.end_reason.startswith("no RTP for 1.")
    )
    assert call.stream.stats.packets_received == 10  # 0.2 s of audio, then silence on the wire
    assert 1.2 < elapsed_s < 6.0


def test_options_is_answered_with_allow(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, str]:
        async with running_server(EchoHandler()) as server:
            result = await run_sipp("options.xml", server, workdir=tmp_path)
            return result.returncode, result.output

    returncode, output = asyncio.run(scenario())
    assert returncode == 0, output


def test_cancel_while_ringing_gets_200_and_487(tmp_path: Path) -> None:
    recorder = Recorder(EchoHandler())

    async def scenario() -> tuple[int, str, int]:
        async with running_server(recorder, answer_delay_s=5.0) as server:
            result = await run_sipp(
                "cancel.xml", server, keys={"rtp_port": str(free_udp_port()), "codecs": "0"}, workdir=tmp_path
            )
            await asyncio.sleep(0.1)
            return result.returncode, result.output, len(server.calls)

    returncode, output, open_calls = asyncio.run(scenario())
    assert returncode == 0, output
    assert open_calls == 0 and recorder.calls == []  # never answered, nothing left behind


def test_reinvite_to_hold_switches_codec_and_stops_sending(
    tmp_path: Path, caller_pcaps: dict[str, Path]
) -> None:
    recorder = Recorder(EchoHandler())

    async def scenario() -> tuple[int, str, RtpCapture]:
        port = free_udp_port()
        async with running_server(recorder) as server, rtp_capture(port) as capture:
            result = await run_sipp(
                "reinvite.xml",
                server,
                keys={"rtp_port": str(port), "codecs": "0 8 101", "pcap": str(caller_pcaps["PCMU"])},
                pause_ms=1500,
                workdir=tmp_path,
            )
            return result.returncode, result.output, capture

    returncode, output, capture = asyncio.run(scenario())
    assert returncode == 0, output  # SIPp checked a=recvonly and PCMA in the answer
    call = recorder.calls[0]
    assert isinstance(call, Call)
    assert (call.stream.params.codec, call.stream.params.direction) == ("PCMA", "recvonly")
    assert {p.payload_type for _, p in capture.packets} == {0}  # nothing sent once on hold
    assert call.session_version == 2


def test_dtmf_telephone_events_are_received_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(EchoHandler())

    async def scenario() -> tuple[int, str]:
        async with running_server(recorder) as server:
            result = await run_sipp(
                "call.xml",
                server,
                keys={"rtp_port": str(free_udp_port()), "codecs": "0 101", "pcap": str(DTMF_PCAP)},
                pause_ms=800,
                workdir=tmp_path,
            )
            return result.returncode, result.output

    with caplog.at_level("INFO", logger="appliance.rtp.keys"):
        returncode, output = asyncio.run(scenario())
    assert returncode == 0, output
    call = recorder.calls[0]
    assert isinstance(call, Call) and call.stream.stats.digits == ["1"]
    assert any("DTMF 1" in message for message in caplog.messages)
