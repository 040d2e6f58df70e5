"""Opening a compiled library the engine bundle carries (RNNoise, DeepFilterNet, TensorFlow Lite)."""

from __future__ import annotations

import ctypes
from pathlib import Path

from engines.errors import BackendUnavailable, ModelFileError

REBUILD = "rebuild the bundle (python -m build_scripts bundle --out DIR)"


def open_library(path: Path, what: str, *, load_fix: str, turn_off: str, mode: int = 0) -> ctypes.CDLL:
    """The library at ``path``, or an error naming it and the fix: ``load_fix`` where it is there but
    does not load on this machine, and in either case ``turn_off`` (the setting that runs without it)."""
    if not path.is_file():
        raise ModelFileError(f"the {what} library {path} is missing", fix=f"{REBUILD}, or set {turn_off}")
    try:
        return ctypes.CDLL(str(path), mode=mode)
    except OSError as err:
        raise BackendUnavailable(
            f"the {what} library {path} does not load on this machine: {err}",
            fix=f"{load_fix}; or set {turn_off}",
        ) from err
