"""Receive-side jitter buffer: RTP payloads back in sequence order, gaps reported as losses.

The consumer is speech detection and recognition, not a loudspeaker, so the buffer adds no fixed
playout delay: a packet is released as soon as everything before it has arrived. Only when one is
missing does the buffer wait, for at most ``depth_packets`` later packets, before declaring it lost
(``None`` in the output, which the caller conceals). Pure: no clock and no I/O.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

_SEQ_MOD = 1 << 16


@dataclass
class JitterStats:
    received: int = 0
    released: int = 0
    lost: int = 0
    late: int = 0
    duplicate: int = 0
    resets: int = 0


class JitterBuffer:
    def __init__(self, depth_packets: int = 3, max_gap_packets: int = 50) -> None:
        if depth_packets < 0:
            raise ValueError(f"depth_packets must be >= 0, got {depth_packets}")
        if max_gap_packets <= depth_packets:
            raise ValueError("max_gap_packets must be larger than depth_packets")
        self.depth_packets = depth_packets
        self.max_gap_packets = max_gap_packets
        self.stats = JitterStats()
        self._held: dict[int, bytes] = {}
        self._next: int | None = None  # extended sequence number expected next
        self._last_extended: int | None = None
        self._recent: collections.deque[int] = collections.deque(maxlen=64)  # released, to tell duplicates

    @property
    def held(self) -> int:
        return len(self._held)

    def push(self, sequence: int, payload: bytes) -> list[bytes | None]:
        """Add one packet; return the payloads now ready, in order (``None`` for a lost packet)."""
        self.stats.received += 1
        extended = self._extend(sequence & 0xFFFF)
        if self._next is None:
            self._next = extended
        if extended < self._next:
            if extended in self._recent:
                self.stats.duplicate += 1
            else:
                self.stats.late += 1
            return []
        if extended in self._held:
            self.stats.duplicate += 1
            return []
        released: list[bytes | None] = []
        if extended - self._next > self.max_gap_packets:
            # A jump this large is a restarted or replaced stream, not a loss to conceal.
            released = self._release_held()
            self.stats.resets += 1
            self._next = extended
        self._held[extended] = payload
        released.extend(self._release())
        return released

    def flush(self) -> list[bytes | None]:
        """Release everything held (the stream paused or ended), concealing the gaps between."""
        return self._release_held()

    def reset(self) -> None:
        self._held.clear()
        self._recent.clear()
        self._next = None
        self._last_extended = None

    def _extend(self, sequence: int) -> int:
        if self._last_extended is None:
            extended = sequence + _SEQ_MOD  # room below for late packets after a wrap
        else:
            delta = (sequence - self._last_extended + _SEQ_MOD // 2) % _SEQ_MOD - _SEQ_MOD // 2
            extended = self._last_extended + delta
        if self._last_extended is None or extended > self._last_extended:
            self._last_extended = extended
        return extended

    def _release(self) -> list[bytes | None]:
        assert self._next is not None
        out: list[bytes | None] = []
        while self._held:
            if self._next in self._held:
                out.append(self._held.pop(self._next))
                self._recent.append(self._next)
                self.stats.released += 1
                self._next += 1
            elif max(self._held) - self._next >= self.depth_packets:
                out.append(None)
                self.stats.lost += 1
                self._next += 1
            else:
                break
        return out

    def _release_held(self) -> list[bytes | None]:
        out: list[bytes | None] = []
        if self._next is None:
            return out
        while self._held:
            payload = self._held.pop(self._next, None)
            if payload is None:
                self.stats.lost += 1
            else:
                self._recent.append(self._next)
                self.stats.released += 1
            out.append(payload)
            self._next += 1
        return out
