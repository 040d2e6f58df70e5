"""A linear echo canceller for what Whisper hears: subtracts the echo path's estimate, never
suppresses.

WebRTC's AEC3 removes an echo by two means: a linear filter, then a suppressor that turns bands
down wherever echo may remain. The suppressor is what keeps the VAD from hearing the reply, but in
the first moments of a person speaking over the reply it turns their voice down too, and Whisper
mishears their first words. This filter (partitioned-block frequency-domain NLMS, overlap-save) only
subtracts, so the person's voice is untouched; it learns only while AEC3 says that what is left is
echo (AEC3's output far below this filter's), so it does not unlearn the room while a person speaks.
"""

from __future__ import annotations

import numpy as np

BLOCK = 160  # samples per update: AEC3's 10 ms blocks, so both see the same audio
PARTITIONS = 16  # filter length 16 x 10 ms: the lead left for AEC3, the direct path and early reverb
STEP = 0.3  # NLMS step size
SMOOTHING = 0.9  # of the reference power estimate per bin
LEARN_RATIO = 0.1  # learn while AEC3's output power is below this share of this filter's output
_FLOOR = 1e-10


class LinearCanceller:
    def __init__(self, *, partitions: int = PARTITIONS) -> None:
        bins = BLOCK + 1
        self._weights: np.ndarray = np.zeros((partitions, bins), dtype=np.complex128)
        self._history: np.ndarray = np.zeros((partitions, bins), dtype=np.complex128)
        self._previous: np.ndarray = np.zeros(BLOCK, dtype=np.float64)
        self._power: np.ndarray = np.full(bins, _FLOOR)

    def process(self, capture: np.ndarray, reference: np.ndarray, suppressed: np.ndarray) -> np.ndarray:
        """One block: ``capture`` less the estimated echo of ``reference``; ``suppressed`` (AEC3's
        output for the same block) decides whether the filter learns from it."""
        capture = capture.astype(np.float64)
        spectrum = np.fft.rfft(np.concatenate([self._previous, reference.astype(np.float64)]))
        self._previous = reference.astype(np.float64)
        self._history = np.roll(self._history, 1, axis=0)
        self._history[0] = spectrum
        estimate = np.fft.irfft(np.sum(self._weights * self._history, axis=0))[BLOCK:]
        error = capture - estimate
        reference_power = float(np.mean(np.square(reference)))
        error_power = float(np.mean(np.square(error)))
        suppressed_power = float(np.mean(np.square(suppressed.astype(np.float64))))
        if reference_power > 1e-7 and suppressed_power < LEARN_RATIO * error_power:
            self._learn(error)
        return error

    def _learn(self, error: np.ndarray) -> None:
        self._power = SMOOTHING * self._power + (1 - SMOOTHING) * np.sum(np.abs(self._history) ** 2, axis=0)
        error_spectrum = np.fft.rfft(np.concatenate([np.zeros(BLOCK), error]))
        gradient = np.conj(self._history) * error_spectrum * (STEP / (self._power + _FLOOR))
        constrained = np.fft.irfft(gradient, axis=1)
        constrained[:, BLOCK:] = 0.0  # overlap-save: only the first half of each partition is a filter
        self._weights += np.fft.rfft(constrained, axis=1)
