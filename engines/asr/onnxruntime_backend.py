"""ONNX Runtime graph runner: CPU, or the CUDA execution provider (``onnxruntime-gpu``)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from engines.cancel import CancelEvent, Cancelled, raise_if_cancelled
from engines.errors import BackendUnavailable, ModelFileError

log = logging.getLogger(__name__)

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as err:
        raise BackendUnavailable(
            "ASR backend 'onnxruntime' needs the onnxruntime package",
            fix='pip install -e ".[cpu]" (or onnxruntime-gpu for device = "cuda")',
        ) from err
    return onnxruntime


class OrtGraphRunner:
    def __init__(self, path: Path, *, device: str = "cpu", threads: int = 2) -> None:
        ort = _import_onnxruntime()
        self._ort = ort
        if device == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise BackendUnavailable(
                    "ONNX Runtime has no CUDA execution provider on this machine "
                    f"(available: {', '.join(ort.get_available_providers())})",
                    fix='install onnxruntime-gpu with a matching CUDA, or set asr.device = "cpu"',
                )
            providers: list[str] = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        except Exception as err:  # onnxruntime raises its own untyped exceptions for bad files
            raise ModelFileError(
                f"ONNX Runtime cannot load {path}: {err}",
                fix="re-export the model: python -m build_scripts bundle --out DIR",
            ) from err
        in_use = self._session.get_providers()[0]
        if in_use != providers[0]:
            # ONNX Runtime falls back to the CPU when the CUDA or cuDNN libraries do not load.
            raise BackendUnavailable(
                f"ONNX Runtime runs {path.name} on {in_use}, not {providers[0]} (the CUDA libraries did not load)",
                fix='install the CUDA and cuDNN versions this onnxruntime-gpu needs, or set asr.device = "cpu"',
            )
        self.name = path.name
        self._types = {
            i.name: np.dtype(_ORT_TYPES.get(i.type, np.float32)) for i in self._session.get_inputs()
        }
        self._outputs = [o.name for o in self._session.get_outputs()]
        log.debug("%s on %s", self.name, self._session.get_providers()[0])

    def input_dtype(self, name: str) -> np.dtype:
        return self._types[name]

    def run(
        self, inputs: dict[str, np.ndarray], cancel: threading.Event | None = None
    ) -> dict[str, np.ndarray]:
        raise_if_cancelled(cancel)
        if not isinstance(cancel, CancelEvent):
            values = self._session.run(self._outputs, inputs)
            return dict(zip(self._outputs, values, strict=True))
        options = self._ort.RunOptions()

        def terminate() -> None:
            options.terminate = True

        unregister = cancel.on_set(terminate)
        try:
            values = self._session.run(self._outputs, inputs, options)
        except Exception:
            if cancel.is_set():  # ONNX Runtime's own error for a terminated run
                raise Cancelled() from None
            raise
        finally:
            unregister()
        return dict(zip(self._outputs, values, strict=True))

    def close(self) -> None:
        self._session = None
