"""Voice activity detection: speech probability per 512-sample frame at 16 kHz."""

from __future__ import annotations

from typing import Protocol

import numpy as np

SAMPLE_RATE_HZ = 16000
FRAME_SAMPLES = 512  # 32 ms


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
