"""Voice activity detection: speech probability per 512-sample frame at 16 kHz."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from engines.errors import BackendUnavailable
from engines.vad.params import VadParams

if TYPE_CHECKING:
    from engines.bundle import Bundle

BACKENDS = ("onnxruntime", "torch")
_ARTIFACTS = {"onnxruntime": "vad/silero/onnx", "torch": "vad/silero/torchscript"}


class VadStream(Protocol):
    """Per-session streaming state; frames must be fed in order."""

    def probability(self, frame: np.ndarray) -> float:
        """Speech probability of one float32 frame of FRAME_SAMPLES samples in [-1, 1]."""
        ...

    def reset(self) -> None: ...


class VadEngine(Protocol):
    def load(self) -> None: ...

    def stream(self) -> VadStream: ...

    def close(self) -> None: ...


def create_vad(bundle: Bundle, params: VadParams | None = None) -> VadEngine:
    """An unloaded Silero VAD engine; each ``stream()`` has its own state, so one engine serves all sessions.

    ``device`` ("cpu" or "cuda") applies to the torch backend. ``threads``: onnxruntime's intra-op
    threads (default 1: a frame is too small to split); for torch it sets torch's process-wide thread
    count (default: left as it is; 1 is fastest for this model on a busy CPU).
    """
    params = VadParams() if params is None else params
    backend, device, threads = params.backend, params.device, params.threads
    if backend not in _ARTIFACTS:
        raise BackendUnavailable(
            f"unknown VAD backend {backend!r}; allowed: {', '.join(BACKENDS)}",
            fix="set vad.backend to 'onnxruntime' or 'torch'",
        )
    model_path = bundle.path(_ARTIFACTS[backend])
    if backend == "torch":
        from engines.vad.silero_torch import TorchSileroVad

        return TorchSileroVad(model_path, device=device, threads=threads)
    if device != "cpu":
        raise BackendUnavailable(
            f"the onnxruntime VAD backend runs on the CPU only, got device {device!r}",
            fix="use device='cpu', or backend='torch' for a CUDA device",
        )
    from engines.vad.silero_onnx import OnnxSileroVad

    return OnnxSileroVad(model_path, threads=threads or 1)
