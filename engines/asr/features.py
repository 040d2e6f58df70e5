"""Whisper's log-mel front end in numpy: 25 ms Hann windows every 10 ms, 80 Slaney mel bands.

Matches openai-whisper / faster-whisper: the waveform gets one hop of trailing zeros, a centred STFT
with reflect padding, the last frame dropped, log10 clamped to 8 decades below the peak, then scaled
to roughly [-1, 1]. ``floor`` (the value of silence) is what padding to a longer input uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engines.audio import SAMPLE_RATE_HZ

N_FFT = 400
HOP_SAMPLES = 160
CHUNK_S = 30
CHUNK_FRAMES = CHUNK_S * SAMPLE_RATE_HZ // HOP_SAMPLES  # 3000


@lru_cache(maxsize=4)
def mel_filterbank(n_mels: int = 80, n_fft: int = N_FFT, sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Slaney-style mel filters [n_mels, n_fft // 2 + 1], area-normalised (as librosa ``norm='slaney'``)."""
    fft_hz = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate_hz)
    # Slaney mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above.
    linear_step_hz = 200.0 / 3.0
    break_hz = 1000.0
    break_mel = break_hz / linear_step_hz
    log_step = np.log(6.4) / 27.0

    def hz_to_mel(hz: float) -> float:
        return hz / linear_step_hz if hz < break_hz else break_mel + float(np.log(hz / break_hz)) / log_step

    mels = np.linspace(0.0, hz_to_mel(sample_rate_hz / 2.0), n_mels + 2)
    edges_hz = np.where(
        mels < break_mel, mels * linear_step_hz, break_hz * np.exp(log_step * (mels - break_mel))
    )
    widths_hz = np.diff(edges_hz)
    ramps = edges_hz[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths_hz[:-1, None]
    falling = ramps[2:] / widths_hz[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]
    return weights.astype(np.float32)


@lru_cache(maxsize=1)
def _hann(n_fft: int = N_FFT) -> np.ndarray:
    return np.hanning(n_fft + 1)[:-1].astype(np.float32)


@dataclass(frozen=True)
class LogMel:
    features: np.ndarray  # [n_mels, frames] float32, one frame per 10 ms of audio
    floor: float  # the value of silence in this utterance's scale

    @property
    def frames(self) -> int:
        return int(self.features.shape[1])


def log_mel(audio: np.ndarray, n_mels: int = 80, *, trailing_hop: bool = True) -> LogMel:
    """Log-mel features of float32 mono 16 kHz audio: ``len(audio) // 160`` frames.

    ``trailing_hop=False`` leaves out the hop of zeros, so the last frame reflects the audio's own end,
    as Hugging Face's WhisperFeatureExtractor does for an input that fills its window exactly.
    """
    audio = np.asarray(audio, dtype=np.float32)
    content_frames = len(audio) // HOP_SAMPLES
    padded = np.pad(audio, (0, HOP_SAMPLES)) if trailing_hop else audio
    half = N_FFT // 2
    if len(padded) <= half:
        padded = np.pad(padded, (0, half + 1 - len(padded)))
    padded = np.pad(padded, (half, half), mode="reflect")
    n_windows = 1 + (len(padded) - N_FFT) // HOP_SAMPLES
    windows = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_SAMPLES][:n_windows]
    spectrum = np.fft.rfft(windows * _hann(), n=N_FFT, axis=-1)
    power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)[:-1]  # drop the last frame
    mel = mel_filterbank(n_mels) @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    peak = float(log_spec.max())
    log_spec = (np.maximum(log_spec, peak - 8.0) + 4.0) / 4.0
    floor = (peak - 8.0 + 4.0) / 4.0
    return LogMel(features=log_spec[:, :content_frames].astype(np.float32), floor=floor)


def pad_frames(mel: LogMel, frames: int, value: float | None = None) -> np.ndarray:
    """Features padded (or cut) to ``frames``; pads with the silence floor unless ``value`` is given."""
    features = mel.features[:, :frames]
    missing = frames - features.shape[1]
    if missing <= 0:
        return np.ascontiguousarray(features)
    fill = mel.floor if value is None else value
    return np.pad(features, ((0, 0), (0, missing)), constant_values=fill)
