"""Playback: feeds a sink one frame at a time so that a barge-in stops it within one frame, and
knows how much has been heard. A pause (someone speaking over the reply) silences it just as fast
and keeps what was not heard, so that a resume goes on from the sample where it stopped."""

from __future__ import annotations

import asyncio
import time
from collections import deque

import numpy as np

from appliance.audio.base import AudioSink
from engines.audio import FRAME_S


class Player:
    """Writes reply audio to ``sink``.

    For a real-time sink it stays at most ``lead_s`` ahead of the clock: what is heard is then the
    elapsed time since playback started (minus underruns), and a flush loses at most ``lead_s``.
    For a file sink audio is written at once and counts as heard when written.
    """

    def __init__(self, sink: AudioSink, *, lead_s: float = 0.064) -> None:
        self.sink = sink
        self.lead_s = lead_s
        self.frame_samples = max(1, round(sink.sample_rate_hz * FRAME_S))
        self.written_samples = 0
        self.started_at: float | None = None
        self._clock_base = 0.0  # monotonic time at which sample 0 was (virtually) heard
        self._stopped = False
        # Frames written and perhaps not yet heard (the sink holds at most lead_s), by first sample.
        self._recent: deque[tuple[int, np.ndarray]] = deque(maxlen=max(4, round(lead_s / FRAME_S) + 3))
        self._paused_heard: int | None = None  # samples heard when the pause began; None: not paused
        self._paused_at = 0.0
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._replay: list[np.ndarray] = []  # what the pause took back from the sink, written first
        self.pauses = 0
        self.paused_s = 0.0

    @property
    def rate(self) -> int:
        return self.sink.sample_rate_hz

    @property
    def played_samples(self) -> int:
        if self.started_at is None:
            return 0
        if self._paused_heard is not None:
            return self._paused_heard
        if not self.sink.realtime:
            return self.written_samples
        elapsed = (time.monotonic() - self._clock_base) * self.rate
        return int(min(self.written_samples, max(0.0, elapsed)))

    @property
    def playing(self) -> bool:
        """Audio written and not yet heard (a real-time sink), i.e. the appliance is speaking."""
        if self.started_at is None or self._stopped or self.paused:
            return False
        if not self.sink.realtime:
            return False
        return time.monotonic() < self._clock_base + self.written_samples / self.rate

    @property
    def paused(self) -> bool:
        return self._paused_heard is not None

    async def play(self, audio: np.ndarray, clause_index: int) -> None:
        data = np.asarray(audio, dtype=np.float32).reshape(-1)
        for offset in range(0, len(data), self.frame_samples):
            if not await self._go_on():
                return
            await self._write(data[offset : offset + self.frame_samples])

    async def _go_on(self) -> bool:
        """Wait out a pause and write back what it took from the sink; False once stopped."""
        while self.paused and not self._stopped:
            await self._resumed.wait()
        while self._replay and not self._stopped:
            await self._write(self._replay.pop(0))
        return not self._stopped

    async def _write(self, frame: np.ndarray) -> None:
        while True:
            now = time.monotonic()
            if self.started_at is None:
                self.started_at = now
                self._clock_base = now
            elif self.sink.realtime:
                end_of_written = self._clock_base + self.written_samples / self.rate
                if now > end_of_written:
                    self._clock_base += now - end_of_written  # underrun: the clock restarts now
                elif end_of_written - now > self.lead_s:
                    await asyncio.sleep(end_of_written - now - self.lead_s)
                    if self._stopped:
                        return
                    if self.paused:  # paused while waiting: this frame waits for the resume
                        if not await self._go_on():
                            return
                        continue
            break
        self._recent.append((self.written_samples, frame))
        await self.sink.write(frame)
        self.written_samples += len(frame)

    async def drain(self) -> None:
        """Wait until everything written has been heard (a pause waits for its resume)."""
        while self.sink.realtime and self.started_at is not None and await self._go_on():
            remaining_s = self._clock_base + self.written_samples / self.rate - time.monotonic()
            if remaining_s <= 0:
                return
            pauses = self.pauses
            await asyncio.sleep(remaining_s)
            if self.pauses == pauses:
                return

    async def pause(self) -> bool:
        """Someone speaks over the reply: silence at once (drop what the sink holds) and keep the rest
        for ``resume``. False when there is nothing to pause (not started, stopped, or a file)."""
        if self.started_at is None or self._stopped or self.paused or not self.sink.realtime:
            return False
        self._paused_heard = self.played_samples
        self._paused_at = time.monotonic()
        self._resumed.clear()
        self.pauses += 1
        await self.sink.flush()
        return True

    async def resume(self) -> None:
        """Go on from the first sample not heard before the pause."""
        heard = self._paused_heard
        if heard is None:
            return
        self._replay = [f[max(0, heard - first) :] for first, f in self._recent if first + len(f) > heard]
        self._recent.clear()
        self.written_samples = heard
        now = time.monotonic()
        self._clock_base = now - heard / self.rate
        self.paused_s += now - self._paused_at
        self._paused_heard = None
        self._resumed.set()

    async def stop(self) -> None:
        """Barge-in: drop what is queued at the sink; what was heard so far stays counted."""
        if self._stopped:
            return
        heard = self.played_samples
        if self.paused:
            self.paused_s += time.monotonic() - self._paused_at
        self._stopped = True
        self._paused_heard = None
        self._resumed.set()
        self.written_samples = heard
        await self.sink.flush()
