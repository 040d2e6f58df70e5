"""Logging that a flood cannot turn into a disk problem: one line per kind of event per interval.

A burst of bad packets from the network would otherwise write a line each (thousands a second, on a
Jetson's eMMC). The first event of a kind is logged at once; the rest within ``interval_s`` are
counted, and the next line of that kind says how many were held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class ThrottledLog:
    def __init__(
        self, logger: logging.Logger, *, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, kind: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless a line of ``kind`` went out less than ``interval_s`` ago;
        True when it was written."""
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_s:
                self._held[kind] = self._held.get(kind, 0) + 1
                return False
            self._last[kind] = now
            held = self._held.pop(kind, 0)
        if held:
            message += f" (and {held} more like it in the last {self.interval_s:.0f} s, not logged)"
        self.logger.log(level, message, *args)
        return True

    def info(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.INFO, kind, message, *args)
