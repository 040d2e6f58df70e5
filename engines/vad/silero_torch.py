"""Silero VAD (v6) TorchScript model on torch, as on the Jetson.

The packaged TorchScript wrapper keeps one stream's state inside the module; here its inner 16 kHz
network is called directly with the state and context held per stream, so sessions stay independent.
torch's thread count is process-wide: it is only changed when ``threads`` is given.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import numpy as np

from engines.audio import FRAME_SAMPLES
from engines.errors import BackendUnavailable, ModelFileError
from engines.vad.frames import check_frame
from engines.vad.silero_onnx import CONTEXT_SAMPLES, STATE_SHAPE

log = logging.getLogger(__name__)

_WARMUP_FRAMES = 8
# TorchScript's profiling executor would otherwise compile fused kernels for the graph over its first
# ~30 calls (100-300 ms each on a 2-core CPU); the graph is optimised without fusion during the warm-up,
# which keeps the per-frame cost (about 0.5 ms) and makes the first frames fast.
_NO_FUSION = [("STATIC", 0), ("DYNAMIC", 0)]
_DEVICES = ("cpu", "cuda")


class TorchSileroStream:
    """One audio stream's recurrent state and context; not shared between sessions."""

    def __init__(self, network: Any, device: str) -> None:
        self._network = network
        self._device = device
        self.reset()

    def reset(self) -> None:
        import torch

        self._state = torch.zeros(STATE_SHAPE, device=self._device)
        self._context = torch.zeros((1, CONTEXT_SAMPLES), device=self._device)

    def probability(self, frame: np.ndarray) -> float:
        import torch

        samples = torch.from_numpy(check_frame(frame)).to(self._device).unsqueeze(0)
        with torch.inference_mode():
            window = torch.cat([self._context, samples], dim=1)
            output, self._state = self._network(window, self._state)
        self._context = window[:, -CONTEXT_SAMPLES:]
        return float(output[0, 0])


class TorchSileroVad:
    def __init__(self, model_path: Path, *, device: str = "cpu", threads: int | None = None) -> None:
        if device not in _DEVICES:
            raise BackendUnavailable(
                f"unknown VAD device {device!r}; allowed: {', '.join(_DEVICES)}",
                fix="use device='cpu' (the VAD is tiny) or 'cuda' on a GPU device",
            )
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 or None, got {threads}")
        self.model_path = model_path
        self.device = device
        self.threads = threads
        self._network: Any = None

    def load(self) -> None:
        if importlib.util.find_spec("torch") is None:
            raise BackendUnavailable(
                "the torch VAD backend needs torch",
                fix="install torch (JetPack's wheel on a Jetson, the 'cpu' extra elsewhere) "
                "or choose vad.backend = 'onnxruntime'",
            )
        import torch

        if self.device == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable("torch sees no CUDA device", fix="use device='cpu'")
        if not self.model_path.is_file():
            raise ModelFileError(
                f"Silero VAD model {self.model_path} is missing",
                fix="rebuild the engine bundle: python -m build_scripts bundle --out DIR",
            )
        try:
            wrapper = torch.jit.load(str(self.model_path), map_location=self.device)
        except Exception as err:  # torch raises RuntimeError or its own types for bad archives
            raise ModelFileError(
                f"{self.model_path} is not a loadable TorchScript model ({err})",
                fix="rebuild the engine bundle: python -m build_scripts bundle --out DIR",
            ) from err
        network = getattr(wrapper, "_model", None)
        if network is None or getattr(network, "context_size_samples", None) != CONTEXT_SAMPLES:
            raise ModelFileError(
                f"{self.model_path} is not the Silero VAD v5/v6 TorchScript model",
                fix="use the silero_vad.jit of silero-vad 6.x from the engine bundle",
            )
        network.eval()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        self._network = network
        warm = self.stream()
        rng = np.random.default_rng(0)
        previous = torch.jit.set_fusion_strategy(_NO_FUSION)
        try:
            for _ in range(_WARMUP_FRAMES):
                warm.probability((rng.standard_normal(FRAME_SAMPLES) * 0.01).astype(np.float32))
        finally:
            torch.jit.set_fusion_strategy(previous)
        log.info("Silero VAD loaded on torch %s (%s)", self.device, self.model_path.name)

    def stream(self) -> TorchSileroStream:
        if self._network is None:
            raise RuntimeError("the VAD engine is not loaded; call load() first")
        return TorchSileroStream(self._network, self.device)

    def close(self) -> None:
        self._network = None
