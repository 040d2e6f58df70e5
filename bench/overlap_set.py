"""Speech over a reply, as a person makes it: a question, then, a moment into the answer they hear,
a backchannel, a stop word or a new question.

``CueSource`` is the person: it says the question in real time, listens (silence) until the reply
has been heard for ``after_s``, says the overlap, and falls silent until the appliance has been
quiet for ``quiet_s``. ``CueSink`` is the speaker it listens to: a real-time sink that notes when
the reply began and when it was silenced. The overlaps are real recordings where
``../shared/data`` has the word (Speech Commands' "yes", "no", "stop", "right"; a whole sentence) and
the Piper voice otherwise; the cough is made up (shaped noise).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.audio.base import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE_HZ, SourceBase
from appliance.audio.files import MemorySink
from engines.audio import load_audio_16k, resample

QUESTION = "Tell me about the history of the Brooklyn Bridge."
_NOISE_LEVEL = 3e-4  # the room between words: not digital silence


@dataclass(frozen=True)
class OverlapClip:
    name: str
    kind: str  # backchannel, stop_word, interruption: what the person meant
    audio: np.ndarray  # 16 kHz
    source: str  # "recording: <file>", "piper", "made up"


class CueSink(MemorySink):
    """A real-time speaker that remembers when audio began and when it was dropped."""

    def __init__(self, sample_rate_hz: int) -> None:
        super().__init__(sample_rate_hz, name="cue-speaker", realtime=True)
        self.first_write_at: float | None = None
        self.last_write_at: float | None = None
        self.flushed_at: list[float] = []

    async def write(self, audio: np.ndarray) -> None:
        now = time.monotonic()
        if self.first_write_at is None:
            self.first_write_at = now
        self.last_write_at = now
        await super().write(audio)

    async def flush(self) -> None:
        self.flushed_at.append(time.monotonic())
        await super().flush()


class CueSource(SourceBase):
    name = "cue-person"

    def __init__(
        self,
        question: np.ndarray,
        overlap: np.ndarray,
        sink: CueSink,
        *,
        after_s: float,
        quiet_s: float = 2.0,
        max_s: float = 60.0,
        seed: int = 0,
    ) -> None:
        self._question = _frames(question)
        self._overlap = _frames(overlap)
        self._sink = sink
        self.after_s, self.quiet_s, self.max_s = after_s, quiet_s, max_s
        self._rng = np.random.default_rng(seed)
        self.overlap_at: float | None = None  # monotonic: the overlap's first sample was said
        self.overlap_end_at: float | None = None
        self._closed = False

    async def frames(self) -> AsyncIterator[np.ndarray]:
        start = time.monotonic()
        question, overlap = list(self._question), list(self._overlap)
        for index in range(int(self.max_s / FRAME_S)):
            delay_s = start + (index + 1) * FRAME_S - time.monotonic()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            now = time.monotonic()
            if self._closed:
                return
            if question:
                yield question.pop(0)
                continue
            heard_from = self._sink.first_write_at
            if overlap and heard_from is not None and now - FRAME_S >= heard_from + self.after_s:
                if self.overlap_at is None:
                    self.overlap_at = now - FRAME_S
                yield overlap.pop(0)
                if not overlap:
                    self.overlap_end_at = now
                continue
            if self.overlap_end_at is not None and now - self.overlap_end_at >= self.quiet_s:
                last = self._sink.last_write_at
                if last is None or now - last >= self.quiet_s:
                    return
            yield (self._rng.standard_normal(FRAME_SAMPLES) * _NOISE_LEVEL).astype(np.float32)

    async def close(self) -> None:
        self._closed = True


def _frames(audio: np.ndarray) -> list[np.ndarray]:
    data = np.asarray(audio, dtype=np.float32).reshape(-1)
    data = np.concatenate([data, np.zeros(-len(data) % FRAME_SAMPLES, np.float32)])
    noise = np.random.default_rng(1).standard_normal(len(data)).astype(np.float32) * _NOISE_LEVEL
    data = data + noise
    return [data[i : i + FRAME_SAMPLES] for i in range(0, len(data), FRAME_SAMPLES)]


# Where each word is in its recording (s), read from the recordings' energy.
WORDS = {
    "yes": ("speechcommands_yes_no_go_stop.wav", 0.30, 0.80),
    "no": ("speechcommands_yes_no_go_stop.wav", 1.03, 1.48),
    "stop": ("speechcommands_yes_no_go_stop.wav", 3.08, 3.99),
    "right": ("speechcommands_right_left_up.wav", 0.30, 0.88),
}


def recorded_word(data_dir: Path, word: str) -> np.ndarray:
    name, start_s, end_s = WORDS[word]
    audio = load_audio_16k(data_dir / "speech" / "en" / name)
    return audio[int(start_s * SAMPLE_RATE_HZ) : int(end_s * SAMPLE_RATE_HZ)]


def spoken(voice: Any, text: str) -> np.ndarray:
    """``text`` in the Piper voice, at 16 kHz and a speaking level."""
    audio_22k = np.concatenate(list(voice.synthesize(text, sample_rate_hz=22050)))
    audio = resample(audio_22k, 22050, 16000).astype(np.float32)
    return (audio / max(float(np.abs(audio).max()), 1e-6) * 0.5).astype(np.float32)


def made_up_cough(seed: int = 0) -> np.ndarray:
    """A cough's shape: a 60 ms burst of noise falling off over 250 ms (no recording has one)."""
    rng = np.random.default_rng(seed)
    n = int(0.3 * SAMPLE_RATE_HZ)
    envelope = np.exp(-np.arange(n) / (0.06 * SAMPLE_RATE_HZ))
    noise = np.convolve(rng.standard_normal(n), np.ones(8) / 8, mode="same")
    return (noise * envelope / np.abs(noise).max() * 0.5).astype(np.float32)


def overlap_clips(voice: Any, data_dir: Path) -> list[OverlapClip]:
    clips = [
        OverlapClip(word, kind, recorded_word(data_dir, word), f"recording: {WORDS[word][0]}")
        for word, kind in (
            ("yes", "backchannel"),
            ("right", "backchannel"),
            ("stop", "stop_word"),
            ("no", "stop_word"),
        )
    ]
    clips.append(OverlapClip("cough", "backchannel", made_up_cough(), "made up"))
    for text, kind in (
        ("Mm-hmm.", "backchannel"),
        ("Uh-huh.", "backchannel"),
        ("Yeah.", "backchannel"),
        ("Okay.", "backchannel"),
        ("Sure.", "backchannel"),
        ("Ha ha!", "backchannel"),
        ("Wait.", "stop_word"),
        ("Hold on.", "stop_word"),
        ("Cancel.", "stop_word"),
        ("What time does the canteen open?", "interruption"),
        ("No, I meant the one in London.", "interruption"),
    ):
        clips.append(OverlapClip(text, kind, spoken(voice, text), "piper"))
    sentence = load_audio_16k(data_dir / "speech/en/speechbrain_spk1_snt1.wav")
    clips.append(OverlapClip("a sentence", "interruption", sentence, "recording: speechbrain_spk1_snt1.wav"))
    return clips
