"""One call's RTP stream over real loopback sockets, without SIP: receive path, pacing, barge-in flush."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from appliance.rtp import g711
from appliance.rtp.packet import RtpPacket
from appliance.rtp.stream import MediaParams, RtpStream
from tests.test_sip_helpers import LOOPBACK, free_udp_port, rtp_capture


def _tone_8k(seconds: float, freq_hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(8000 * seconds)) / 8000
    return (0.3 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


async def _open_stream(remote_port: int, codec: str = "PCMU", pt: int = 0) -> RtpStream:
    stream = RtpStream(MediaParams(LOOPBACK, remote_port, codec, pt, telephone_event_pt=101), label="test")
    await stream.open(LOOPBACK, free_udp_port())
    return stream


def test_reordered_and_lost_packets_come_out_as_continuous_16k_frames() -> None:
    tone = _tone_8k(1.0)

    async def scenario() -> tuple[list[np.ndarray], RtpStream]:
        stream = await _open_stream(free_udp_port())
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=(LOOPBACK, 0))
        order = list(range(50))
        order[10], order[11] = order[11], order[10]  # one swap
        order.remove(30)  # one loss
        for index in order:
            packet = RtpPacket(
                0, 60000 + index, 160 * index, 42, g711.encode(tone[160 * index : 160 * (index + 1)], "PCMU")
            )
            transport.sendto(packet.to_bytes(), (LOOPBACK, stream.local_port))
        foreign, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.2", 0)
        )
        foreign.sendto(RtpPacket(0, 1, 1, 1, b"\xff" * 160).to_bytes(), (LOOPBACK, stream.local_port))
        await asyncio.sleep(0.2)
        stream.start()  # its clock flushes what waits behind a gap once the sender is quiet
        await asyncio.sleep(0.3)
        await stream.close()
        frames = [frame async for frame in stream.frames()]
        transport.close()
        foreign.close()
        return frames, stream

    frames, stream = asyncio.run(scenario())
    assert all(frame.shape == (512,) and frame.dtype == np.float32 for frame in frames)
    assert len(frames) == 50 * 320 // 512  # 1 s at 16 kHz in whole frames, the lost packet concealed
    audio = np.concatenate(frames)
    window = audio[: 30 * 320 - 400]
    assert np.sqrt(np.mean(window[400:] ** 2)) > 0.15  # the tone, continuous across the swap
    assert np.sqrt(np.mean(audio[30 * 320 + 100 : 31 * 320 - 100] ** 2)) < 0.05  # the loss, as silence
    assert stream.stats.foreign_packets == 1 and stream.stats.packets_received == 49


def test_sent_packets_are_paced_and_flush_silences_the_caller_at_once() -> None:
    async def scenario() -> tuple[list[tuple[float, RtpPacket]], float, float, float]:
        port = free_udp_port()
        async with rtp_capture(port) as capture:
            stream = await _open_stream(port, "PCMA", 8)
            stream.start()
            stream.play(np.repeat(_tone_8k(3.0), 2))  # 3 s at 16 kHz
            await asyncio.sleep(0.5)
            flushed_at = asyncio.get_running_loop().time()
            dropped_s = stream.flush()
            await stream.drain()  # returns at once: nothing queued
            await asyncio.sleep(0.3)
            played_s = stream.played_s
            await stream.close()
            return capture.packets, flushed_at, dropped_s, played_s

    packets, flushed_at, dropped_s, played_s = asyncio.run(scenario())
    loud = [t for t, p in packets if np.sqrt(np.mean(g711.decode(p.payload, "PCMA") ** 2)) > 0.05]
    assert loud and loud[-1] - flushed_at < 0.045  # at most the packet already on its way
    assert dropped_s + played_s == pytest.approx(3.0, abs=0.03)
    assert 0.4 < played_s < 0.6
    assert all(p.payload_type == 8 for _, p in packets)
    assert packets[0][1].marker or any(p.marker for _, p in packets[:3])  # talkspurt start is marked


def test_ssrc_change_restarts_the_stream_without_losing_frames() -> None:

    async def scenario() -> tuple[RtpStream, list[np.ndarray]]:
        stream = await _open_stream(free_udp_port())
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=(LOOPBACK, 0))
        # a transfer: a new source whose numbering overlaps the old one (late packets to a naive buffer)
        for ssrc, first in ((1, 100), (2, 90)):
            for index in range(25):
                payload = g711.encode(_tone_8k(0.02), "PCMU")
                transport.sendto(
                    RtpPacket(0, (first + index) & 0xFFFF, 160 * index, ssrc, payload).to_bytes(),
                    (LOOPBACK, stream.local_port),
                )
        await asyncio.sleep(0.2)
        transport.close()
        await stream.close()
        return stream, [frame async for frame in stream.frames()]

    stream, frames = asyncio.run(scenario())
    assert stream.stats.packets_received == 50
    assert len(frames) >= 49 * 320 // 512


async def _stream_and_two_senders(
    label: str, *, latch: bool = True
) -> tuple[RtpStream, asyncio.DatagramTransport, asyncio.DatagramTransport, bytes]:
    """An open stream, two UDP senders on the caller's host (two ports), and 20 ms of PCMU."""
    stream = RtpStream(MediaParams(LOOPBACK, free_udp_port(), "PCMU", 0), label=label, latch=latch)
    await stream.open(LOOPBACK, free_udp_port())
    loop = asyncio.get_running_loop()
    first, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=(LOOPBACK, 0))
    second, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=(LOOPBACK, 0))
    return stream, first, second, g711.encode(_tone_8k(0.02), "PCMU")


@pytest.mark.parametrize("latch", [True, False])
def test_media_latches_to_the_first_port_of_the_callers_host_that_sends_it(latch: bool) -> None:
    """Two senders on the caller's own address: with latching (the default) only the first one's
    packets become frames and the other's are counted as foreign; without it both are taken."""

    async def scenario() -> RtpStream:
        stream, caller, other, payload = await _stream_and_two_senders("latch", latch=latch)
        for index in range(10):
            caller.sendto(
                RtpPacket(0, index, 160 * index, 7, payload).to_bytes(), (LOOPBACK, stream.local_port)
            )
            await asyncio.sleep(0.002)
            other.sendto(
                RtpPacket(0, 500 + index, 160 * index, 9, payload).to_bytes(), (LOOPBACK, stream.local_port)
            )
        await asyncio.sleep(0.2)
        caller.close()
        other.close()
        await stream.close()
        return stream

    stream = asyncio.run(scenario())
    if latch:
        assert stream.stats.packets_received == 10 and stream.stats.foreign_packets == 10
        assert stream.latched is not None and stream.latched[0] == LOOPBACK
    else:
        assert stream.stats.packets_received == 20 and stream.stats.foreign_packets == 0


def test_a_re_invite_that_moves_the_media_latches_again() -> None:
    async def scenario() -> tuple[int, int]:
        stream, first, second, payload = await _stream_and_two_senders("moved")
        first.sendto(RtpPacket(0, 1, 160, 7, payload).to_bytes(), (LOOPBACK, stream.local_port))
        await asyncio.sleep(0.05)
        stream.update(MediaParams(LOOPBACK, free_udp_port(), "PCMU", 0))  # hold/transfer: new address
        for index in range(5):
            second.sendto(
                RtpPacket(0, 100 + index, 160 * index, 8, payload).to_bytes(), (LOOPBACK, stream.local_port)
            )
        await asyncio.sleep(0.1)
        first.close()
        second.close()
        await stream.close()
        return stream.stats.packets_received, stream.stats.foreign_packets

    assert asyncio.run(scenario()) == (6, 0)
