"""Frame checks and whole-file helpers shared by the VAD backends."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from engines.audio import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE_HZ
from engines.errors import InputError
from engines.vad import VadStream

__all__ = ["FRAME_S", "check_frame", "frame_probabilities", "iter_frames"]


def check_frame(frame: np.ndarray) -> np.ndarray:
    """The frame as contiguous float32 of FRAME_SAMPLES samples, or InputError saying what is wrong."""
    data = np.asarray(frame)
    if data.ndim != 1 or data.shape[0] != FRAME_SAMPLES:
        raise InputError(
            f"a VAD frame must be {FRAME_SAMPLES} mono samples at {SAMPLE_RATE_HZ} Hz, got shape {data.shape}",
            fix="resample to 16 kHz (engines.audio.resample) and cut the audio into 512-sample frames",
        )
    if not np.issubdtype(data.dtype, np.floating):
        raise InputError(
            f"a VAD frame must be float samples in [-1, 1], got {data.dtype}",
            fix="convert PCM with engines.audio.to_mono_float32",
        )
    data = np.ascontiguousarray(data, dtype=np.float32)
    if not np.all(np.isfinite(data)):
        raise InputError("a VAD frame contains NaN or infinite samples", fix="check the audio source")
    return data


def iter_frames(audio: np.ndarray) -> Iterator[np.ndarray]:
    """Consecutive FRAME_SAMPLES frames of 16 kHz mono audio; the last partial frame is zero-padded."""
    for start in range(0, audio.shape[0], FRAME_SAMPLES):
        frame = audio[start : start + FRAME_SAMPLES]
        if frame.shape[0] < FRAME_SAMPLES:
            frame = np.pad(frame, (0, FRAME_SAMPLES - frame.shape[0]))
        yield frame


def frame_probabilities(stream: VadStream, audio: np.ndarray) -> np.ndarray:
    """Speech probability of every frame of 16 kHz float32 mono ``audio``, in order, through ``stream``."""
    return np.array([stream.probability(frame) for frame in iter_frames(audio)], dtype=np.float32)
