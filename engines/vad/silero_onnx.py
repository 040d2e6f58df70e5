"""Silero VAD (v6) on plain ONNX Runtime: no torch in the process."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import numpy as np

from engines.audio import FRAME_SAMPLES, SAMPLE_RATE_HZ
from engines.errors import BackendUnavailable, ModelFileError
from engines.onnx_cpu import open_cpu_session
from engines.vad.frames import check_frame

log = logging.getLogger(__name__)

# The model sees the last 64 samples of the previous frame in front of each 512-sample frame.
CONTEXT_SAMPLES = 64
STATE_SHAPE = (2, 1, 128)
_WARMUP_FRAMES = 8


class OnnxSileroStream:
    """One audio stream's recurrent state and context; not shared between sessions."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._sr = np.array(SAMPLE_RATE_HZ, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros((1, CONTEXT_SAMPLES), dtype=np.float32)

    def probability(self, frame: np.ndarray) -> float:
        samples = check_frame(frame)
        window = np.concatenate([self._context, samples[np.newaxis, :]], axis=1)
        output, state = self._session.run(None, {"input": window, "state": self._state, "sr": self._sr})
        self._state = state
        self._context = window[:, -CONTEXT_SAMPLES:]
        return float(output[0, 0])


class OnnxSileroVad:
    def __init__(self, model_path: Path, *, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.model_path = model_path
        self.threads = threads
        self._session: Any = None

    def load(self) -> None:
        if importlib.util.find_spec("onnxruntime") is None:
            raise BackendUnavailable(
                "the onnxruntime VAD backend needs the onnxruntime package",
                fix="pip install 'voice-appliance[cpu]' or choose vad.backend = 'torch'",
            )
        import onnxruntime as ort

        session = open_cpu_session(
            ort,
            self.model_path,
            threads=self.threads,
            what="Silero VAD model",
            fix="rebuild the engine bundle: python -m build_scripts bundle --out DIR",
        )
        names = {i.name for i in session.get_inputs()}
        if names != {"input", "state", "sr"}:
            raise ModelFileError(
                f"{self.model_path} has inputs {sorted(names)}, expected Silero v5/v6 (input, state, sr)",
                fix="use the silero_vad.onnx of silero-vad 6.x from the engine bundle",
            )
        self._session = session
        warm = self.stream()
        rng = np.random.default_rng(0)
        for _ in range(_WARMUP_FRAMES):
            warm.probability((rng.standard_normal(FRAME_SAMPLES) * 0.01).astype(np.float32))
        log.info("Silero VAD loaded on onnxruntime (%s)", self.model_path.name)

    def stream(self) -> OnnxSileroStream:
        if self._session is None:
            raise RuntimeError("the VAD engine is not loaded; call load() first")
        return OnnxSileroStream(self._session)

    def close(self) -> None:
        self._session = None
