"""Speech synthesis: Piper voices, one clause at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np


class TtsEngine(Protocol):
    sample_rate_hz: int

    def load(self) -> None: ...

    def synthesize(self, text: str, *, sample_rate_hz: int | None = None) -> Iterator[np.ndarray]:
        """Yield float32 mono chunks of ``text`` spoken, at ``sample_rate_hz`` (voice rate if None)."""
        ...

    def close(self) -> None: ...
