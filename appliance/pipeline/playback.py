"""Playback: feeds a sink one frame at a time so that a barge-in stops it within one frame, and
knows how much has been heard."""

from __future__ import annotations

import asyncio
import time

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

    @property
    def rate(self) -> int:
        return self.sink.sample_rate_hz

    @property
    def played_samples(self) -> int:
        if self.started_at is None:
            return 0
        if not self.sink.realtime:
            return self.written_samples
        elapsed = (time.monotonic() - self._clock_base) * self.rate
        return int(min(self.written_samples, max(0.0, elapsed)))

    @property
    def playing(self) -> bool:
        """Audio written and not yet heard (a real-time sink), i.e. the appliance is speaking."""
        if self.started_at is None or self._stopped:
            return False
        if not self.sink.realtime:
            return False
        return time.monotonic() < self._clock_base + self.written_samples / self.rate

    async def play(self, audio: np.ndarray, clause_index: int) -> None:
        data = np.asarray(audio, dtype=np.float32).reshape(-1)
        for offset in range(0, len(data), self.frame_samples):
            if self._stopped:
                return
            frame = data[offset : offset + self.frame_samples]
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
            await self.sink.write(frame)
            self.written_samples += len(frame)

    async def drain(self) -> None:
        """Wait until everything written has been heard."""
        if self.sink.realtime and self.started_at is not None:
            remaining_s = self._clock_base + self.written_samples / self.rate - time.monotonic()
            if remaining_s > 0:
                await asyncio.sleep(remaining_s)

    async def stop(self) -> None:
        """Barge-in: drop what is queued at the sink; what was heard so far stays counted."""
        if self._stopped:
            return
        heard = self.played_samples
        self._stopped = True
        self.written_samples = heard
        await self.sink.flush()
