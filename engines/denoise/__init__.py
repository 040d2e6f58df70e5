"""Noise suppression: a stream per session takes the room's noise out of 16 kHz frames.

Both suppressors are native libraries run at 48 kHz on 10 ms frames: RNNoise (the library carries its
weights) and DeepFilterNet3 (the library and its ONNX model, run by the library's own runtime). The
bundle carries both files, taken from their wheels at build time; they are loaded with ctypes, so a
machine without a wheel for its platform is told so and runs without (``unavailable_reason``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from engines.denoise.params import DenoiseParams
from engines.errors import BundleError

if TYPE_CHECKING:
    from engines.bundle import Bundle

RNNOISE_ARTIFACT = "denoise/rnnoise/library"
DEEPFILTER_ARTIFACT = "denoise/deepfilternet3/library"
DEEPFILTER_MODEL_ARTIFACT = "denoise/deepfilternet3/model"
ARTIFACTS = {
    "rnnoise": (RNNOISE_ARTIFACT,),
    "deepfilternet": (DEEPFILTER_ARTIFACT, DEEPFILTER_MODEL_ARTIFACT),
}

__all__ = [
    "ARTIFACTS",
    "DenoiseParams",
    "DenoiseStream",
    "Denoiser",
    "create_denoiser",
    "missing_artifacts",
    "unavailable_reason",
]


class DenoiseStream(Protocol):
    """One session's suppressor state; frames must be fed in order."""

    latency_s: float

    def process(self, frame: np.ndarray) -> np.ndarray:
        """``frame`` (float32, 16 kHz) with the noise taken out: as long as ``frame``, ``latency_s``
        late."""
        ...


class Denoiser(Protocol):
    name: str

    def load(self) -> None: ...

    def stream(self) -> DenoiseStream: ...

    def close(self) -> None: ...


def missing_artifacts(bundle: Bundle, engine: str) -> list[str]:
    """The bundle's files ``engine`` needs that it lacks."""
    return [name for name in ARTIFACTS.get(engine, ()) if bundle.manifest.get(name) is None]


def unavailable_reason(bundle: Bundle, engine: str) -> str | None:
    """Why ``engine``'s library does not load on this machine (a wheel for another platform, a C
    library too old), or None when it does."""
    import ctypes

    files = ARTIFACTS.get(engine)
    if not files:
        return None
    library = bundle.path(files[0])
    try:
        ctypes.CDLL(str(library))
    except OSError as err:
        return f"its library {library} does not load here: {err}"
    return None


def create_denoiser(bundle: Bundle, params: DenoiseParams) -> Denoiser | None:
    """An unloaded suppressor (None for ``engine = "none"``). Raises BundleError when the bundle lacks
    its files; ``load()`` raises BackendUnavailable when the library does not load on this machine."""
    if params.engine == "none":
        return None
    missing = missing_artifacts(bundle, params.engine)
    if missing:
        raise BundleError(
            f"the bundle {bundle.root} has no {params.engine} files ({', '.join(missing)})",
            fix=f"rebuild it (python -m build_scripts bundle --out {bundle.root}), or set denoise.engine = 'none'",
        )
    from engines.denoise.native import DeepFilterLibrary, Library, NativeDenoiser, RnnoiseLibrary

    library: Library
    if params.engine == "rnnoise":
        library = RnnoiseLibrary(bundle.path(RNNOISE_ARTIFACT))
    else:
        library = DeepFilterLibrary(
            bundle.path(DEEPFILTER_ARTIFACT),
            bundle.path(DEEPFILTER_MODEL_ARTIFACT),
            max_attenuation_db=params.max_attenuation_db,
        )
    return NativeDenoiser(library)
