"""A second ear for the VAD while a reply plays behind the echo canceller: the linear canceller's output.

AEC3's suppressor, whose output the VAD hears, turns bands down wherever echo may remain; in the
first moments a person speaks over the reply it turns their voice down with the echo, and a short
word ("wait", "hold on") can vanish from it. The linear canceller's output keeps the person whole,
but also what is left of the echo, which Silero hears as speech. So a frame of it counts only where

- Silero is sure of it (``threshold``),
- it is loud beside the echo the canceller has just been removing (``LOUDER_THAN_ECHO_DB``): a
  person near the kiosk, not the residue, which is far below the echo it came from,
- the canceller has been removing most of the echo (``MIN_CANCELLED_DB``: the median over the
  last second's frames where the echo was strong, so that the room's noise between words does not
  count): not while it is still learning the room, nor where the room's echo outlasts its filter (a
  reverberant hall), where the residue is as loud as a person,
- this frame is far less cancelled than that median (``UNEXPLAINED_DB``): a voice the filter
  cannot predict, not one of the frames where a filter that removes 15 dB on the whole leaves only 7
  (Silero hears those as speech: they are the reply's own words),
- and, where the ear did not hear the frame before, it is well over the room's noise
  (``NOISE_MARGIN_DB``): in a pause of the reply, Silero, having just heard the residue's words,
  still says speech for a moment over the noise alone; a word's quiet end still counts.

The thresholds come from ``bench aec``'s rooms (docs/echo-cancellation.md).
"""

from __future__ import annotations

import math
import statistics
from collections import deque

LOUDER_THAN_ECHO_DB = -10.0  # the frame's power over the loudest echo removed in the last ECHO_FRAMES
ECHO_FRAMES = 8  # 256 ms: the echo just before a person starts still counts when the reply pauses
TRUST_FRAMES = 8  # frames of a filter before it may be trusted
MIN_CANCELLED_DB = 10.0  # the echo removed over what is left, the median over CANCELLED_FRAMES
UNEXPLAINED_DB = 10.0  # how much less of this frame is removed than that median
# The frame's power over the room's noise as the ear hears it: the quietest frame of its last
# NOISE_FRAMES (the gaps between the reply's words). In a pause of the reply (between clauses, or the
# speaker run dry on a slow machine) the echo measure empties within ECHO_FRAMES, while Silero, which
# has just heard the residue's words, still says speech over the room's noise.
NOISE_MARGIN_DB = 12.0
NOISE_FRAMES = 94  # 3 s
CANCELLED_FRAMES = 32  # about a second of the reply
STRONG_ECHO_DB = -10.0  # of those, the frames whose echo is within this of the loudest
_FLOOR = 1e-12


class LinearEar:
    def __init__(
        self,
        threshold: float,
        *,
        unexplained_db: float | None = UNEXPLAINED_DB,
        noise_margin_db: float | None = NOISE_MARGIN_DB,
    ) -> None:
        """The rule's settings as shipped unless a benchmark compares others (None: not asked)."""
        self.threshold = threshold
        self.unexplained_db = unexplained_db
        self.noise_margin_db = noise_margin_db
        self._heard: deque[float] = deque(maxlen=NOISE_FRAMES)
        self._hearing = False  # the last frame was heard
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
        usually_db = self.cancelled_db()
        trusted = len(self._cancelled) >= TRUST_FRAMES and usually_db >= MIN_CANCELLED_DB
        self._echo.append(echo_power)
        removed_db = 10.0 * math.log10((echo_power + _FLOOR) / (heard_power + _FLOOR))
        self._cancelled.append((echo_power, removed_db))
        loud = heard_power >= max(self._echo) * 10.0 ** (LOUDER_THAN_ECHO_DB / 10.0)
        unexplained = self.unexplained_db is None or removed_db <= usually_db - self.unexplained_db
        self._heard.append(heard_power)
        margin = self.noise_margin_db
        # Only a word's start must stand out of the noise: its quiet end still counts.
        over_noise = (
            margin is None or self._hearing or heard_power >= min(self._heard) * 10.0 ** (margin / 10.0)
        )
        self._hearing = trusted and loud and unexplained and over_noise and probability >= self.threshold
        return self._hearing

    def cancelled_db(self) -> float:
        """How far below the echo the canceller has been leaving what it hears, where the echo was strong."""
        if not self._cancelled:
            return 0.0
        strongest = max(echo for echo, _ in self._cancelled)
        floor = strongest * 10.0 ** (STRONG_ECHO_DB / 10.0)
        return statistics.median(removed for echo, removed in self._cancelled if echo >= floor)
