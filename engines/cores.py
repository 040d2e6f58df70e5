"""The other engines' work now running, so that the LLM can let it finish before its next step.

On two cores, llama.cpp's threads wait for each other at every step of a token: when Whisper, Smart
Turn or Piper takes one of the cores meanwhile, the step stalls on the thread that lost its core, and
both run slower than one after the other (in a turn on 2 cores: 7 prompt tokens took 235 ms beside Smart
Turn and ~150 ms alone; Piper's first chunk 122 ms beside the reply's next tokens and ~70 ms alone). The
engine workers count their running jobs here; the LLM waits, a bounded time, for none to be running
before each decode.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class CoreShare:
    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._running = 0
        self.waits = 0  # decodes that waited for another engine, and how long in all
        self.waited_s = 0.0

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around one job of another engine."""
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if self._running == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> None:
        """Return once no other engine's job is running, or after ``timeout_s``."""
        with self._idle:
            if self._running == 0:
                return
            started = time.monotonic()
            self._idle.wait_for(lambda: self._running == 0, timeout=timeout_s)
            self.waits += 1
            self.waited_s += time.monotonic() - started
