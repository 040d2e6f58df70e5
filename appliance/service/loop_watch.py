"""Notices the daemon's event loop being held, and says where it was held.

Every call's audio is sent from the event loop (20 ms RTP packets), so a loop held by a synchronous
call made on it, or by a native library keeping the GIL, is a silence the caller hears. The loop
beats a heartbeat; a thread of its own watches it and, when a beat is late, notes the loop's stack
at that moment. Once the loop beats again it measures the gap itself: a stall longer than ``stall_s``
is logged (throttled) with how long it lasted and that place, and counted for ``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from appliance.ratelog import ThrottledLog

log = logging.getLogger(__name__)
_throttled = ThrottledLog(log, interval_s=30.0)

# A phone's jitter buffer covers roughly 60-200 ms of late packets: past this the caller hears a gap.
STALL_S = 0.25
BEAT_S = 0.05
_PROJECT = Path(__file__).resolve().parents[2]
NOT_SEEN = "not seen (the watching thread did not run: did a native call hold the interpreter?)"


@dataclass(frozen=True)
class Stall:
    seconds: float
    where: str  # the loop's innermost frames when it was seen held, innermost last


@dataclass(frozen=True)
class StallFigures:
    stalls: int
    held_s: float  # all stalls together
    longest_s: float


class LoopWatch:
    def __init__(self, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self.stalls: deque[Stall] = deque(maxlen=100)  # the most recent
        self._count = 0
        self._held_s = 0.0
        self._longest_s = 0.0
        self._beat = time.monotonic()
        self._seen: tuple[float, str] = (0.0, "")  # (the last beat before a stall, where the loop was)
        self._loop_thread: int | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._beater: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Watch the running loop (call from it)."""
        self._loop_thread = threading.get_ident()
        self._beater = asyncio.get_running_loop().create_task(self._beats(), name="loop-watch")
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopped.set()
        if self._beater is not None:
            self._beater.cancel()
            await asyncio.gather(self._beater, return_exceptions=True)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 1.0)

    def figures(self) -> StallFigures:
        return StallFigures(self._count, self._held_s, self._longest_s)

    async def _beats(self) -> None:
        # The loop measures its own stalls (the watching thread may itself wait for the interpreter
        # while a native call holds it); the thread only says where the loop was.
        last = self._beat = time.monotonic()
        while True:
            await asyncio.sleep(BEAT_S)
            now = time.monotonic()
            held_s = now - last - BEAT_S
            if held_s > self.stall_s:
                seen_beat, where = self._seen
                self._record(Stall(held_s, where if seen_beat == last else NOT_SEEN))
            self._beat = last = now

    def _watch(self) -> None:
        while not self._stopped.wait(BEAT_S / 2):
            beat = self._beat
            if time.monotonic() - beat > BEAT_S + self.stall_s / 2 and self._seen[0] != beat:
                self._seen = (beat, self._where())

    def _where(self) -> str:
        frame = sys._current_frames().get(self._loop_thread or -1)
        if frame is None:
            return "(unknown)"
        frames = traceback.extract_stack(frame)[-4:]
        return " > ".join(f"{_short(f.filename)}:{f.lineno} {f.name}" for f in frames)

    def _record(self, stall: Stall) -> None:
        self._count += 1
        self._held_s += stall.seconds
        self._longest_s = max(self._longest_s, stall.seconds)
        self.stalls.append(stall)
        _throttled.log(
            logging.WARNING,
            "stall",
            "the event loop was held %.0f ms (calls' audio and the admin page waited), at: %s",
            stall.seconds * 1000.0,
            stall.where,
        )


def _short(filename: str) -> str:
    path = Path(filename)
    if path.is_relative_to(_PROJECT):
        return str(path.relative_to(_PROJECT))
    parts = path.parts
    for index in range(len(parts) - 1, 0, -1):  # the innermost library folder: site-packages, python3.11
        if parts[index] in ("site-packages", "dist-packages") or parts[index].startswith("python3."):
            return "/".join(parts[index + 1 :])
    return filename


_current: LoopWatch | None = None


def watch_this_loop(stall_s: float = STALL_S) -> LoopWatch:
    """Start the process's loop watch on the running loop (the daemon has one loop)."""
    global _current
    _current = LoopWatch(stall_s)
    _current.start()
    return _current


async def stop_watching(watch: LoopWatch) -> None:
    global _current
    await watch.stop()
    if _current is watch:
        _current = None


def current_figures() -> StallFigures | None:
    """The process's stall figures, None when no loop is watched."""
    return None if _current is None else _current.figures()
