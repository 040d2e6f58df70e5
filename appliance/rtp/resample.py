"""8 kHz <-> 16 kHz at the edge of a call.

Caller to appliance: a stateful 2x FIR upsampler, because the audio arrives in 20 ms packets and the
speech detector wants it without delay. soxr's streaming resampler works in blocks (it returned
nothing for the first five 20 ms packets and then 60-100 ms at once at LQ/HQ quality, measured here),
and resampling each packet on its own clicks at every packet edge. This filter delays by 1.5 ms.

Appliance to caller: whole chunks of synthesized speech, resampled at once with soxr
(``engines.audio.resample``), where its block latency does not matter.
"""

from __future__ import annotations

import numpy as np

from engines.audio import resample

_TAPS = 48  # per output sample pair: 24 taps per phase
_CUTOFF_HZ = 3800.0


def _design_lowpass(taps: int, cutoff_hz: float, rate_hz: float) -> np.ndarray:
    n = np.arange(taps) - (taps - 1) / 2
    ideal = 2 * cutoff_hz / rate_hz * np.sinc(2 * cutoff_hz / rate_hz * n)
    kernel = ideal * np.kaiser(taps, 8.0)
    return (kernel / kernel.sum()).astype(np.float32)


class Upsampler2x:
    """Streaming 8 kHz -> 16 kHz: zero-stuffing and a windowed-sinc low-pass, state kept between calls."""

    def __init__(self) -> None:
        kernel = _design_lowpass(_TAPS, _CUTOFF_HZ, 16000.0) * 2.0  # gain 2 restores the zero-stuffed level
        self._even = kernel[0::2][::-1].copy()
        self._odd = kernel[1::2][::-1].copy()
        self._history: np.ndarray = np.zeros(len(self._even) - 1, dtype=np.float32)

    def process(self, audio_8k: np.ndarray) -> np.ndarray:
        x = np.concatenate([self._history, np.asarray(audio_8k, dtype=np.float32)])
        if len(audio_8k) == 0:
            return np.zeros(0, dtype=np.float32)
        out = np.empty(2 * len(audio_8k), dtype=np.float32)
        out[0::2] = np.convolve(x, self._even[::-1], mode="valid")
        out[1::2] = np.convolve(x, self._odd[::-1], mode="valid")
        self._history = x[len(x) - len(self._history) :]
        return out


def downsample_16k_to_8k(audio_16k: np.ndarray) -> np.ndarray:
    return resample(np.asarray(audio_16k, dtype=np.float32), 16000, 8000)
