"""End-of-turn detection: does the utterance so far sound finished? A probability per call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from engines.bundle import Bundle

SMART_TURN_ARTIFACT = "turn/smart-turn-v3.2"


class TurnDetector(Protocol):
    def load(self) -> None: ...

    def complete_probability(self, audio_16k: np.ndarray) -> float:
        """Probability that the turn is complete, given the utterance so far (float32, 16 kHz)."""
        ...

    def close(self) -> None: ...


def create_turn_detector(bundle: Bundle, *, threads: int) -> TurnDetector:
    """An unloaded Smart Turn v3.2 detector; stateless per call, so one serves every session."""
    from engines.errors import BundleError
    from engines.turn.smart_turn import SmartTurnDetector

    if bundle.manifest.get(SMART_TURN_ARTIFACT) is None:
        raise BundleError(
            f"the bundle {bundle.root} has no Smart Turn model ({SMART_TURN_ARTIFACT})",
            fix=f"rebuild it (python -m build_scripts bundle --out {bundle.root}), "
            "or set endpointer.mode = 'silence'",
        )
    return SmartTurnDetector(bundle.path(SMART_TURN_ARTIFACT), threads=threads)
