"""One call's RTP stream on its own UDP port: receive, reorder, decode; queue, pace, send.

Received audio comes out as 16 kHz float32 frames of ``frame_samples``; audio to send goes in at
16 kHz and leaves as one G.711 packet every 20 ms (silence when nothing is queued, so the far end's
own media timeout never fires while the appliance listens).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from appliance.ratelog import ThrottledLog
from appliance.rtp import g711
from appliance.rtp.dtmf import Digit, DtmfDetector, DtmfError
from appliance.rtp.jitter import JitterBuffer
from appliance.rtp.keys import KeyGate
from appliance.rtp.packet import RtpError, RtpPacket, looks_like_rtcp, parse_rtp
from appliance.rtp.resample import Upsampler2x, downsample_16k_to_8k
from appliance.rtp.srtp import SrtpKeys, SrtpRejected, SrtpSession
from engines.net import is_ip_literal

log = logging.getLogger(__name__)

PACKET_SAMPLES = 160  # 20 ms at 8 kHz
PACKET_S = 0.020
CLOCK_RATE_HZ = 8000
_MAX_BEHIND_S = 0.2


@dataclass(frozen=True)
class MediaParams:
    remote_host: str
    remote_port: int
    codec: str  # "PCMU" or "PCMA"
    payload_type: int
    telephone_event_pt: int | None = None
    direction: str = "sendrecv"  # as seen from the appliance
    srtp: SrtpKeys | None = None  # the call's keys when its media is encrypted

    def __post_init__(self) -> None:
        # A name here would be resolved by sendto() for every packet, blocking the event loop and
        # sending DNS queries from the media path.
        if not is_ip_literal(self.remote_host):
            raise ValueError(f"RTP peer {self.remote_host[:60]!r} is not an IP address")

    @property
    def sends(self) -> bool:
        return self.direction in ("sendrecv", "sendonly") and self.remote_port != 0


@dataclass
class StreamStats:
    packets_received: int = 0
    packets_sent: int = 0
    bad_packets: int = 0
    foreign_packets: int = 0
    rtcp_packets: int = 0
    unknown_payload: int = 0
    frames_dropped: int = 0
    srtp_rejected: int = 0  # SRTP/SRTCP packets that failed authentication or replayed one (dropped)
    digits: list[str] = field(default_factory=list)  # the keys pressed (those the call's KeyGate admitted)
    longest_send_gap_s: float = 0.0  # between two packets sent (20 ms when the event loop keeps time)


class RtpStream(asyncio.DatagramProtocol):
    def __init__(
        self,
        params: MediaParams,
        *,
        frame_samples: int = 512,
        jitter_depth_packets: int = 3,
        max_queued_frames: int = 256,
        label: str = "",
        latch: bool = True,
        on_dropped: Callable[[str], None] | None = None,
    ) -> None:
        self.params = params
        # Symmetric RTP: the first address and port that sends valid media for the call is the
        # caller's; media from any other port of that host is foreign (another device behind the
        # same address cannot inject speech that starts a turn).
        self.latch = latch
        self.latched: tuple[str, int] | None = None
        self.frame_samples = frame_samples
        self.label = label
        self._on_dropped = on_dropped or (lambda why: None)  # the server's count of what all calls dropped
        self.keys = KeyGate(label or "call", on_refused=lambda: self._on_dropped("key"))
        self.stats = StreamStats(digits=self.keys.admitted)
        self._noisy = ThrottledLog(log)
        self.last_received_s: float | None = None
        self._jitter = JitterBuffer(depth_packets=jitter_depth_packets)
        self._dtmf = DtmfDetector()
        self._upsampler = Upsampler2x()
        self._pending_16k = np.zeros(0, dtype=np.float32)
        self._frames: asyncio.Queue[np.ndarray | None] = asyncio.Queue(maxsize=max_queued_frames)
        self._outgoing: collections.deque[np.ndarray] = collections.deque()
        self._queued_samples = 0
        self._played_samples = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._transport: asyncio.DatagramTransport | None = None
        self._sender: asyncio.Task[None] | None = None
        self._remote_ssrc: int | None = None
        self._last_payload_samples = PACKET_SAMPLES
        self._closed = False
        self._ssrc = random.getrandbits(32)
        self._sequence = random.getrandbits(16)
        self._timestamp = random.getrandbits(32)
        self._talkspurt = True
        self._srtp = SrtpSession(params.srtp) if params.srtp is not None else None

    # --- lifecycle -------------------------------------------------------------------------------
    async def open(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port))

    def start(self) -> None:
        """Start the 20 ms send clock (after the call is answered)."""
        if self._sender is None and not self._closed:
            self.last_received_s = asyncio.get_running_loop().time()
            self._sender = asyncio.get_running_loop().create_task(
                self._send_loop(), name=f"rtp-send {self.label}"
            )

    def update(self, params: MediaParams) -> None:
        """New remote address, codec or direction (a re-INVITE)."""
        if params.codec != self.params.codec:
            self._jitter.reset()
        if (params.remote_host, params.remote_port) != (self.params.remote_host, self.params.remote_port):
            self.latched = None  # the media moved: latch again to what sends next
        if params.srtp != self.params.srtp:
            self._srtp = SrtpSession(params.srtp) if params.srtp is not None else None
        self.params = params

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()
        self._outgoing.clear()
        self._queued_samples = 0
        self._drained.set()
        while True:  # make room for the end-of-stream marker
            try:
                self._frames.put_nowait(None)
                break
            except asyncio.QueueFull:
                self._frames.get_nowait()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def local_port(self) -> int:
        assert self._transport is not None
        return int(self._transport.get_extra_info("sockname")[1])

    # --- caller -> appliance -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)  # selector transports do not subclass it

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if self._closed:
            return
        source = (str(addr[0]), int(addr[1]))
        if source[0] != self.params.remote_host or (self.latched is not None and source != self.latched):
            self.stats.foreign_packets += 1
            self._on_dropped("media")
            expected = f"{self.latched[0]}:{self.latched[1]}" if self.latched else self.params.remote_host
            self._noisy.log(
                logging.WARNING,
                "foreign",
                "%s: media from %s:%d dropped: this call's media comes from %s (the address in the "
                "caller's SDP%s); a phone system that sends media from another address needs it in its SDP",
                self.label,
                *source,
                expected,
                ", first port that sent" if self.latched else "",
            )
            return
        rtcp = looks_like_rtcp(data)
        if self._srtp is not None:
            try:
                data = self._srtp.unprotect_rtcp(data) if rtcp else self._srtp.unprotect(data)
            except SrtpRejected as err:
                self.stats.srtp_rejected += 1
                self._on_dropped("srtp")
                self._noisy.info(
                    "srtp", "%s: dropped an SRTP packet from %s:%d: %s", self.label, *source, err
                )
                return
        if rtcp:
            self.stats.rtcp_packets += 1
            return
        try:
            packet = parse_rtp(data)
        except RtpError as err:
            self.stats.bad_packets += 1
            self._noisy.info("bad", "%s: dropped a bad RTP packet from %s: %s", self.label, addr, err)
            return
        if packet.payload_type not in (self.params.payload_type, self.params.telephone_event_pt):
            self.stats.unknown_payload += 1
            return
        if self.latch and self.latched is None:
            self.latched = source
        self.last_received_s = asyncio.get_running_loop().time()
        self.stats.packets_received += 1
        if packet.payload_type == self.params.telephone_event_pt:
            self._on_telephone_event(packet)
        elif packet.payload_type == self.params.payload_type:
            if packet.ssrc != self._remote_ssrc:
                if self._remote_ssrc is not None:
                    self._on_payloads(self._jitter.flush())
                    self._jitter.reset()
                self._remote_ssrc = packet.ssrc
            self._on_payloads(self._jitter.push(packet.sequence, packet.payload))

    def _on_telephone_event(self, packet: RtpPacket) -> None:
        try:
            digits: list[Digit] = self._dtmf.feed(packet.timestamp, packet.payload)
        except DtmfError as err:
            self.stats.bad_packets += 1
            self._noisy.info("bad-event", "%s: dropped a bad telephone-event packet: %s", self.label, err)
            return
        for digit in digits:
            self.keys.admit(digit.name, "RTP")

    def _on_payloads(self, payloads: list[bytes | None]) -> None:
        if not payloads:
            return
        chunks = []
        for payload in payloads:
            if payload is None:  # lost: conceal with silence of the same length
                chunks.append(np.zeros(self._last_payload_samples, dtype=np.float32))
            elif payload:
                self._last_payload_samples = len(payload)
                chunks.append(g711.decode(payload, self.params.codec))
        if not chunks:
            return
        upsampled = self._upsampler.process(np.concatenate(chunks))
        pending = np.concatenate([self._pending_16k, upsampled])
        count = len(pending) // self.frame_samples
        for index in range(count):
            self._put_frame(pending[index * self.frame_samples : (index + 1) * self.frame_samples])
        self._pending_16k = pending[count * self.frame_samples :]

    def _put_frame(self, frame: np.ndarray) -> None:
        try:
            self._frames.put_nowait(frame)
        except asyncio.QueueFull:
            self._frames.get_nowait()  # the consumer is behind: keep the newest audio
            self.stats.frames_dropped += 1
            self._frames.put_nowait(frame)

    async def frames(self) -> AsyncIterator[np.ndarray]:
        while True:
            frame = await self._frames.get()
            if frame is None:
                return
            yield frame

    # --- appliance -> caller -----------------------------------------------------------------------
    def play(self, audio_16k: np.ndarray) -> None:
        if self._closed or len(audio_16k) == 0:
            return
        audio_8k = downsample_16k_to_8k(audio_16k)
        self._outgoing.append(audio_8k)
        self._queued_samples += len(audio_8k)
        self._drained.clear()

    def flush(self) -> float:
        dropped_s = self._queued_samples / CLOCK_RATE_HZ
        self._outgoing.clear()
        self._queued_samples = 0
        self._drained.set()
        return dropped_s

    async def drain(self) -> None:
        await self._drained.wait()

    @property
    def queued_s(self) -> float:
        return self._queued_samples / CLOCK_RATE_HZ

    @property
    def played_s(self) -> float:
        return self._played_samples / CLOCK_RATE_HZ

    def _next_samples(self) -> np.ndarray | None:
        if not self._outgoing:
            return None
        parts, needed = [], PACKET_SAMPLES
        while needed and self._outgoing:
            head = self._outgoing[0]
            take = head[:needed]
            parts.append(take)
            needed -= len(take)
            if len(take) == len(head):
                self._outgoing.popleft()
            else:
                self._outgoing[0] = head[len(take) :]
        samples = np.concatenate(parts)
        self._queued_samples -= len(samples)
        self._played_samples += len(samples)
        if not self._outgoing:
            self._drained.set()
        if len(samples) < PACKET_SAMPLES:
            samples = np.concatenate([samples, np.zeros(PACKET_SAMPLES - len(samples), dtype=np.float32)])
        return samples

    async def _send_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_s = last_sent = loop.time()
        while not self._closed:
            self._send_one()
            sent = loop.time()
            self.stats.longest_send_gap_s = max(self.stats.longest_send_gap_s, sent - last_sent)
            last_sent = sent
            idle_s = loop.time() - (self.last_received_s or 0.0)
            if self._jitter.held and idle_s > (self._jitter.depth_packets + 1) * PACKET_S:
                self._on_payloads(self._jitter.flush())
            next_s += PACKET_S
            now = loop.time()
            if now - next_s > _MAX_BEHIND_S:
                next_s = now  # the loop was blocked: do not burst to catch up
            await asyncio.sleep(max(0.0, next_s - now))

    def _send_one(self) -> None:
        samples = self._next_samples()
        speaking = samples is not None
        if samples is None:
            samples = np.zeros(PACKET_SAMPLES, dtype=np.float32)
        if self.params.sends and self._transport is not None:
            packet = RtpPacket(
                payload_type=self.params.payload_type,
                sequence=self._sequence,
                timestamp=self._timestamp,
                ssrc=self._ssrc,
                payload=g711.encode(samples, self.params.codec),
                marker=speaking and self._talkspurt,
            )
            data = packet.to_bytes()
            if self._srtp is not None:
                data = self._srtp.protect(data)
            self._transport.sendto(data, (self.params.remote_host, self.params.remote_port))
            self.stats.packets_sent += 1
        self._talkspurt = not speaking
        self._sequence = (self._sequence + 1) & 0xFFFF
        self._timestamp = (self._timestamp + PACKET_SAMPLES) & 0xFFFFFFFF

    def error_received(self, exc: Exception) -> None:
        log.debug("%s: RTP socket error: %s", self.label, exc)
