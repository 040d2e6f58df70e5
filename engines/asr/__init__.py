"""Speech recognition: Whisper over interchangeable graph-execution backends."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engines.asr.params import AsrParams
from engines.bundle import Bundle


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str
    audio_s: float
    asr_s: float
    tokens: tuple[int, ...] = ()
    # Whisper's own confidence, the signals its decoder falls back on: the average log probability of
    # the tokens chosen, the probability that no one speaks (first window), the text's gzip ratio.
    avg_logprob: float | None = None
    no_speech_p: float | None = None
    compression_ratio: float | None = None


class AsrEngine(Protocol):
    def load(self) -> None: ...

    def transcribe(self, audio: np.ndarray, *, cancel: threading.Event | None = None) -> Transcript:
        """Transcribe float32 mono audio at 16 kHz; raise ``engines.cancel.Cancelled`` once
        ``cancel`` is set (an ``engines.cancel.CancelEvent`` also stops a graph run midway)."""
        ...

    def close(self) -> None: ...


def create_asr(bundle: Bundle, params: AsrParams | None = None) -> AsrEngine:
    """An unloaded Whisper engine over the bundle's graphs; ``load()`` imports the runtime."""
    from engines.asr.factory import create_whisper

    return create_whisper(bundle, AsrParams() if params is None else params)
