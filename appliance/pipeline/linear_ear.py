"""A second ear for the VAD while a reply plays behind the echo canceller: the linear canceller's output.

AEC3's suppressor, whose output the VAD hears, turns bands down wherever echo may remain; in the
first moments a person speaks over the reply it turns their voice down with the echo, and a short
word ("wait", "hold on") can vanish from it. The linear canceller's output keeps the person whole,
but also what is left of the echo, which Silero hears as speech. So a frame of it counts only where

- Silero is sure of it (``threshold``),
- it is loud beside the echo the canceller has just been removing (``LOUDER_THAN_ECHO_DB``): a
  person near the kiosk, not the residue, which is far below the echo it came from,
- and the canceller has been removing most of the echo (``MIN_CANCELLED_DB``: the median over the
  last second's frames where the echo was strong, so that the room's noise between words does not
  count): not while it is still learning the room, nor where the room's echo outlasts its filter (a
  reverberant hall), where the residue is as loud as a person.

The thresholds come from ``bench aec``'s rooms (docs/echo-cancellation.md).
"""

from __future__ import annotations

import math
import statistics
from collections import deque

LOUDER_THAN_ECHO_DB = -10.0  # the frame's power over the loudest echo removed in the last ECHO_FRAMES
ECHO_FRAMES = 8  # 256 ms: the echo just before a person starts still counts when the reply pauses
MIN_CANCELLED_DB = 10.0  # the echo removed over what is left, the median over CANCELLED_FRAMES
CANCELLED_FRAMES = 32  # about a second of the reply
STRONG_ECHO_DB = -10.0  # of those, the frames whose echo is within this of the loudest
_FLOOR = 1e-12


class LinearEar:
    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._echo: deque[float] = deque(maxlen=ECHO_FRAMES)
        self._cancelled: deque[tuple[float, float]] = deque(maxlen=CANCELLED_FRAMES)  # (echo, dB removed)

    def hears(
        self, probability: float, heard_power: float, echo_power: float, *, new_filter: bool = False
    ) -> bool:
        """One frame while a reply plays: Silero's ``probability`` on the linear output, that output's
        power and the power of the echo taken out of it. Whether a person is speaking in it.
        ``new_filter``: the canceller has just started from another filter (a kept room placed, or
        the room solved from the first echo): how far the old one cancelled says nothing of it."""
        if new_filter:
            self._cancelled.clear()
        trusted = len(self._cancelled) >= ECHO_FRAMES and self.cancelled_db() >= MIN_CANCELLED_DB
        self._echo.append(echo_power)
        removed_db = 10.0 * math.log10((echo_power + _FLOOR) / (heard_power + _FLOOR))
        self._cancelled.append((echo_power, removed_db))
        loud = heard_power >= max(self._echo) * 10.0 ** (LOUDER_THAN_ECHO_DB / 10.0)
        return trusted and loud and probability >= self.threshold

    def cancelled_db(self) -> float:
        """How far below the echo the canceller has been leaving what it hears, where the echo was strong."""
        if not self._cancelled:
            return 0.0
        strongest = max(echo for echo, _ in self._cancelled)
        floor = strongest * 10.0 ** (STRONG_ECHO_DB / 10.0)
        return statistics.median(removed for echo, removed in self._cancelled if echo >= floor)
