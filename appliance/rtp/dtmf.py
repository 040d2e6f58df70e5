"""RFC 4733 telephone-events (DTMF digits carried in RTP)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

EVENT_NAMES = "0123456789*#ABCD"
FLASH_EVENT = 16


class DtmfError(ValueError):
    """A telephone-event payload that cannot be read."""


@dataclass(frozen=True)
class TelephoneEvent:
    event: int
    end: bool
    volume_dbm0: int  # 0..63, as -dBm0
    duration_units: int  # in RTP timestamp units (1/8000 s for 8 kHz)

    @property
    def name(self) -> str:
        if self.event < len(EVENT_NAMES):
            return EVENT_NAMES[self.event]
        return "flash" if self.event == FLASH_EVENT else f"event-{self.event}"

    def to_bytes(self) -> bytes:
        flags = (0x80 if self.end else 0) | (self.volume_dbm0 & 0x3F)
        return struct.pack("!BBH", self.event & 0xFF, flags, self.duration_units & 0xFFFF)


def parse_telephone_event(payload: bytes) -> TelephoneEvent:
    if len(payload) < 4:
        raise DtmfError(f"telephone-event payload of {len(payload)} bytes; it needs 4")
    event, flags, duration = struct.unpack_from("!BBH", payload)
    return TelephoneEvent(
        event=event, end=bool(flags & 0x80), volume_dbm0=flags & 0x3F, duration_units=duration
    )


@dataclass(frozen=True)
class Digit:
    name: str
    duration_s: float


class DtmfDetector:
    """Turns the stream of telephone-event packets into one ``Digit`` per key press.

    One press is one RTP timestamp: several updates, then usually three copies of the end packet. The
    digit is reported once, at its first end packet, or when a new press starts without an end seen.
    """

    def __init__(self, clock_rate_hz: int = 8000) -> None:
        self._clock_rate_hz = clock_rate_hz
        self._timestamp: int | None = None
        self._current: TelephoneEvent | None = None
        self._reported = False

    def feed(self, timestamp: int, payload: bytes) -> list[Digit]:
        event = parse_telephone_event(payload)
        digits: list[Digit] = []
        if timestamp != self._timestamp:
            if self._current is not None and not self._reported:
                digits.append(self._digit(self._current))
            self._timestamp, self._reported = timestamp, False
        self._current = event
        if event.end and not self._reported:
            self._reported = True
            digits.append(self._digit(event))
        return digits

    def _digit(self, event: TelephoneEvent) -> Digit:
        return Digit(event.name, event.duration_units / self._clock_rate_hz)
