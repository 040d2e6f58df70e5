"""File and memory sources and sinks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from appliance.audio.base import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE_HZ, SourceBase


class ArraySource(SourceBase):
    """16 kHz audio held in memory, fed frame by frame.

    ``realtime=True`` delivers each frame when a microphone would (at the end of its 32 ms);
    otherwise frames come as fast as they are taken.
    """

    def __init__(self, audio_16k: np.ndarray, *, realtime: bool, name: str = "array") -> None:
        data: np.ndarray = np.asarray(audio_16k, dtype=np.float32).reshape(-1)
        remainder = len(data) % FRAME_SAMPLES
        if remainder:
            data = np.concatenate([data, np.zeros(FRAME_SAMPLES - remainder, dtype=np.float32)])
        self.audio = data
        self.realtime = realtime
        self.name = name
        self.started_at: float | None = None  # monotonic time the first frame began (stream time 0)
        self._closed = False

    @property
    def duration_s(self) -> float:
        return len(self.audio) / SAMPLE_RATE_HZ

    async def frames(self) -> AsyncIterator[np.ndarray]:
        start = self.started_at = time.monotonic()
        for index in range(len(self.audio) // FRAME_SAMPLES):
            if self._closed:
                return
            if self.realtime:
                delay_s = start + (index + 1) * FRAME_S - time.monotonic()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
            else:
                await asyncio.sleep(0)  # let the rest of the pipeline run between frames
            yield self.audio[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES]

    async def close(self) -> None:
        self._closed = True


def wav_file_source(path: Path, *, realtime: bool, tail_silence_s: float = 1.5) -> ArraySource:
    """A source reading any audio file (resampled to 16 kHz mono), followed by ``tail_silence_s`` of
    silence so that the end of speech is confirmed as it would be live.

    Raises engines.errors.InputError naming the file when it cannot be read.
    """
    from engines.audio import load_audio_16k

    audio = load_audio_16k(path)
    tail = np.zeros(round(tail_silence_s * SAMPLE_RATE_HZ), dtype=np.float32)
    return ArraySource(np.concatenate([audio, tail]), realtime=realtime, name=str(path))


class MemorySink:
    """Keeps everything written (and what a barge-in flushed, for inspection)."""

    def __init__(self, sample_rate_hz: int, *, name: str = "memory", realtime: bool = False) -> None:
        self.sample_rate_hz = sample_rate_hz
        self.name = name
        self.realtime = realtime
        self._chunks: list[np.ndarray] = []
        self.flushes = 0

    async def write(self, audio: np.ndarray) -> None:
        self._chunks.append(np.asarray(audio, dtype=np.float32).reshape(-1).copy())

    async def flush(self) -> None:
        self.flushes += 1

    async def close(self) -> None:
        return None

    @property
    def audio(self) -> np.ndarray:
        if not self._chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(self._chunks)

    @property
    def duration_s(self) -> float:
        return sum(len(c) for c in self._chunks) / self.sample_rate_hz

    def clear(self) -> None:
        self._chunks.clear()


class WavSink(MemorySink):
    """Writes everything played to a 16-bit WAV file when closed."""

    def __init__(self, path: Path, sample_rate_hz: int, *, realtime: bool = False) -> None:
        super().__init__(sample_rate_hz, name=str(path), realtime=realtime)
        self.path = path

    async def close(self) -> None:
        write_wav(self.path, self.audio, self.sample_rate_hz)


def write_wav(path: Path, audio: np.ndarray, sample_rate_hz: int) -> None:
    import soundfile as sf  # where used: the settings' schema imports this package

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(path), np.asarray(audio, dtype=np.float32), sample_rate_hz, subtype="PCM_16")
    except (OSError, sf.LibsndfileError) as err:
        raise OSError(f"cannot write {path}: {err} (fix: choose a writable path)") from err


class NullSink:
    """Discards audio; paced like a speaker when ``realtime`` so that barge-in still applies."""

    def __init__(self, sample_rate_hz: int = 22050, *, realtime: bool = False) -> None:
        self.sample_rate_hz = sample_rate_hz
        self.realtime = realtime
        self.name = "null"

    async def write(self, audio: np.ndarray) -> None:
        return None

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None
