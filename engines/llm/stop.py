"""Stop strings over streamed text: hold back what could be the start of a stop string."""

from __future__ import annotations

from collections.abc import Sequence


class StopStringFilter:
    """Feed streamed text with ``push``; it returns the text safe to emit and sets ``stopped``
    once a stop string appears (the stop string and everything after it are dropped)."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = tuple(s for s in stop if s)
        self.stopped = False
        self._pending = ""

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        self._pending += text
        cut = min((i for i in (self._pending.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            out, self._pending = self._pending[:cut], ""
            return out
        keep = self._partial_match_length()
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(out) :]
        return out

    def flush(self) -> str:
        """The held-back text at the end of the generation (it never completed a stop string)."""
        out, self._pending = ("" if self.stopped else self._pending), ""
        return out

    def _partial_match_length(self) -> int:
        """Longest suffix of the pending text that is a proper prefix of some stop string."""
        longest = 0
        for stop in self.stop:
            for length in range(min(len(stop) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(stop[:length]):
                    longest = length
                    break
        return longest
