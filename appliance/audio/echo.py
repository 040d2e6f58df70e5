"""Echo cancellation between the microphone and the VAD, fed with what the speaker really played.

Three parts, each on the clock the other two use (``time.monotonic``):

- ``PlaybackTimeline``: every sample written to the speaker, placed at the time the speaker starts on
  it (a device is a queue drained in real time: a write starts where the last one ends, or now after
  an underrun; a flush cuts it at now), kept at 16 kHz.
- ``CaptureClock``: when each microphone sample was heard. Frames arrive in bursts and late by a
  varying amount, never early, so the earliest arrival against the sample count (over the last
  seconds, to follow a drifting device clock) marks the real one.
- ``EchoCancelledSource``: for each microphone frame, the timeline's audio ``audio.echo_delay_ms``
  earlier (the path from a write to the microphone: output buffer, air, input buffer; measured by
  ``appliance calibrate``) is the reference; the canceller runs on its own worker.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import soxr

from appliance.audio.base import SAMPLE_RATE_HZ, AudioSink, AudioSource, HeardFrame, SourceBase, split_frame
from appliance.audio.echo_room import RoomMemory
from engines.aec import BLOCK_SAMPLES, EchoStream, Fit
from engines.audio import power

T = TypeVar("T")
log = logging.getLogger(__name__)

# The reference is taken this much sooner than the calibrated delay: AEC3 can only cancel an echo
# that comes after its reference, and finds the rest of the delay by itself.
LEAD_S = 0.02
# Playback a new stream learns from before its output is trusted: in a reverberant hall AEC3 let the
# first reply of a session cut itself off (bench aec), never a later one.
CONVERGE_S = 2.0
# The room (audio.echo_room_file) is kept after this much playback, then after every
# KEEP_ROOM_EVERY_S more (few writes: a device's flash wears), and at the session's end.
KEEP_ROOM_FIRST_S = 10.0
KEEP_ROOM_EVERY_S = 300.0
# How far the arrivals must move the capture clock's estimate before it follows them (CaptureClock):
# well inside LEAD_S, so an estimate that far off still gives AEC3 its reference before the echo.
STEADY_S = 0.005
# Played audio kept for the canceller: audio.echo_delay_ms is at most 1 s. Every write copies it.
_KEEP_S = 2.0


class Worker(Protocol):
    """The thread that runs the canceller (``appliance.pipeline.workers.EngineWorker``)."""

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...


class PlaybackTimeline:
    """What the speaker played, at 16 kHz, by the monotonic time the speaker started on each sample."""

    def __init__(self, *, keep_s: float = _KEEP_S) -> None:
        self.keep_s = keep_s
        self._start = 0.0  # time of self._audio[0]
        self._audio: np.ndarray = np.zeros(0, dtype=np.float32)
        self._resampler: Any = None
        self._resampler_rate = SAMPLE_RATE_HZ

    @property
    def end(self) -> float:
        """When the speaker runs out of what it was given."""
        return self._start + len(self._audio) / SAMPLE_RATE_HZ

    def write(self, audio: np.ndarray, rate_hz: int, now: float) -> None:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if rate_hz != SAMPLE_RATE_HZ:
            if self._resampler is None or self._resampler_rate != rate_hz:
                self._resampler = soxr.ResampleStream(rate_hz, SAMPLE_RATE_HZ, 1, dtype="float32")
                self._resampler_rate = rate_hz
            audio = self._resampler.resample_chunk(audio)
        if now > self.end:  # the speaker ran dry: this write starts now, after a gap of silence
            gap = round((now - self.end) * SAMPLE_RATE_HZ)
            if gap > self.keep_s * SAMPLE_RATE_HZ:
                self._start, self._audio = now, np.zeros(0, dtype=np.float32)
            else:
                self._audio = np.concatenate([self._audio, np.zeros(gap, dtype=np.float32)])
        self._audio = np.concatenate([self._audio, audio])
        self._forget(now)

    def flush(self, now: float) -> None:
        """The device dropped what it had not played yet."""
        keep = max(0, round((now - self._start) * SAMPLE_RATE_HZ))
        self._audio = self._audio[:keep]
        self._resampler = None

    def take(self, start: float, samples: int) -> np.ndarray:
        """``samples`` of what was playing from ``start`` on; silence where nothing was."""
        out = np.zeros(samples, dtype=np.float32)
        offset = round((start - self._start) * SAMPLE_RATE_HZ)
        first, last = max(0, offset), min(len(self._audio), offset + samples)
        if last > first:
            out[first - offset : last - offset] = self._audio[first:last]
        return out

    def _forget(self, now: float) -> None:
        drop = round((now - self.keep_s - self._start) * SAMPLE_RATE_HZ)
        if drop > 0:
            self._audio = self._audio[drop:]
            self._start += drop / SAMPLE_RATE_HZ


class TappedSink:
    """A sink that records on a timeline what it is given, then passes it on."""

    def __init__(self, sink: AudioSink, timeline: PlaybackTimeline) -> None:
        self.inner = sink
        self.timeline = timeline
        self.name = sink.name
        self.sample_rate_hz = sink.sample_rate_hz
        self.realtime = sink.realtime

    async def write(self, audio: np.ndarray) -> None:
        self.timeline.write(audio, self.sample_rate_hz, time.monotonic())  # before the device takes it
        await self.inner.write(audio)

    async def flush(self) -> None:
        self.timeline.flush(time.monotonic())
        await self.inner.flush()

    async def close(self) -> None:
        await self.inner.close()


class CaptureClock:
    """The time each captured sample was heard, from frame arrival times and the sample count.

    Once ``hold()`` is called (the canceller has begun to learn the room from a reference cut by it),
    the estimate holds still until the evidence moves it by more than ``STEADY_S``: a reference
    that slides by a sample or two (each earlier arrival, each early one leaving the window) puts
    the linear canceller's filter out of step with the room above 2 kHz, where it then cancels
    next to nothing until it has learnt again. Being a few milliseconds off costs the cancellers
    nothing: they learn the path as it is."""

    def __init__(self, *, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.holding = False
        self._samples = 0
        self._offsets: deque[tuple[int, float]] = deque()  # increasing offsets: a sliding minimum
        self._held: float | None = None  # the offset in use

    def frame_end(self, arrival: float, samples: int) -> float:
        """When the last sample of a frame of ``samples``, which arrived at ``arrival``, was heard."""
        self._samples += samples
        offset = arrival - self._samples / SAMPLE_RATE_HZ
        while self._offsets and self._offsets[-1][1] >= offset:
            self._offsets.pop()
        self._offsets.append((self._samples, offset))
        horizon = self._samples - self.window_s * SAMPLE_RATE_HZ
        while self._offsets[0][0] < horizon:
            self._offsets.popleft()
        earliest = self._offsets[0][1]
        if self._held is None or not self.holding or abs(earliest - self._held) > STEADY_S:
            self._held = earliest
        return self.time_of(self._samples)

    def hold(self) -> None:
        self.holding = True

    def time_of(self, sample: int) -> float:
        """When sample number ``sample`` (counted from 0) was heard, by the estimate of now."""
        if self._held is None:
            raise RuntimeError("no frame has arrived yet")
        return self._held + sample / SAMPLE_RATE_HZ


class EchoCancelledSource(SourceBase):
    """The microphone's frames with the speaker's echo taken out (``BLOCK_SAMPLES`` later): AEC3's
    for the VAD, the linear canceller's for what is transcribed (``engines.aec.Cancelled``)."""

    def __init__(
        self,
        source: AudioSource,
        *,
        stream: EchoStream,
        timeline: PlaybackTimeline,
        worker: Worker,
        echo_delay_s: float,
        memory: RoomMemory | None = None,
    ) -> None:
        """``memory``: where the room the stream learns is kept for the next start (its stream
        should start from what it recalls)."""
        self.inner = source
        self.stream = stream
        self.timeline = timeline
        self.worker = worker
        self.reference_delay_s = max(0.0, echo_delay_s - LEAD_S)
        self.clock = CaptureClock()
        self.name = f"{source.name}+aec"
        self.realtime = source.realtime
        self.ends_with_listener = source.ends_with_listener
        self.memory = memory
        self._fit_told: Fit | None = None
        self._adopted = False  # the stream went on from a filter placed or solved
        self._keep_at_s = KEEP_ROOM_FIRST_S  # the stream's reference_heard_s() when the room is next kept

    async def frames(self) -> AsyncIterator[HeardFrame]:
        async for heard in self.inner.frames():
            frame = split_frame(heard)[1]
            end = self.clock.frame_end(time.monotonic(), len(frame))
            start = end - len(frame) / SAMPLE_RATE_HZ
            reference = self.timeline.take(start - self.reference_delay_s, len(frame))
            if not self.clock.holding and reference.any():
                self.clock.hold()  # the canceller learns the room from here on
            cancelled = await self.worker.call(self.stream.process, frame, reference)
            fit, new_filter = self.stream.fit, False
            if fit is not None and fit is not self._fit_told:
                self._tell_fit(fit)
                # Only the first room solved and used (the ear judges it on its own frames); a kept
                # room placed is judged as before, with the frames before it.
                new_filter = fit.used and not fit.kept and not self._adopted
                self._adopted = self._adopted or new_filter
            if self.memory is not None and self.stream.reference_heard_s() >= self._keep_at_s:
                await self.keep_room()
            yield HeardFrame(
                for_vad=cancelled.suppressed,
                for_asr=cancelled.linear,
                echo_power=power(cancelled.echo),
                new_filter=new_filter,
            )

    @property
    def heard_late_s(self) -> float:
        return self.inner.heard_late_s + BLOCK_SAMPLES / SAMPLE_RATE_HZ

    @property
    def echo_converged(self) -> bool:
        """Whether the canceller has heard enough of the speaker to be trusted (the session ignores
        the microphone while a reply plays until then)."""
        return self.stream.reference_heard_s() >= CONVERGE_S

    def _tell_fit(self, fit: Fit) -> None:
        self._fit_told = fit
        if not fit.kept:
            log.info(
                "%s: the room solved from the first %.1f s of the reply leaves the echo %.0f dB down%s",
                self.name,
                self.stream.reference_heard_s(),
                fit.cancelled_db,
                "" if fit.used else ": too little, not used",
            )
        elif fit.used:
            log.info(
                "%s: the kept room fits %.2f ms %s and %+.1f dB louder: echo %.0f dB down from the first reply",
                self.name,
                abs(fit.lag) / SAMPLE_RATE_HZ * 1000.0,
                "later" if fit.lag >= 0 else "sooner",
                20.0 * math.log10(fit.gain),
                fit.cancelled_db,
            )
        else:
            log.info(
                "%s: the kept room does not fit this one (echo only %.0f dB down; the speaker moved?): "
                "learning it anew",
                self.name,
                fit.cancelled_db,
            )

    async def keep_room(self) -> None:
        """Keep what the stream has learnt of the room: its filter copied on the canceller's worker
        (nothing changes it meanwhile), the file written on a thread of its own (a slow disk must not
        hold the microphone's frames)."""
        memory = self.memory
        if memory is None:
            return
        self._keep_at_s = self.stream.reference_heard_s() + KEEP_ROOM_EVERY_S
        room = await self.worker.call(self.stream.room)
        await asyncio.to_thread(memory.keep, room)

    async def close(self) -> None:
        try:
            await self.keep_room()
        except RuntimeError as err:  # the canceller's worker already shut down with the engines
            log.warning(
                "%s: the room was not kept at the end (%s); it was kept while it played", self.name, err
            )
        finally:
            await self.inner.close()


def cancel_echo(
    source: AudioSource,
    sink: AudioSink,
    *,
    stream: EchoStream,
    worker: Worker,
    echo_delay_ms: float,
    memory: RoomMemory | None = None,
) -> tuple[EchoCancelledSource, TappedSink]:
    """A session's source and sink with the sink's audio cancelled from the source's."""
    timeline = PlaybackTimeline()
    cancelled = EchoCancelledSource(
        source,
        stream=stream,
        timeline=timeline,
        worker=worker,
        echo_delay_s=echo_delay_ms / 1000.0,
        memory=memory,
    )
    return cancelled, TappedSink(sink, timeline)
