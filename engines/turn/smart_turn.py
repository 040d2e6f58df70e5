"""Smart Turn v3.2 (pipecat's end-of-turn model, BSD-2-Clause) on plain ONNX Runtime.

The model hears the last 8 s of the utterance, zero-padded in front when shorter, as Whisper
log-mel features of the waveform normalised to zero mean and unit variance; it returns the
probability (already a sigmoid) that the speaker has finished.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from engines.asr.features import log_mel
from engines.audio import SAMPLE_RATE_HZ
from engines.errors import BackendUnavailable, InputError, ModelFileError
from engines.onnx_cpu import open_cpu_session

log = logging.getLogger(__name__)

WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE_HZ
FEATURE_SHAPE = (80, WINDOW_SAMPLES // 160)  # (mels, frames) = (80, 800)
_NORM_EPS = 1e-7
_FIX = "rebuild the engine bundle: python -m build_scripts bundle --out DIR"


def features(audio_16k: np.ndarray) -> np.ndarray:
    """The model's input for one utterance: [80, 800] float32."""
    audio = np.asarray(audio_16k, dtype=np.float32)
    if audio.ndim != 1:
        raise InputError(f"turn detection takes mono audio, got shape {audio.shape}")
    if not np.all(np.isfinite(audio)):
        raise InputError("turn detection got audio with NaN or infinite samples")
    window = audio[-WINDOW_SAMPLES:]
    window = np.pad(window, (WINDOW_SAMPLES - len(window), 0))
    window = (window - window.mean()) / np.sqrt(window.var() + _NORM_EPS)
    return log_mel(window, trailing_hop=False).features


class SmartTurnDetector:
    def __init__(self, model_path: Path, *, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.model_path = model_path
        self.threads = threads
        self._session: Any = None

    def load(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise BackendUnavailable(
                "Smart Turn needs the onnxruntime package",
                fix="pip install 'voice-appliance[cpu]', or set endpointer.mode = 'silence'",
            ) from err
        session = open_cpu_session(
            ort, self.model_path, threads=self.threads, what="Smart Turn model", fix=_FIX
        )
        inputs = session.get_inputs()
        if [i.name for i in inputs] != ["input_features"] or list(inputs[0].shape[1:]) != list(FEATURE_SHAPE):
            shapes = [(i.name, i.shape) for i in inputs]
            raise ModelFileError(
                f"{self.model_path} takes {shapes}, expected Smart Turn v3 (input_features [batch, 80, 800])",
                fix=_FIX,
            )
        self._session = session
        self.complete_probability(np.zeros(SAMPLE_RATE_HZ, dtype=np.float32))  # first run allocates
        log.info("Smart Turn loaded on onnxruntime (%s)", self.model_path.name)

    def complete_probability(self, audio_16k: np.ndarray) -> float:
        if self._session is None:
            raise RuntimeError("the turn detector is not loaded; call load() first")
        batch = features(audio_16k)[np.newaxis]
        (output,) = self._session.run(None, {"input_features": batch})
        return float(np.asarray(output).reshape(-1)[0])

    def close(self) -> None:
        self._session = None
