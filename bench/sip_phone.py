"""The benchmarks' loopback phone: INVITE with SDP, ACK, RTP both ways (20 ms, PCMU), BYE; over UDP with
plain RTP, or over TLS with SRTP (SDES keys in its SDP, libsrtp). It times the answer (INVITE sent -> 200
OK) and the jitter of what it receives (RFC 3550's interarrival estimate)."""

from __future__ import annotations

import asyncio
import base64
import secrets
import ssl
import time
from typing import Any, Protocol

import numpy as np

from appliance.rtp import g711
from appliance.rtp.packet import RtpPacket, parse_rtp
from appliance.rtp.srtp import MASTER_KEY_BYTES, SrtpKeys, SrtpSession, parse_crypto
from appliance.sip.message import SipResponse, parse_message
from appliance.sip.tcp import stream_content_length

LOOPBACK = "127.0.0.1"
SUITE = "AES_CM_128_HMAC_SHA1_80"


class Script(Protocol):
    done: bool

    def next_chunk(self, samples: int, now: float) -> np.ndarray: ...

    def on_output(self, audio: np.ndarray, now: float) -> None: ...


class _Media(asyncio.DatagramProtocol):
    def __init__(self, script: Script) -> None:
        self.script = script
        self.srtp: SrtpSession | None = None
        self.transit_s: float | None = None
        self.jitter_s = 0.0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        now = time.monotonic()
        if self.srtp is not None:
            data = self.srtp.unprotect(data)
        packet = parse_rtp(data)
        transit = now - packet.timestamp / 8000
        if self.transit_s is not None:  # RFC 3550 A.8
            self.jitter_s += (abs(transit - self.transit_s) - self.jitter_s) / 16
        self.transit_s = transit
        self.script.on_output(g711.decode(packet.payload, "PCMU"), now)

    async def stream(self, transport: Any, remote: tuple[str, int]) -> None:
        ssrc, start, index = secrets.randbits(32), time.monotonic(), 0
        while not self.script.done:
            samples = self.script.next_chunk(160, time.monotonic())
            data = RtpPacket(0, index & 0xFFFF, index * 160, ssrc, g711.encode(samples, "PCMU")).to_bytes()
            transport.sendto(self.srtp.protect(data) if self.srtp is not None else data, remote)
            index += 1
            await asyncio.sleep(max(0.0, start + index * 0.020 - time.monotonic()))


class _Signalling(asyncio.DatagramProtocol):
    """Requests out and responses in, over UDP or one TLS connection."""

    def __init__(self) -> None:
        self.responses: asyncio.Queue[SipResponse] = asyncio.Queue()
        self.udp: Any = None
        self.writer: asyncio.StreamWriter | None = None
        self.reader_task: asyncio.Task[None] | None = None
        self.port = 0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        message = parse_message(data)
        if isinstance(message, SipResponse):
            self.responses.put_nowait(message)

    async def open(self, server: tuple[str, int], tls: ssl.SSLContext | None) -> float:
        """Ready to send; the TLS handshake's time (0 over UDP)."""
        loop = asyncio.get_running_loop()
        if tls is None:
            self.udp, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(LOOPBACK, 0))
            self.port = int(self.udp.get_extra_info("sockname")[1])
            return 0.0
        started = time.monotonic()
        reader, self.writer = await asyncio.open_connection(*server, ssl=tls)
        handshake_s = time.monotonic() - started
        self.port = int(self.writer.get_extra_info("sockname")[1])
        self.reader_task = loop.create_task(self._read(reader))
        return handshake_s

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(stream_content_length(head) or 0)
            self.datagram_received(head + body, None)

    def send(self, data: bytes, server: tuple[str, int]) -> None:
        if self.writer is not None:
            self.writer.write(data)
        else:
            self.udp.sendto(data, server)

    def close(self) -> None:
        if self.reader_task is not None:
            self.reader_task.cancel()
        if self.writer is not None:
            self.writer.close()
        if self.udp is not None:
            self.udp.close()


class Phone:
    """One call from ``script``; ``tls`` (a client context) for SIP over TLS to ``tls_port``, ``srtp``
    for SRTP media."""

    def __init__(self, script: Script, *, tls: ssl.SSLContext | None = None, srtp: bool = False) -> None:
        self.script, self.tls, self.srtp = script, tls, srtp
        self.setup_s: float | None = None  # INVITE sent -> 200 OK received
        self.handshake_s = 0.0
        self.jitter_s = 0.0

    async def run(self, server_port: int, tls_port: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        server = (LOOPBACK, tls_port if self.tls is not None and tls_port else server_port)
        sip = _Signalling()
        self.handshake_s = await sip.open(server, self.tls)
        media = _Media(self.script)
        rtp, _ = await loop.create_datagram_endpoint(lambda: media, local_addr=(LOOPBACK, 0))
        media_port = rtp.get_extra_info("sockname")[1]
        transport = "TLS" if self.tls is not None else "UDP"
        param = ";transport=tls" if self.tls is not None else ""
        call_id, tag = secrets.token_hex(8), secrets.token_hex(4)
        head = (
            f"From: <sip:bench@{LOOPBACK}:{sip.port}>;tag={tag}\r\nCall-ID: {call_id}\r\nMax-Forwards: 70\r\n"
            f"Contact: <sip:bench@{LOOPBACK}:{sip.port}{param}>\r\n"
        )
        key = secrets.token_bytes(MASTER_KEY_BYTES)
        crypto = f"a=crypto:1 {SUITE} inline:{base64.b64encode(key).decode()}\r\n" if self.srtp else ""
        sdp = (
            f"v=0\r\no=bench 1 1 IN IP4 {LOOPBACK}\r\ns=-\r\nc=IN IP4 {LOOPBACK}\r\nt=0 0\r\n"
            f"m=audio {media_port} RTP/{'SAVP' if self.srtp else 'AVP'} 0\r\n{crypto}"
        )
        target = f"sip:appliance@{LOOPBACK}:{server[1]}{param}"

        def request(method: str, cseq: int, to: str, body: str = "") -> bytes:
            via = f"Via: SIP/2.0/{transport} {LOOPBACK}:{sip.port};branch=z9hG4bK{secrets.token_hex(6)}\r\n"
            extra = "Content-Type: application/sdp\r\n" if body else ""
            return (
                f"{method} {target} SIP/2.0\r\n{via}{head}To: {to}\r\nCSeq: {cseq} {method}\r\n{extra}"
                f"Content-Length: {len(body)}\r\n\r\n{body}"
            ).encode()

        invited = time.monotonic()
        sip.send(request("INVITE", 1, f"<{target}>", sdp), server)
        try:
            while True:
                response = await asyncio.wait_for(sip.responses.get(), 10)
                if response.status >= 200:
                    break
            if response.status != 200:
                raise RuntimeError(f"call refused: {response.status} {response.reason}")
            self.setup_s = time.monotonic() - invited
            to = response.get("To") or ""
            answer = response.body.decode()
            m_line = next(line for line in answer.splitlines() if line.startswith("m=audio"))
            if self.srtp:
                theirs = next(
                    parse_crypto(line.removeprefix("a=crypto:"))
                    for line in answer.splitlines()
                    if line.startswith("a=crypto:")
                )
                assert theirs is not None, answer
                media.srtp = SrtpSession(SrtpKeys(SUITE, key, theirs.key))
            sip.send(request("ACK", 1, to), server)
            await media.stream(rtp, (LOOPBACK, int(m_line.split()[1])))
            self.jitter_s = media.jitter_s
            sip.send(request("BYE", 2, to), server)
            await asyncio.sleep(0.2)
        finally:
            sip.close()
            rtp.close()
