"""The echo delay of a speaker and microphone: play chirps, find them in the microphone.

The chirps go through the same ``Player`` and ``TappedSink`` as replies, and the microphone's frames
are stamped by the same ``CaptureClock`` as the echo canceller's, so the delay found is the one the
canceller needs: from a sample's place on the playback timeline to the moment the microphone hears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import numpy as np

from appliance.audio.base import SAMPLE_RATE_HZ, AudioSink, AudioSource, split_frame
from appliance.audio.echo import CaptureClock, PlaybackTimeline, TappedSink
from appliance.pipeline.playback import Player
from engines.audio import resample

CHIRP_S = 0.5
GAP_S = 0.7
MAX_DELAY_S = 1.0
MIN_SNR = 8.0  # correlation peak over its median: below it the chirp was not heard
MAX_SPREAD_MS = 10.0
AGREE_MS = 2.0  # chirps that agree this closely measured the device, not a late write on a busy machine
AGREEING = 2  # ... this many of them: the lowest such pair is the device's delay
MAX_BATCHES = 5  # of ``repeats`` chirps each, before "the machine is too busy"


class CalibrationError(RuntimeError):
    """The chirps could not be measured; the message names the fix."""


@dataclass(frozen=True)
class Calibration:
    delay_ms: float  # the median over the chirps
    delays_ms: list[float]
    snr: float  # the weakest chirp's correlation peak over its median
    spread_ms: float

    @property
    def steady(self) -> bool:
        return self.spread_ms <= MAX_SPREAD_MS


def chirp(seconds: float = CHIRP_S, *, low_hz: float = 300.0, high_hz: float = 4000.0) -> np.ndarray:
    """An exponential sweep at 16 kHz, faded in and out over 10 ms: sharp to find by correlation,
    inside what small speakers and telephone-band microphones pass."""
    t = np.arange(round(seconds * SAMPLE_RATE_HZ)) / SAMPLE_RATE_HZ
    rate = np.log(high_hz / low_hz) / seconds
    sweep = np.sin(2 * np.pi * low_hz * (np.exp(rate * t) - 1.0) / rate)
    fade = round(0.01 * SAMPLE_RATE_HZ)
    envelope = np.ones_like(sweep)
    envelope[:fade] = np.linspace(0.0, 1.0, fade)
    envelope[-fade:] = np.linspace(1.0, 0.0, fade)
    return (0.5 * sweep * envelope).astype(np.float32)


def find_delays(captured: np.ndarray, reference: np.ndarray, starts: list[int]) -> tuple[list[float], float]:
    """Each chirp's delay in ms (its reference starts at ``starts``, in samples of both signals, which
    share one clock) and the weakest correlation peak over its median."""
    length = round(CHIRP_S * SAMPLE_RATE_HZ)
    max_lag = round(MAX_DELAY_S * SAMPLE_RATE_HZ)
    delays, snrs = [], []
    for start in starts:
        probe = reference[start : start + length]
        heard = captured[start : start + length + max_lag]
        if len(heard) < length + max_lag:
            raise CalibrationError(
                "the microphone stopped before the last chirp could come back (fix: retry)"
            )
        size = 1 << int(np.ceil(np.log2(len(heard) + length)))
        spectrum = np.fft.rfft(heard, size) * np.conj(np.fft.rfft(probe, size))
        correlation = np.abs(np.fft.irfft(spectrum, size)[: max_lag + 1])
        lag = int(np.argmax(correlation))
        snrs.append(float(correlation[lag] / max(float(np.median(correlation)), 1e-12)))
        delays.append(1000.0 * lag / SAMPLE_RATE_HZ)
    return delays, min(snrs)


async def measure_echo_delay(
    source: AudioSource,
    sink: AudioSink,
    *,
    repeats: int = 3,
    first_frame_timeout_s: float = 3.0,
    max_batches: int = MAX_BATCHES,
) -> Calibration:
    """Play chirps on ``sink`` while listening on ``source``, ``repeats`` at a time, until ``AGREEING``
    of them agree within ``AGREE_MS`` (a busy machine delays a write now and then: such a chirp is
    later than the device, never the answer) or ``max_batches`` have been played. Raises CalibrationError when
    the microphone gives nothing, does not hear them, or they never agree."""
    timeline = PlaybackTimeline(keep_s=120.0)  # the whole run is read back after each batch
    player = Player(TappedSink(sink, timeline))
    clock = CaptureClock()
    frames: list[np.ndarray] = []
    got_frame = asyncio.Event()

    async def listen() -> None:
        async for heard in source.frames():
            frame = split_frame(heard)[1]
            clock.frame_end(time.monotonic(), len(frame))
            frames.append(np.asarray(frame, dtype=np.float32))
            got_frame.set()

    listener = asyncio.create_task(listen(), name="calibrate-listen")
    delays: list[float] = []
    try:
        await _wait_for_microphone(listener, got_frame, first_frame_timeout_s)
        sweep = chirp()
        gap = np.zeros(round(GAP_S * SAMPLE_RATE_HZ), dtype=np.float32)
        lead = np.zeros(SAMPLE_RATE_HZ // 2, dtype=np.float32)
        tail = np.zeros(round((MAX_DELAY_S + 0.5) * SAMPLE_RATE_HZ), dtype=np.float32)
        for batch in range(max_batches):
            signal = np.concatenate([lead, *([sweep, gap] * repeats), tail])
            await player.play(resample(signal, SAMPLE_RATE_HZ, sink.sample_rate_hz), batch)
            await player.drain()
            await asyncio.sleep(0.2)
            if listener.done():
                listener.result()  # the microphone failed: its error, not a measurement
            delays, snr = _measured(frames, timeline, clock, repeats * (batch + 1))
            agreeing = _agreeing(delays, AGREEING)
            if agreeing:
                return Calibration(
                    delay_ms=round(float(np.median(agreeing)), 1),
                    delays_ms=[round(d, 1) for d in delays],
                    snr=round(snr, 1),
                    spread_ms=round(max(agreeing) - min(agreeing), 1),
                )
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    heard = ", ".join(f"{d:.1f}" for d in delays)
    raise CalibrationError(
        f"the machine is too busy to measure: no {AGREEING} of {len(delays)} chirps agreed within "
        f"{AGREE_MS:g} ms ({heard} ms) (fix: try again when the machine is quieter: stop the daemon "
        "and any other heavy program)"
    )


def _measured(
    frames: list[np.ndarray], timeline: PlaybackTimeline, clock: CaptureClock, expected: int
) -> tuple[list[float], float]:
    """The delay of every chirp played so far, and the weakest one's correlation over its median."""
    captured = np.concatenate(frames)
    # What was playing, sample for sample with the microphone's, by the capture clock's best estimate
    # (the earliest arrival of the whole run) of when its first sample was heard.
    reference = timeline.take(clock.time_of(0), len(captured))
    chirp_starts = _chirp_starts(reference)
    if len(chirp_starts) != expected:
        raise CalibrationError(
            f"found {len(chirp_starts)} of {expected} chirps on the playback timeline "
            "(fix: retry; the speaker's writes were late)"
        )
    delays, snr = find_delays(captured, reference, chirp_starts)
    if snr < MIN_SNR:
        raise CalibrationError(
            f"the microphone did not hear the chirps (correlation {snr:.1f} over its median, needs "
            f"{MIN_SNR:.0f}) (fix: turn the speaker up, check audio.input_device / audio.output_device "
            "are the microphone and speaker of this kiosk, keep the room quiet)"
        )
    return delays, snr


def _agreeing(delays: list[float], count: int) -> list[float]:
    """The lowest ``count`` delays that lie within ``AGREE_MS`` of each other; else none. Lowest: a
    late write or read on a busy machine only ever adds delay (a loopback measured 49, 55, 55 and then
    114 ms three times, its buffer one period fuller after a late write), never takes any away."""
    ordered = sorted(delays)
    windows = [ordered[i : i + count] for i in range(len(ordered) - count + 1)]
    return next((w for w in windows if w[-1] - w[0] <= AGREE_MS), [])


async def _wait_for_microphone(
    listener: asyncio.Task[None], got_frame: asyncio.Event, timeout_s: float
) -> None:
    waiter = asyncio.create_task(got_frame.wait())
    done, _ = await asyncio.wait({listener, waiter}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if listener in done:
        listener.result()  # raises the microphone's error
        raise CalibrationError(
            "the microphone ended before it gave any audio (fix: check audio.input_device)"
        )
    if not got_frame.is_set():
        raise CalibrationError(
            f"the microphone gave no audio in {timeout_s:.0f} s (fix: check audio.input_device and that "
            "no other program holds the device)"
        )


def _chirp_starts(reference: np.ndarray) -> list[int]:
    """Where each chirp begins on the timeline: loud runs at least a gap apart."""
    loud = np.flatnonzero(np.abs(reference) > 0.05)
    if len(loud) == 0:
        return []
    firsts = [int(loud[0])] + [int(i) for i in loud[1:][np.diff(loud) > GAP_S * SAMPLE_RATE_HZ / 2]]
    fade = round(0.01 * SAMPLE_RATE_HZ)  # the fade-in is quiet
    return [max(0, first - fade) for first in firsts]
