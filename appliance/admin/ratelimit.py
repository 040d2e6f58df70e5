"""Login attempt limits: at most N failed attempts per key (client address, user name) in a window."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class LoginRateLimiter:
    """Sliding-window count of failed logins per key: the client address and the user name tried.

    A client address over ``max_failures`` in ``window_s`` is refused until the window passes. A user
    name is not locked out (anyone could lock the real technician out by guessing wrong five times):
    past the limit each further attempt waits for a delay that doubles with every failure, 1 s, 2 s,
    4 s, ... up to ``max_delay_s``, so guessing one name from many addresses stays slow while the real
    user gets in after a short wait.
    """

    def __init__(
        self,
        max_failures: int,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
        max_delay_s: float = 60.0,
        growing_prefix: str = "user:",
    ) -> None:
        if max_failures < 1 or window_s <= 0:
            raise ValueError("max_failures must be at least 1 and window_s above 0")
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self.max_delay_s = max_delay_s
        self._growing_prefix = growing_prefix
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after_s(self, keys: list[str]) -> float:
        """Seconds until an attempt for ``keys`` is allowed again; 0 when it is allowed now."""
        now = self._clock()
        with self._lock:
            return self._wait(keys, now)

    def _wait(self, keys: list[str], now: float) -> float:
        wait = 0.0
        for key in keys:
            times = self._prune(key, now)
            if len(times) < self.max_failures:
                continue
            if key.startswith(self._growing_prefix):
                delay = min(2.0 ** (len(times) - self.max_failures), self.max_delay_s)
                wait = max(wait, times[-1] + delay - now)
            else:
                wait = max(wait, times[0] + self.window_s - now)
        return wait

    def take(self, keys: list[str]) -> float:
        """Count an attempt for ``keys`` as failed before its password is checked, or refuse it: 0 when
        the attempt may go ahead (call ``succeeded`` if the password was right), else the seconds to
        wait. Counting first makes N guesses sent at once cost what N sent one after another do: the
        password check is slow, and a limit read before it and counted after lets a burst through."""
        now = self._clock()
        with self._lock:
            wait = self._wait(keys, now)
            if wait > 0:
                return wait
            if len(self._failures) >= self._max_keys:
                self._forget_expired(now)
            for key in keys:
                self._prune(key, now).append(now)
        return 0.0

    def succeeded(self, keys: list[str], *, forget: list[str]) -> None:
        """The attempt counted by ``take`` was right: take its count back from ``keys``, and forget
        every earlier failure of ``forget`` (the user name: the real user is not slowed further)."""
        with self._lock:
            for key in keys:
                times = self._failures.get(key)
                if times:
                    times.pop()  # the newest: this attempt's own (an older one may be another's)
            for key in forget:
                self._failures.pop(key, None)

    def _prune(self, key: str, now: float) -> deque[float]:
        times = self._failures.setdefault(key, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times

    def _forget_expired(self, now: float) -> None:
        for key in [k for k, t in self._failures.items() if not t or t[-1] <= now - self.window_s]:
            del self._failures[key]
        if len(self._failures) >= self._max_keys:  # still full of live keys: drop the oldest ones
            for key in sorted(self._failures, key=lambda k: self._failures[k][-1])[: self._max_keys // 10]:
                del self._failures[key]
