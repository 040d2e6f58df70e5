"""Audio helpers shared by the engines: reading files as float32 mono and resampling with soxr."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np

from engines.errors import InputError

__all__ = [
    "FRAME_S",
    "FRAME_SAMPLES",
    "SAMPLE_RATE_HZ",
    "load_audio",
    "load_audio_16k",
    "resample",
    "to_mono_float32",
]

# The ground floor: every engine and the pipeline work on 16 kHz mono float32, in VAD frames of 512.
SAMPLE_RATE_HZ = 16000
FRAME_SAMPLES = 512
FRAME_S = FRAME_SAMPLES / SAMPLE_RATE_HZ  # 0.032

log = logging.getLogger(__name__)


def power(audio: np.ndarray) -> float:
    """Mean power (of float samples in [-1, 1]), in float64."""
    return float(np.mean(np.square(audio, dtype=np.float64)))


def to_mono_float32(audio: np.ndarray) -> np.ndarray:
    """``(samples,)`` or ``(samples, channels)`` of any numeric dtype -> float32 ``(samples,)``.

    Channels are averaged. Integer PCM is scaled to [-1, 1].
    """
    data = np.asarray(audio)
    if data.ndim == 2:
        data = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    elif data.ndim != 1:
        raise InputError(
            f"audio must have shape (samples,) or (samples, channels), got {data.shape}",
            fix="pass one channel or a (samples, channels) array",
        )
    if np.issubdtype(data.dtype, np.integer):
        scale = float(np.iinfo(data.dtype).max) + 1.0
        return (data.astype(np.float32) / scale).astype(np.float32)
    return np.ascontiguousarray(data, dtype=np.float32)


def resample(audio: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Resample float32 mono ``audio`` from ``from_hz`` to ``to_hz`` (soxr, high quality).

    Returns a new float32 array (a copy even when the rates are equal).
    """
    for name, rate in (("from_hz", from_hz), ("to_hz", to_hz)):
        if not isinstance(rate, (int, np.integer)) or isinstance(rate, bool) or rate <= 0:
            raise InputError(
                f"{name} must be a positive whole number of hertz, got {rate!r}",
                fix="pass sample rates such as 8000, 16000, 22050 or 48000",
            )
    data = to_mono_float32(audio)
    if from_hz == to_hz or data.size == 0:
        return data.copy() if from_hz == to_hz else np.zeros(0, dtype=np.float32)
    import soxr  # imported where used: the formats and constants here are imported by the settings' schema

    out = soxr.resample(data, int(from_hz), int(to_hz), quality="HQ")
    return np.ascontiguousarray(out, dtype=np.float32)


def load_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Read any file soundfile understands (WAV, FLAC, OGG, ...) as float32 mono at its own rate.

    Raises InputError naming the file when it is missing, empty, not audio or has no samples.
    """
    file = Path(path)
    if not file.exists():
        raise InputError(f"audio file {file} does not exist", fix="check the path")
    if not file.is_file():
        raise InputError(f"{file} is not a file", fix="pass the path of an audio file")
    if file.stat().st_size == 0:
        raise InputError(f"audio file {file} is empty (0 bytes)", fix="record or copy the file again")
    _refuse_truncated_wav(file)
    import soundfile as sf

    try:
        data, sample_rate_hz = sf.read(str(file), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as err:
        raise InputError(
            f"{file} is not a readable audio file ({err})",
            fix="pass a WAV, FLAC or OGG file (convert other formats with ffmpeg or sox)",
        ) from err
    if data.shape[0] == 0:
        raise InputError(f"audio file {file} has no samples", fix="pass a file that contains audio")
    mono = to_mono_float32(data)
    if not np.all(np.isfinite(mono)):
        raise InputError(f"audio file {file} contains NaN or infinite samples", fix="re-export the file")
    log.debug("loaded %s: %d samples at %d Hz", file, mono.size, sample_rate_hz)
    return mono, int(sample_rate_hz)


# A data chunk size a recorder writes while it does not yet know the length (arecord to a pipe).
_UNKNOWN_WAV_SIZES = (0, 0xFFFFFFFF, 0x7FFFFFFF)


def wav_data_sizes(file: Path) -> tuple[int, int] | None:
    """(bytes the WAV header's data chunk claims, bytes present after it) for a RIFF WAVE file with a
    known length; None for any other file. libsndfile reads a cut file silently, short."""
    try:
        with file.open("rb") as handle:
            head = handle.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return None
            position, size = 12, file.stat().st_size
            while position + 8 <= size:
                handle.seek(position)
                chunk_id, chunk_size = struct.unpack("<4sI", handle.read(8))
                if chunk_id == b"data":
                    if chunk_size in _UNKNOWN_WAV_SIZES:
                        return None
                    return chunk_size, size - position - 8
                position += 8 + chunk_size + (chunk_size & 1)
    except OSError:
        return None
    return None


def _refuse_truncated_wav(file: Path) -> None:
    sizes = wav_data_sizes(file)
    if sizes is None or sizes[1] >= sizes[0]:
        return
    claimed, present = sizes
    raise InputError(
        f"audio file {file} is cut short: its header says {claimed} bytes of audio, only {present} "
        f"({100.0 * present / claimed:.0f}%) are there",
        fix="copy or record the file again; to use the part that is there, rewrite its header "
        f"(sox --ignore-length {file} fixed.wav)",
    )


def load_audio_16k(path: str | Path) -> np.ndarray:
    """Read an audio file as float32 mono at 16 kHz (the VAD and ASR rate)."""
    audio, sample_rate_hz = load_audio(path)
    if sample_rate_hz == SAMPLE_RATE_HZ:
        return audio
    return resample(audio, sample_rate_hz, SAMPLE_RATE_HZ)
