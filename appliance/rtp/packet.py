"""RTP packets (RFC 3550): parse and build, nothing else."""

from __future__ import annotations

import struct
from dataclasses import dataclass

RTP_VERSION = 2
HEADER_BYTES = 12
_HEADER = struct.Struct("!BBHII")


class RtpError(ValueError):
    """A datagram that is not a usable RTP packet; the message names what is wrong."""


@dataclass(frozen=True)
class RtpPacket:
    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes
    marker: bool = False
    csrcs: tuple[int, ...] = ()

    def to_bytes(self) -> bytes:
        if not 0 <= self.payload_type <= 127:
            raise ValueError(f"payload type must be 0..127, got {self.payload_type}")
        if len(self.csrcs) > 15:
            raise ValueError(f"at most 15 CSRCs, got {len(self.csrcs)}")
        first = (RTP_VERSION << 6) | len(self.csrcs)
        second = (0x80 if self.marker else 0) | self.payload_type
        header = _HEADER.pack(
            first, second, self.sequence & 0xFFFF, self.timestamp & 0xFFFFFFFF, self.ssrc & 0xFFFFFFFF
        )
        csrcs = b"".join(struct.pack("!I", c & 0xFFFFFFFF) for c in self.csrcs)
        return header + csrcs + self.payload


def parse_rtp(data: bytes) -> RtpPacket:
    """Parse one RTP datagram; header extensions are skipped and padding removed."""
    if len(data) < HEADER_BYTES:
        raise RtpError(f"datagram of {len(data)} bytes is shorter than the 12-byte RTP header")
    first, second, sequence, timestamp, ssrc = _HEADER.unpack_from(data)
    if first >> 6 != RTP_VERSION:
        raise RtpError(f"RTP version {first >> 6}, expected 2")
    csrc_count = first & 0x0F
    offset = HEADER_BYTES + 4 * csrc_count
    if len(data) < offset:
        raise RtpError(f"{csrc_count} CSRCs announced but the datagram has {len(data)} bytes")
    csrcs = struct.unpack_from(f"!{csrc_count}I", data, HEADER_BYTES)
    if first & 0x10:  # header extension: 16-bit profile, 16-bit length in 32-bit words
        if len(data) < offset + 4:
            raise RtpError("header extension announced but missing")
        (words,) = struct.unpack_from("!H", data, offset + 2)
        offset += 4 + 4 * words
        if len(data) < offset:
            raise RtpError(f"header extension of {words} words runs past the datagram")
    end = len(data)
    if first & 0x20:
        padding = data[-1]
        if padding == 0 or end - padding < offset:
            raise RtpError(f"padding of {padding} bytes does not fit the datagram")
        end -= padding
    return RtpPacket(
        payload_type=second & 0x7F,
        sequence=sequence,
        timestamp=timestamp,
        ssrc=ssrc,
        payload=bytes(data[offset:end]),
        marker=bool(second & 0x80),
        csrcs=tuple(csrcs),
    )


def looks_like_rtcp(data: bytes) -> bool:
    """RTCP multiplexed on the RTP port (RFC 5761): packet types 192..223 sit where RTP keeps M+PT."""
    return len(data) >= 2 and data[0] >> 6 == RTP_VERSION and 192 <= data[1] <= 223
