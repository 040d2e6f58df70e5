"""Helpers for the SIP tests: free ports, a running server, SIPp as the caller, RTP pcap and capture.

(No tests here; the SIP test modules import these.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest

from appliance.config import SipParams
from appliance.rtp import g711
from appliance.rtp.dtmf import EVENT_NAMES, TelephoneEvent
from appliance.rtp.packet import RtpPacket, parse_rtp
from appliance.sip.call import CallHandler
from appliance.sip.server import SipServer

SCENARIOS = Path(__file__).parent / "fixtures" / "sip"
LOOPBACK = "127.0.0.1"
SIPP = shutil.which("sipp")
# The only real-SIP coverage: skipped where SIPp is missing on a developer's machine, but on CI a
# missing SIPp fails (scripts/setup installs it), so the calls can never be skipped silently there.
requires_sipp = pytest.mark.skipif(
    SIPP is None and not os.environ.get("CI"), reason="SIPp is not installed (apt-get install sip-tester)"
)


class Listening(Protocol):
    """What SIPp is pointed at: a server's port (a SipServer, or a daemon's)."""

    @property
    def local_port(self) -> int: ...


def free_udp_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_media_ports(host: str = LOOPBACK) -> int:
    """A port P with P..P+3 free for UDP: SIPp's ``-mp`` binds audio RTP/RTCP at P, P+1 and video at
    P+2, P+3, so one free port alone is not enough (a taken P+2 failed a call now and then)."""
    for _attempt in range(200):
        base = random.randrange(10000, 20000, 4)  # below the ephemeral ports and the tests' RTP ranges
        sockets = []
        try:
            for port in range(base, base + 4):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(sock)
                sock.bind((host, port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError(f"no four consecutive free UDP ports on {host}")


def sip_config(**overrides: object) -> SipParams:
    base = random.randrange(20000, 30000, 2)
    values: dict[str, object] = {
        "enabled": True,
        "bind_host": LOOPBACK,
        "port": 0,
        "rtp_port_min": base,
        "rtp_port_max": base + 40,
        "allow_from": ("127.0.0.0/8",),
    }
    values.update(overrides)
    return SipParams(**values)


@contextlib.asynccontextmanager
async def running_server(handler: CallHandler, **overrides: object) -> AsyncIterator[SipServer]:
    server = SipServer(sip_config(**overrides), handler)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@dataclass
class SippResult:
    returncode: int
    output: str


async def run_sipp(
    scenario: str,
    server: Listening,
    *,
    keys: dict[str, str] | None = None,
    local_ip: str = LOOPBACK,
    timeout_s: float = 30.0,
    pause_ms: int = 0,
    transport: str = "u1",
    local_port: int | None = None,
    workdir: Path,
) -> SippResult:
    """One SIPp call as UAC against ``server``; returns SIPp's exit status (0: the scenario passed)."""
    if SIPP is None:
        pytest.fail("SIPp is required for the SIP call tests on CI (apt-get install sip-tester)")
    args = [
        SIPP, "-sf", str(SCENARIOS / scenario), f"{LOOPBACK}:{server.local_port}",
        "-i", local_ip, "-p", str(local_port or free_udp_port(local_ip)), "-mp", str(free_media_ports(local_ip)),
        "-m", "1", "-l", "1", "-d", str(pause_ms), "-t", transport, "-nostdin", "-timeout", f"{int(timeout_s)}s", "-timeout_error",
        "-trace_err", "-error_file", str(workdir / f"{scenario}.{random.getrandbits(24)}.errors.log"),
    ]  # fmt: skip
    for name, value in (keys or {}).items():
        args += ["-key", name, value]
    process = await asyncio.create_subprocess_exec(
        *args, cwd=workdir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s + 10)
    except asyncio.TimeoutError:
        process.kill()
        output, _ = await process.communicate()
    errors = "".join(p.read_text(errors="replace") for p in workdir.glob(f"{scenario}.*.errors.log"))
    return SippResult(
        process.returncode if process.returncode is not None else -1,
        output.decode(errors="replace")[-3000:] + errors[-3000:],
    )


def write_rtp_pcap(
    path: Path,
    audio_8k: np.ndarray,
    *,
    codec: str = "PCMU",
    payload_type: int = 0,
    src_port: int = 6000,
    dst_port: int = 7000,
    ssrc: int = 0x1234ABCD,
    keys: tuple[tuple[float, str], ...] = (),
) -> Path:
    """An Ethernet/IPv4/UDP capture of 20 ms G.711 RTP packets of ``audio_8k``, for SIPp to play;
    ``keys``: (seconds, key) pressed on the keypad, as RFC 4733 telephone-events (payload type 101,
    three 20 ms updates, then the end packet three times) in the same stream."""
    samples = np.concatenate([audio_8k, np.zeros((-len(audio_8k)) % 160, dtype=np.float32)])
    timed: list[tuple[int, int, int, bytes, bool]] = []  # (micros, payload type, timestamp, payload, marker)
    for index in range(len(samples) // 160):
        payload = g711.encode(samples[index * 160 : (index + 1) * 160], codec)
        timed.append((index * 20_000, payload_type, 160 * index, payload, index == 0))
    for at_s, key in keys:
        start = round(at_s * 50) * 160  # the press's RTP timestamp, on a packet boundary
        code = EVENT_NAMES.index(key)
        for step in range(6):
            end = step >= 3
            event = TelephoneEvent(code, end, 10, 160 * min(step + 1, 4))
            micros = round(at_s * 1_000_000) + min(step, 3) * 20_000 + step  # the end copies at once
            timed.append((micros, 101, start, event.to_bytes(), step == 0))
    timed.sort(key=lambda item: item[0])
    records = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    source, destination = socket.inet_aton(LOOPBACK), socket.inet_aton(LOOPBACK)
    for index, (micros, kind, timestamp, payload, marker) in enumerate(timed):
        rtp = RtpPacket(
            payload_type=kind,
            sequence=1000 + index,
            timestamp=timestamp,
            ssrc=ssrc,
            payload=payload,
            marker=marker,
        ).to_bytes()
        udp = struct.pack("!HHHH", src_port, dst_port, 8 + len(rtp), 0) + rtp
        ip_header = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), index & 0xFFFF, 0, 64, 17, 0, source, destination
        )
        checksum = _ip_checksum(ip_header)
        ip_header = ip_header[:10] + struct.pack("!H", checksum) + ip_header[12:]
        frame = b"\x00" * 12 + b"\x08\x00" + ip_header + udp
        records.append(struct.pack("<IIII", micros // 1_000_000, micros % 1_000_000, len(frame), len(frame)))
        records.append(frame)
    path.write_bytes(b"".join(records))
    return path


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass
class RtpCapture(asyncio.DatagramProtocol):
    """Collects the appliance's RTP on the port the SDP offer named."""

    packets: list[tuple[float, RtpPacket]] = field(default_factory=list)
    sources: set[tuple[str, int]] = field(default_factory=set)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.sources.add((str(addr[0]), int(addr[1])))
        self.packets.append((asyncio.get_running_loop().time(), parse_rtp(data)))

    def audio_8k(self, codec: str) -> np.ndarray:
        """The received stream in sequence order (duplicates dropped), decoded."""
        by_sequence: dict[int, bytes] = {}
        first = self.packets[0][1].sequence if self.packets else 0
        for _, packet in self.packets:
            by_sequence.setdefault((packet.sequence - first) & 0xFFFF, packet.payload)
        if not by_sequence:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([g711.decode(by_sequence[k], codec) for k in sorted(by_sequence)])


@contextlib.asynccontextmanager
async def rtp_capture(port: int) -> AsyncIterator[RtpCapture]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(RtpCapture, local_addr=(LOOPBACK, port))
    try:
        yield protocol
    finally:
        transport.close()


def speech_span_s(audio: np.ndarray, rate_hz: int, threshold: float = 0.02) -> float:
    """Seconds between the first and the last 20 ms window whose RMS is above ``threshold``."""
    window = rate_hz // 50
    count = len(audio) // window
    if count == 0:
        return 0.0
    rms = np.sqrt(np.mean(audio[: count * window].reshape(count, window) ** 2, axis=1))
    loud = np.nonzero(rms > threshold)[0]
    return 0.0 if len(loud) == 0 else (loud[-1] - loud[0] + 1) / 50
