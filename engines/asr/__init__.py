"""Speech recognition: Whisper over interchangeable graph-execution backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

SAMPLE_RATE_HZ = 16000


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str
    audio_s: float
    asr_s: float
    tokens: tuple[int, ...] = ()


class AsrEngine(Protocol):
    def load(self) -> None: ...

    def transcribe(self, audio: np.ndarray) -> Transcript:
        """Transcribe float32 mono audio at 16 kHz."""
        ...

    def close(self) -> None: ...
