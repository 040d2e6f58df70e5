"""ONNX Runtime on the CPU, as the small engines (Silero VAD, Smart Turn, Piper) open it: their own
intra-op threads, one inter-op thread, warnings only, and a bad file named with the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.errors import ModelFileError


def cpu_session_options(ort: Any, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def open_cpu_session(ort: Any, model_path: Path, *, threads: int, what: str, fix: str) -> Any:
    """An ``InferenceSession`` on the CPU; ``ModelFileError`` naming ``what`` when the file is missing
    or is not a loadable model."""
    if not model_path.is_file():
        raise ModelFileError(f"{what} {model_path} is missing", fix=fix)
    try:
        return ort.InferenceSession(
            str(model_path), cpu_session_options(ort, threads), providers=["CPUExecutionProvider"]
        )
    except Exception as err:  # onnxruntime raises its own untyped errors for bad files
        raise ModelFileError(f"{model_path} is not a loadable ONNX model ({err})", fix=fix) from err
