"""The keys a caller may press, and how many: a gate every key passes, whether it came as an RFC 4733
telephone-event or in a SIP INFO. A flood of keys (thousands a second, or one long call of them) would
otherwise fill the log, the typed number and the model's prompt, and hold the event loop that sends the
other calls' audio."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from appliance.ratelog import ThrottledLog
from appliance.rtp.dtmf import EVENT_NAMES

log = logging.getLogger(__name__)

KEYS = frozenset(EVENT_NAMES)  # the sixteen keypad events of RFC 4733
KEYS_PER_S = 8.0  # a person on a keypad presses at most a few keys a second
KEYS_BURST = 16  # ... and a phone may send a number stored in it at once
KEYS_PER_CALL = 256


class KeyGate:
    """Admits a call's keys: only keypad keys, at most ``per_s`` a second (a burst of ``burst``), and
    ``per_call`` in all. Refusals are counted and logged at most once per interval."""

    def __init__(
        self,
        label: str,
        *,
        per_s: float = KEYS_PER_S,
        burst: int = KEYS_BURST,
        per_call: int = KEYS_PER_CALL,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self.label = label
        self.per_s = per_s
        self.burst = burst
        self.per_call = per_call
        self.admitted: list[str] = []
        self.refused = 0
        self._clock = clock
        self._on_refused = on_refused
        self._tokens = float(burst)
        self._filled_at = clock()
        self._noisy = ThrottledLog(log)

    def admit(self, key: str, how: str) -> bool:
        """True when ``key`` (as it came ``how``: "RTP", "SIP INFO") is taken as pressed."""
        why = self._refusal(key)
        if why is not None:
            self.refused += 1
            self._on_refused()
            self._noisy.log(
                logging.WARNING, why, "%s: key %r (%s) ignored: %s", self.label, key[:8], how, why
            )
            return False
        self.admitted.append(key)
        log.info("%s: DTMF %s (%s)", self.label, key, how)  # at most 8 a second, 256 a call
        return True

    def _refusal(self, key: str) -> str | None:
        if key not in KEYS:
            return "not a keypad key (0-9, *, #, A-D)"
        if len(self.admitted) >= self.per_call:
            return f"more than {self.per_call} keys in one call"
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._filled_at) * self.per_s)
        self._filled_at = now
        if self._tokens < 1.0:
            return f"more than {self.per_s:.0f} keys a second"
        self._tokens -= 1.0
        return None
