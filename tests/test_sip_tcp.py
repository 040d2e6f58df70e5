"""SIP over TCP: stream framing with plain values, and a SIPp call over one TCP connection."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from appliance.sip.call import Call, CallAudio
from appliance.sip.handlers import EchoHandler
from appliance.sip.tcp import SipTcpConnection, TcpLimits, stream_content_length
from engines.audio import load_audio
from tests.fixtures.net import closed_within
from tests.test_sip_helpers import (
    free_udp_port,
    requires_sipp,
    rtp_capture,
    run_sipp,
    running_server,
    speech_span_s,
    write_rtp_pcap,
)

OPTIONS = (
    b"OPTIONS sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK1\r\n"
    b"From: <sip:b@127.0.0.1>;tag=1\r\nTo: <sip:a@127.0.0.1>\r\nCall-ID: c\r\nCSeq: 1 OPTIONS\r\n"
)


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5999)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass


def _connection() -> tuple[SipTcpConnection, list[bytes], dict[tuple[str, int], SipTcpConnection]]:
    received: list[bytes] = []
    registry: dict[tuple[str, int], SipTcpConnection] = {}
    limits = TcpLimits(allowed=lambda host: True)
    connection = SipTcpConnection(lambda data, peer: received.append(data), registry, limits)
    connection.connection_made(FakeTransport())
    return connection, received, registry


def test_content_length_of_a_stream_message() -> None:
    assert stream_content_length(b"INVITE x SIP/2.0\r\nl: 12") == 12
    assert stream_content_length(b"INVITE x SIP/2.0\r\nContent-Length :  7 ") == 7
    assert stream_content_length(b"INVITE x SIP/2.0\r\nCall-ID: y") == 0
    assert stream_content_length(b"INVITE x SIP/2.0\r\nContent-Length: -1") is None
    assert stream_content_length(b"INVITE x SIP/2.0\r\nContent-Length: 1\r\nl: 1") is None


def test_stream_is_cut_into_messages_whatever_the_segments() -> None:
    first = OPTIONS + b"Content-Length: 5\r\n\r\nhello"
    second = OPTIONS + b"Content-Length: 0\r\n\r\n"
    stream = b"\r\n\r\n" + first + second + b"\r\n\r\n" + first
    for size in (1, 7, 64, len(stream)):
        connection, received, registry = _connection()
        for start in range(0, len(stream), size):
            connection.data_received(stream[start : start + size])
        assert received == [first, second, first], size
        assert registry == {("127.0.0.1", 5999): connection}
        connection.connection_lost(None)
        assert registry == {}


def test_unusable_length_is_handed_on_once_and_the_connection_closes() -> None:
    async def scenario() -> tuple[list[bytes], bool]:
        connection, received, _ = _connection()
        connection.data_received(OPTIONS + b"Content-Length: -5\r\n\r\nmore" + OPTIONS)
        connection.data_received(OPTIONS + b"\r\n")  # ignored: the stream cannot be cut any more
        await asyncio.sleep(0.6)
        return received, connection.open

    received, still_open = asyncio.run(scenario())
    assert len(received) == 1 and received[0].endswith(b"Content-Length: -5\r\n\r\n")
    assert not still_open


def test_oversized_message_closes_the_connection() -> None:
    async def scenario() -> bool:
        connection, received, _ = _connection()
        connection.data_received(OPTIONS + b"Content-Length: 100000\r\n\r\n")
        await asyncio.sleep(0.6)
        assert received == []
        return connection.open

    assert not asyncio.run(scenario())


@requires_sipp
def test_call_over_tcp_is_answered_echoed_and_hung_up(tmp_path: Path, data_dir: Path) -> None:
    audio, _ = load_audio(data_dir / "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav")
    pcap = write_rtp_pcap(tmp_path / "speech.pcap", audio / float(np.abs(audio).max()) * 0.5)
    calls: list[CallAudio] = []

    async def handler(call: CallAudio) -> None:
        calls.append(call)
        await EchoHandler()(call)

    async def scenario() -> tuple[int, str, np.ndarray, int, int]:
        port = free_udp_port()
        async with running_server(handler) as server, rtp_capture(port) as capture:
            options = await run_sipp("options.xml", server, transport="t1", workdir=tmp_path)
            assert options.returncode == 0, options.output
            result = await run_sipp(
                "call.xml",
                server,
                keys={"rtp_port": str(port), "codecs": "0", "pcap": str(pcap)},
                pause_ms=4000,
                transport="t1",
                workdir=tmp_path,
            )
            return (
                result.returncode,
                result.output,
                capture.audio_8k("PCMU"),
                server.stats.stream_messages,
                server.stats.datagrams,
            )

    returncode, output, echo, stream_messages, datagrams = asyncio.run(scenario())
    assert returncode == 0, output
    assert stream_messages >= 4 and datagrams == 0  # OPTIONS, INVITE, ACK, BYE all came over TCP
    call = calls[0]
    assert isinstance(call, Call) and call.end_reason == "caller hung up"
    assert speech_span_s(echo, 8000) > 2.0


@requires_sipp
def test_appliance_bye_goes_down_the_callers_tcp_connection(tmp_path: Path, data_dir: Path) -> None:
    audio, _ = load_audio(data_dir / "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav")
    pcap = write_rtp_pcap(tmp_path / "short.pcap", audio[:1600])

    async def scenario() -> tuple[int, str]:
        async with running_server(EchoHandler(), rtp_timeout_s=1.0) as server:
            result = await run_sipp(
                "call_until_bye.xml",
                server,
                keys={"rtp_port": str(free_udp_port()), "codecs": "0", "pcap": str(pcap)},
                transport="t1",
                workdir=tmp_path,
            )
            assert server.calls == {}
            return result.returncode, result.output

    returncode, output = asyncio.run(scenario())
    assert returncode == 0, output  # SIPp got the BYE (Via .../TCP) on its connection and answered it


def test_tcp_connections_are_bounded() -> None:
    """Real sockets to the real server: a peer outside allow_from is closed at once; one address gets
    tcp_max_per_source connections; an idle connection and one that starts a message and never ends it
    are closed after their timeouts; a connection that keeps sending whole messages stays."""

    async def scenario() -> dict[str, object]:
        async with running_server(
            EchoHandler(),
            allow_from=("127.0.0.1/32",),
            tcp_idle_timeout_s=0.6,
            tcp_message_timeout_s=0.4,
            tcp_max_per_source=3,
        ) as server:
            port = server.local_port
            results: dict[str, object] = {}
            stranger_r, stranger_w = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.2", 0)
            )
            results["stranger closed"] = await closed_within(stranger_r, 0.3)
            stranger_w.close()
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
            results["fourth closed"] = await closed_within(held[3][0], 0.3)
            results["first open"] = not await closed_within(held[0][0], 0.1)
            held[1][1].write(
                b"OPTIONS sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:1"
            )  # never finished
            results["unfinished closed"] = await closed_within(held[1][0], 0.55)
            busy_r, busy_w = held[2]
            for n in range(4):  # whole messages every 0.3 s: busy, never idle for 0.6 s
                busy_w.write(OPTIONS + f"Content-Length: 0\r\nCall-ID-Extra: {n}\r\n\r\n".encode())
                await asyncio.sleep(0.3)
            answers = await asyncio.wait_for(busy_r.read(65536), 1.0)
            results["busy answered"] = answers.startswith(b"SIP/2.0 200")
            results["idle closed"] = await closed_within(held[0][0], 1.0)
            results["busy closed after going idle"] = await closed_within(busy_r, 1.5)
            for _, writer in held:
                writer.close()
            return results

    results = asyncio.run(scenario())
    assert all(results.values()), results
