"""Wake word: a microWakeWord model (TensorFlow Lite, its C library from the bundle) over every 16 kHz
frame of a session, saying when the phrase has just been spoken."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from engines.errors import BundleError
from engines.wake.params import WAKE_MODELS, WakeParams

if TYPE_CHECKING:
    from engines.bundle import Bundle

LIBRARY_ARTIFACT = "wake/tflite/library"

__all__ = [
    "LIBRARY_ARTIFACT",
    "WAKE_MODELS",
    "WakeParams",
    "WakeStream",
    "WakeWordEngine",
    "create_wake_word",
    "missing_artifacts",
    "model_artifacts",
    "unavailable_reason",
]


def model_artifacts(model: str) -> tuple[str, str]:
    """The bundle's names of a wake word's model file and its settings (probability cutoff, window)."""
    return f"wake/{model}/model", f"wake/{model}/config"


class WakeStream(Protocol):
    """One session's state; frames must be fed in order."""

    probability: float  # the averaged probability after the last frame

    def process(self, frame: np.ndarray) -> bool:
        """Whether the wake word ended within ``frame`` (float32, 16 kHz)."""
        ...


class WakeWordEngine(Protocol):
    phrase: str

    def load(self) -> None: ...

    def stream(self) -> WakeStream: ...

    def close(self) -> None: ...


def missing_artifacts(bundle: Bundle, model: str) -> list[str]:
    return [n for n in (LIBRARY_ARTIFACT, *model_artifacts(model)) if bundle.manifest.get(n) is None]


def unavailable_reason(bundle: Bundle) -> str | None:
    """Why the TensorFlow Lite library does not load here (its wheel needs glibc 2.35), or None."""
    import ctypes

    try:
        ctypes.CDLL(str(bundle.path(LIBRARY_ARTIFACT)))
    except OSError as err:
        return f"its library does not load here: {err}"
    return None


def create_wake_word(bundle: Bundle, params: WakeParams) -> WakeWordEngine:
    missing = missing_artifacts(bundle, params.model)
    if missing:
        raise BundleError(
            f"the bundle {bundle.root} has no wake word {params.model} ({', '.join(missing)})",
            fix=f"rebuild it (python -m build_scripts bundle --out {bundle.root}), or set wake.activation = 'always'",
        )
    from engines.wake.micro import MicroWakeWord

    model, config = model_artifacts(params.model)
    return MicroWakeWord(
        bundle.path(LIBRARY_ARTIFACT), bundle.path(model), bundle.path(config), threshold=params.threshold
    )
