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
MEASURE_DECAY = 0.99  # per block of echo alone: how far back cancelled_db() looks (about a second)
REFERENCE_FLOOR = 1e-4  # mean power of a reference block that counts as playing (-40 dBFS)
_FLOOR = 1e-10


class LinearCanceller:
    def __init__(self, *, partitions: int = PARTITIONS) -> None:
        bins = BLOCK + 1
        self._weights: np.ndarray = np.zeros((partitions, bins), dtype=np.complex128)
        self._history: np.ndarray = np.zeros((partitions, bins), dtype=np.complex128)
        self._previous: np.ndarray = np.zeros(BLOCK, dtype=np.float64)
        self._power: np.ndarray = np.full(bins, _FLOOR)
        # Decaying sums over blocks of echo alone (the reference playing, AEC3 removing nearly all of
        # the microphone): the microphone's energy and what this filter left of it.
        self._echo_energy = 0.0
        self._left_energy = 0.0

    def adopt(self, weights: np.ndarray) -> None:
        """Go on from ``weights`` (a filter learnt before, placed on this stream's echo)."""
        if weights.shape != self._weights.shape:
            raise ValueError(f"a filter of shape {weights.shape}, not {self._weights.shape}")
        self._weights = weights.astype(np.complex128, copy=True)

    @property
    def weights(self) -> np.ndarray:
        """A copy of the filter, to start another canceller in the same room from."""
        return self._weights.copy()

    def cancelled_db(self) -> float | None:
        """How far below the echo this filter has lately left it (None before it has heard echo alone)."""
        if self._echo_energy <= 0.0:
            return None
        return 10.0 * float(np.log10((self._echo_energy + _FLOOR) / (self._left_energy + _FLOOR)))

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
        capture_power = float(np.mean(np.square(capture)))
        if reference_power > 1e-7 and suppressed_power < LEARN_RATIO * capture_power:
            self._echo_energy = MEASURE_DECAY * self._echo_energy + capture_power
            self._left_energy = MEASURE_DECAY * self._left_energy + error_power
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
