"""The source and sink interfaces, and frame helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engines.audio import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE_HZ

__all__ = ["FRAME_S", "FRAME_SAMPLES", "SAMPLE_RATE_HZ", "AudioSink", "AudioSource", "HeardFrame"]


@dataclass(frozen=True)
class HeardFrame:
    """One frame in two versions, for a source that cleans its audio two ways (the echo-cancelled
    microphone): ``for_vad`` decides whether someone speaks, ``for_asr`` is what is transcribed.
    ``echo_power``: the mean power of the echo the linear canceller took out of ``for_asr`` (None
    where no canceller runs); ``new_filter``: the linear canceller went on from another filter in
    this frame (``engines.aec.Fit``)."""

    for_vad: np.ndarray
    for_asr: np.ndarray
    echo_power: float | None = None
    new_filter: bool = False


def split_frame(frame: np.ndarray | HeardFrame) -> tuple[np.ndarray, np.ndarray]:
    """(what the VAD judges, what is transcribed) of a source's frame."""
    if isinstance(frame, HeardFrame):
        return frame.for_vad, frame.for_asr
    return frame, frame


class AudioSource(Protocol):
    """Yields float32 mono frames of FRAME_SAMPLES at 16 kHz, in order, until the input ends (or
    ``HeardFrame`` pairs of them, where an echo canceller cleans the audio two ways).

    What the source is, for the session that listens to it:

    - ``realtime`` is False for a source that runs faster than a clock (a file fed with ``--fast``):
      the session then finishes each turn before taking the next frame;
    - ``ends_with_listener``: call audio, whose end means the caller hung up: nobody is left to hear
      a reply, so the session cuts the turn in progress at once;
    - ``echo_converged`` is False while an echo canceller in front of it has not yet learnt the room:
      the session then ignores the microphone while a reply plays;
    - ``heard_late_s``: how long after it was heard the VAD's version of a frame arrives (what a
      canceller or suppressor in front of it holds back): the turn's trace dates speech that early.

    ``SourceBase`` gives a plain source's answers (a microphone or a file).
    """

    name: str
    realtime: bool
    ends_with_listener: bool

    @property
    def echo_converged(self) -> bool: ...

    @property
    def heard_late_s(self) -> float: ...

    def frames(self) -> AsyncIterator[np.ndarray | HeardFrame]: ...

    async def close(self) -> None: ...


class SourceBase:
    """A plain source: paced by a clock unless it says otherwise, its end only the end of its input,
    no echo canceller in front of it."""

    realtime: bool = True
    ends_with_listener: bool = False

    @property
    def echo_converged(self) -> bool:
        return True

    @property
    def heard_late_s(self) -> float:
        return 0.0


class AudioSink(Protocol):
    """Takes float32 mono audio at ``sample_rate_hz``.

    ``realtime`` says whether audio written is heard at the pace of a clock (a speaker): the player
    then paces its writes, so that a barge-in can flush it within one frame. A file sink is not.
    """

    name: str
    sample_rate_hz: int
    realtime: bool

    async def write(self, audio: np.ndarray) -> None: ...

    async def flush(self) -> None:
        """Drop audio written but not yet heard."""
        ...

    async def close(self) -> None: ...


class Reframer:
    """Cuts a stream of arbitrary-length chunks into frames of exactly ``frame_samples``."""

    def __init__(self, frame_samples: int = FRAME_SAMPLES) -> None:
        self.frame_samples = frame_samples
        self._pending: np.ndarray = np.zeros(0, dtype=np.float32)

    def push(self, chunk: np.ndarray) -> list[np.ndarray]:
        data = np.concatenate([self._pending, np.asarray(chunk, dtype=np.float32).reshape(-1)])
        count = len(data) // self.frame_samples
        frames = [data[i * self.frame_samples : (i + 1) * self.frame_samples] for i in range(count)]
        self._pending = data[count * self.frame_samples :].copy()
        return frames


def int16_to_float32(data: np.ndarray) -> np.ndarray:
    return (np.asarray(data, dtype=np.int16).astype(np.float32) / 32768.0).reshape(-1)


def float32_to_int16(data: np.ndarray) -> np.ndarray:
    clipped = np.clip(np.asarray(data, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return (clipped * 32767.0).astype(np.int16)
