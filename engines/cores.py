"""The other engines' work now running, so that the LLM can let it finish before its next step.

On two cores, llama.cpp's threads wait for each other at every step of a token: when Whisper, Smart
Turn or Piper takes one of the cores meanwhile, the step stalls on the thread that lost its core, and
both run slower than one after the other (in a turn on 2 cores: 7 prompt tokens took 235 ms beside Smart
Turn and ~150 ms alone; Piper's first chunk 122 ms beside the reply's next tokens and ~70 ms alone). The
engine workers count their running jobs here; the LLM waits, a bounded time, for none to be running
before each decode. A job about to start can be announced (``expect``): a clause handed to Piper is
on its worker a few milliseconds later, and a step begun in between would run beside all of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A clause reaches Piper's worker in about a millisecond (the event loop's next turns); never longer
# than this is waited for.
EXPECT_S = 0.03


class CoreShare:
    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._running = 0
        self._expected_until = 0.0  # time.monotonic(): a job announced, not started yet
        self.waits = 0  # decodes that waited for another engine, and how long in all
        self.waited_s = 0.0

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around one job of another engine."""
        with self._idle:
            self._running += 1
            self._expected_until = 0.0  # what was announced has begun
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if self._running == 0:
                    self._idle.notify_all()

    def expect(self, within_s: float = EXPECT_S) -> None:
        """A job of another engine will start within ``within_s``: until it does (or that time has
        passed), the cores count as busy."""
        with self._idle:
            self._expected_until = max(self._expected_until, time.monotonic() + within_s)

    def wait_idle(self, timeout_s: float) -> None:
        """Return once no other engine's job is running or announced, or after ``timeout_s``."""
        with self._idle:
            if self._idle_now():
                return
            started = time.monotonic()
            deadline = started + timeout_s
            while not self._idle_now() and (left := deadline - time.monotonic()) > 0:
                # an announcement ends by itself: wake when it does
                expected = self._expected_until - time.monotonic()
                self._idle.wait(min(left, expected) if expected > 0 else left)
            self.waits += 1
            self.waited_s += time.monotonic() - started

    def _idle_now(self) -> bool:
        return self._running == 0 and time.monotonic() >= self._expected_until
