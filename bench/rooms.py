"""Rooms for the echo cancellation benchmark and tests: what a kiosk's microphone hears of its own
speaker, simulated with pyroomacoustics (image source method), delayed by the device's audio path.

Levels are RMS over the voiced part, in dBFS: a person at a kiosk at about -26 dBFS on its microphone,
the appliance's reply reaching the same microphone at a chosen level ("normal volume": as loud as the
person; "quiet": 10 dB softer; "loud": 6 dB louder, the speaker next to the microphone).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE_HZ = 16000
SPEECH_DBFS = -26.0
QUIET_ECHO_DBFS = -36.0
NORMAL_ECHO_DBFS = -26.0
LOUD_ECHO_DBFS = -20.0


@dataclass(frozen=True)
class Room:
    name: str
    size_m: tuple[float, float, float]
    absorption: float  # energy absorbed per reflection, all walls alike
    speaker_m: tuple[float, float, float]
    microphone_m: tuple[float, float, float]
    noise_dbfs: float  # the room's own background at the microphone

    @property
    def distance_m(self) -> float:
        return float(np.linalg.norm(np.subtract(self.speaker_m, self.microphone_m)))


# A kiosk has its speaker a hand's width from the microphone; the last room is the hard case, a
# speaker mounted 1.7 m away in a reverberant hall (reverberation time about 1 s).
ROOMS = (
    Room("kiosk booth", (2.5, 2.0, 2.4), 0.45, (1.2, 1.0, 1.3), (1.2, 1.15, 1.45), -55.0),
    Room("office", (5.0, 4.0, 3.0), 0.25, (2.0, 2.0, 1.2), (2.5, 2.3, 1.3), -50.0),
    Room("shop floor kiosk", (12.0, 9.0, 5.0), 0.12, (4.0, 3.0, 1.5), (4.0, 3.25, 1.6), -42.0),
    Room("shop floor, speaker 1.7 m", (12.0, 9.0, 5.0), 0.12, (4.0, 3.0, 1.5), (5.5, 3.8, 1.6), -42.0),
)
NEAR_ROOMS = ROOMS[:3]


@functools.lru_cache(maxsize=8)
def impulse_response(room: Room) -> np.ndarray:
    """The room's impulse response from the speaker to the microphone (direct path included)."""
    import pyroomacoustics as pra

    shoebox = pra.ShoeBox(
        list(room.size_m),
        fs=SAMPLE_RATE_HZ,
        materials=pra.Material(room.absorption),
        max_order=17,
        use_rand_ism=False,
    )
    shoebox.add_source(list(room.speaker_m))
    shoebox.add_microphone(list(room.microphone_m))
    shoebox.compute_rir()
    rir = np.asarray(shoebox.rir[0][0], dtype=np.float64)
    return (rir / np.max(np.abs(rir))).astype(np.float32)


def active_rms(audio: np.ndarray, *, block: int = 320) -> float:
    """RMS over the 20 ms blocks within 30 dB of the loudest: the level of the voice, not the pauses."""
    usable = len(audio) // block * block
    if usable == 0:
        return 0.0
    power = np.mean(np.square(audio[:usable].reshape(-1, block)), axis=1)
    voiced = power[power > power.max() * 1e-3]
    return float(np.sqrt(np.mean(voiced)))


def at_level(audio: np.ndarray, dbfs: float) -> np.ndarray:
    rms = active_rms(audio)
    if rms == 0.0:
        return audio.astype(np.float32)
    return (audio * (10 ** (dbfs / 20) / rms)).astype(np.float32)


def echo(played: np.ndarray, room: Room, *, delay_s: float, level_dbfs: float) -> np.ndarray:
    """What the microphone hears of ``played`` (16 kHz): through the room, ``delay_s`` later (the
    device's own audio path; the air's is in the impulse response), at ``level_dbfs``; as long as
    ``played``."""
    from scipy.signal import fftconvolve

    wet = fftconvolve(played, impulse_response(room))[: len(played)]
    delay = round(delay_s * SAMPLE_RATE_HZ)
    delayed = np.concatenate([np.zeros(delay, dtype=np.float32), wet])[: len(played)]
    gain = 10 ** (level_dbfs / 20) / max(active_rms(wet), 1e-9)
    return (delayed * gain).astype(np.float32)


def noise_bed(noise: np.ndarray, samples: int, dbfs: float) -> np.ndarray:
    """``noise`` looped to ``samples`` at ``dbfs`` (plain RMS: noise has no pauses to leave out)."""
    reps = int(np.ceil(samples / max(len(noise), 1)))
    bed = np.tile(noise, reps)[:samples].astype(np.float64)
    rms = float(np.sqrt(np.mean(np.square(bed)))) or 1.0
    return (bed * (10 ** (dbfs / 20) / rms)).astype(np.float32)
