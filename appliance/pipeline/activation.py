"""Whether speech may begin a turn (``[wake]``): always, or with a wake word for public places.

With ``wake.activation = "wake_word"`` the VAD's frames count as silence until the wake word is heard;
then the session listens for ``wake.listen_ms``, and after each turn for ``wake.follow_up_ms``. While
the appliance answers (a turn running, a reply playing) it always listens: a barge-in needs no wake word.
"""

from __future__ import annotations

import math

from appliance.trace.labels import OpenedBy
from engines.wake.params import WakeParams


class Activation:
    def __init__(self, params: WakeParams) -> None:
        self.params = params
        self.wakes = 0
        self._woke_at = -math.inf
        self._awake_until = -math.inf

    def step(self, now: float, *, heard_wake: bool, busy: bool) -> bool:
        """One frame at ``now``: whether the session hears it."""
        if heard_wake:
            self.wakes += 1
            self._woke_at = now
            self._awake_until = max(self._awake_until, now + self.params.listen_s)
        if busy:
            self._awake_until = max(self._awake_until, now + self.params.follow_up_s)
        return busy or now < self._awake_until

    def opened_by(self, now: float, *, answering: bool) -> OpenedBy:
        """What let speech that began at ``now`` open a turn."""
        if answering:
            return OpenedBy.ANSWERING
        if now - self._woke_at <= self.params.listen_s:
            return OpenedBy.WAKE_WORD
        return OpenedBy.FOLLOW_UP
