"""What a canceller learnt of a room (its linear filter: the echo path from the speaker to the
microphone), kept in a file so that a later stream starts from it instead of from silence.

A fresh filter needs seconds of the reply to learn the room, and while it learns, a person's short
word over the first reply can be lost (docs/turn-taking.md). A kiosk's speaker and microphone do not
move between starts, so the filter learnt before a restart is the right start after it; the stream
goes on learning from there, so a moved speaker is learnt again as from silence.

The file is numpy's ``.npz`` (no pickles): ``weights`` and ``meta``, a JSON object with the format,
the filter's shape and the ``key`` it was learnt under (the devices and the echo delay): a file
learnt under another key is not used.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.aec.linear import BLOCK, PARTITIONS, REFERENCE_FLOOR
from engines.audio import SAMPLE_RATE_HZ
from engines.setting_files import ECHO_ROOM, read_setting_file

FORMAT = 1
# How far the echo may have moved against its reference since the room was kept: each start measures
# the speaker's and the microphone's latencies anew (the playback timeline, the capture clock), and
# a filter moved by one sample (62 us) already loses most of what it cancelled.
MAX_LAG_S = 0.01
ALIGN_S = 0.25  # seconds of playback a new stream hears before it places the kept filter
# Seconds of playback a stream with no usable kept room hears before it solves for the room, when
# solving is on: from 0.25 s the solution did not hold beyond it; from 0.5 s it left the echo of the
# next 1.5 s 13-15 dB down in the booth and office, where the adaptive filter alone was at 7 dB. It is
# OFF (empty) as shipped: a filter that fits its half second can still leave 4 dB beyond it, and the
# linear ear trusting it once paused a reply for its own echo (docs/echo-cancellation.md).
SOLVE_AT_S: tuple[float, ...] = ()
SOLVE_TRIED_AT_S: tuple[float, ...] = (0.5, 1.0)  # what bench aec and bench interruptions measure
REGULARIZATION = 0.002  # of the reference's power, added to it: speech leaves bands nearly empty
HOLD_OUT_S = 0.1  # of the record, to judge a solution on echo it was not solved from
META_MAX_BYTES = 64 * 1024  # the JSON of the kept room's format, shape and key (a few hundred bytes)
MIN_FIT_DB = 10.0  # the kept filter, placed, must leave the echo this far down to be used
_FINE_STEPS = np.arange(-0.5, 0.51, 0.1)  # samples around the best whole-sample lag
GAIN_RANGE = (0.1, 10.0)  # the echo's level against the kept filter's: the volume turned -20..+20 dB


@dataclass(frozen=True)
class EchoRoom:
    """A linear canceller's filter (``PARTITIONS`` x ``BLOCK + 1`` complex bins) and how far below
    the microphone it left the echo when it was taken (``cancelled_db``)."""

    weights: np.ndarray
    cancelled_db: float
    learnt_at: float = 0.0  # Unix time


class RoomNotUsable(Exception):
    """A kept room that cannot be used: the reason names the file and what to do."""


def save_room(path: Path, room: EchoRoom, key: dict[str, Any]) -> None:
    """Write ``room`` to ``path`` atomically (a crash leaves the old file or the new one, never half)."""
    meta = {
        "format": FORMAT,
        "shape": list(room.weights.shape),
        "cancelled_db": round(room.cancelled_db, 2),
        "learnt_at": room.learnt_at or time.time(),
        "key": key,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as out:
        np.savez(out, weights=room.weights.astype(np.complex128), meta=np.array(json.dumps(meta)))
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)


def load_room(path: Path, key: dict[str, Any]) -> EchoRoom:
    """The room kept in ``path`` when it was learnt under ``key``; else ``RoomNotUsable`` says why."""
    try:
        data = read_setting_file(path, ECHO_ROOM)
    except FileNotFoundError as err:
        raise RoomNotUsable(
            f"{path} does not exist yet (it is written once the canceller has learnt the room)"
        ) from err
    except OSError as err:  # SettingFileError too: a pipe, a device, a file far too large
        raise RoomNotUsable(
            f"{path} cannot be used ({err}); it is replaced once the room is learnt again"
        ) from err
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            meta = json.loads(str(_member(archive, "meta", shape=(), kind="U", max_bytes=META_MAX_BYTES)))
            weights = _member(archive, "weights", shape=(PARTITIONS, BLOCK + 1), kind="c", max_bytes=None)
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, MemoryError) as err:
        raise RoomNotUsable(
            f"{path} is not a room the canceller kept ({err}); it is replaced once the room is learnt again"
        ) from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RoomNotUsable(
            f"{path} has format {meta.get('format') if isinstance(meta, dict) else meta!r}, not {FORMAT}"
        )
    expected = (PARTITIONS, BLOCK + 1)
    if weights.shape != expected or weights.dtype != np.complex128 or not np.all(np.isfinite(weights)):
        raise RoomNotUsable(
            f"{path} holds a filter of shape {weights.shape} {weights.dtype}, not {expected} finite complex128"
        )
    if meta.get("key") != key:
        raise RoomNotUsable(f"{path} was learnt with {meta.get('key')}, not with {key}")
    return EchoRoom(
        weights=weights,
        cancelled_db=float(meta.get("cancelled_db", 0.0)),
        learnt_at=float(meta.get("learnt_at", 0.0)),
    )


def _member(
    archive: zipfile.ZipFile, name: str, *, shape: tuple[int, ...], kind: str, max_bytes: int | None
) -> np.ndarray:
    """The array ``name`` of an .npz archive, its shape and type checked from the .npy header before
    its data is read: a file declaring gigabytes is refused before any of them is made."""
    info = archive.getinfo(f"{name}.npy")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            declared, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        else:
            declared, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        if declared != shape or dtype.kind != kind or dtype.hasobject:
            raise ValueError(f"it holds {name} of shape {declared} {dtype}, not {shape} of kind {kind!r}")
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if max_bytes is not None and size > max_bytes:
            raise ValueError(f"{name} declares {size:,} bytes, more than the {max_bytes:,} it may")
        data = member.read(size)
    if len(data) != size:
        raise ValueError(f"{name} holds {len(data):,} of its {size:,} bytes")
    array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return array.copy()


@dataclass(frozen=True)
class Fit:
    """A kept filter placed on a new stream's first echo: its weights there, how far it moved
    (samples; positive: the echo now comes later), how much louder the echo is now, and how far
    below the echo it leaves it. Or a filter solved from that echo (``kept`` False; no lag, no gain)."""

    weights: np.ndarray
    lag: float
    gain: float
    cancelled_db: float
    kept: bool = True  # False: solved from the stream's own first echo (``solve_room``)

    @property
    def used(self) -> bool:
        """Whether it cancels enough (``MIN_FIT_DB``) for the stream to go on from it."""
        return self.cancelled_db >= MIN_FIT_DB


def _echo_samples(reference: np.ndarray, taps: int) -> np.ndarray:
    """Where the microphone can hold the echo of what played (a block of it, or up to a filter's
    length after), and the reference's whole history is known: not the person's question before the
    reply began, which no filter predicts."""
    blocks = len(reference) // BLOCK
    playing = np.mean(np.square(reference[: blocks * BLOCK].reshape(blocks, BLOCK)), axis=1) > REFERENCE_FLOOR
    partitions = taps // BLOCK
    after = np.convolve(playing.astype(np.float64), np.ones(partitions))[:blocks] > 0
    samples = np.zeros(len(reference), dtype=bool)
    samples[: blocks * BLOCK] = np.repeat(after, BLOCK)
    samples[:taps] = False
    return samples


def impulse_response(weights: np.ndarray) -> np.ndarray:
    """The filter in time: ``PARTITIONS x BLOCK`` taps (each partition's spectrum holds its taps
    in its first half, as the canceller constrains it)."""
    return np.fft.irfft(weights, axis=1)[:, :BLOCK].reshape(-1)


def weights_of(response: np.ndarray) -> np.ndarray:
    parts = response.reshape(-1, BLOCK)
    return np.fft.rfft(np.concatenate([parts, np.zeros_like(parts)], axis=1), axis=1)


def fit_room(room: EchoRoom, capture: np.ndarray, reference: np.ndarray) -> Fit:
    """Place ``room``'s filter on what a new stream heard (``capture``, and the aligned
    ``reference`` it played, from the stream's start): the lag that best predicts the echo, to a
    tenth of a sample, and what the filter leaves there."""
    response = impulse_response(room.weights)
    taps = len(response)
    size = 1 << int(np.ceil(np.log2(len(reference) + taps)))
    reference_spectrum = np.fft.rfft(reference, size)
    judged = _echo_samples(reference, taps)
    heard = capture[judged]
    echo_spectrum = reference_spectrum * np.fft.rfft(response, size)
    turns = -2.0 * np.pi * np.arange(size // 2 + 1) / size  # a lag of one sample, per bin

    def predicted(lag: float) -> np.ndarray:
        return np.fft.irfft(echo_spectrum * np.exp(1j * turns * lag), size)[: len(capture)][judged]

    echo = predicted(0.0)
    max_lag = round(MAX_LAG_S * SAMPLE_RATE_HZ)
    correlation = np.fft.irfft(np.fft.rfft(heard, size) * np.conj(np.fft.rfft(echo, size)), size)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    values = np.concatenate([correlation[: max_lag + 1], correlation[size - max_lag :]])
    # Voiced speech correlates with itself a pitch period away: the best three peaks are tried.
    candidates = [int(lags[i]) for i in np.argsort(values)[::-1][:3]]
    energy = float(np.sum(np.square(heard))) + 1e-12

    def left_at(lag: float) -> tuple[float, float]:
        """What the filter leaves at ``lag``, and its gain there: the speaker may have been turned
        up or down since, so the filter is scaled to fit too."""
        echo = predicted(lag)
        # Sums, not np.dot: BLAS's threads wait for cores the session is busy with.
        gain = float(np.clip(np.sum(heard * echo) / (np.sum(echo * echo) + 1e-12), *GAIN_RANGE))
        return float(np.sum(np.square(heard - gain * echo))), gain

    whole = min(candidates, key=lambda lag: left_at(float(lag))[0])
    best_left, best_gain, best_lag = float("inf"), 1.0, float(whole)
    for lag in whole + _FINE_STEPS:
        left, gain = left_at(float(lag))
        if left < best_left:
            best_left, best_gain, best_lag = left, gain, float(lag)
    size_h = 2 * taps
    spectrum = np.fft.rfft(response, size_h) * np.exp(-2j * np.pi * np.arange(taps + 1) * best_lag / size_h)
    moved = np.fft.irfft(spectrum, size_h)[:taps] * best_gain
    return Fit(
        weights=weights_of(moved),
        lag=best_lag,
        gain=best_gain,
        cancelled_db=_db(energy, best_left),
    )


def solve_room(capture: np.ndarray, reference: np.ndarray, learnt: np.ndarray) -> Fit | None:
    """The room from what a new stream heard (``capture``, and the aligned ``reference`` it
    played): the filter that predicts the echo best in the least-squares sense (the Wiener
    solution, from the reference's autocorrelation and its correlation with the echo). None where
    it does no better than ``learnt`` (the adaptive filter's weights so far).

    Half a second of a reply is too little for the adaptive filter, which takes seconds, but enough
    to solve for the room at once (``SOLVE_AT_S``). A filter of 2,560 taps fits any half second
    well, so it is judged on echo it was not solved from: the record less its last ``HOLD_OUT_S``
    is solved, and that solution judged on the last ``HOLD_OUT_S``; the filter used is then solved
    from the whole record."""
    taps = PARTITIONS * BLOCK
    judged = _echo_samples(reference, taps)
    held = min(round(HOLD_OUT_S * SAMPLE_RATE_HZ), len(reference) // 2)
    first = len(reference) - held
    trial = _wiener(capture[:first], reference[:first], judged[:first])
    if trial is None:
        return None
    held_out = judged.copy()
    held_out[:first] = False
    heard = np.where(held_out, capture, 0.0)
    energy = float(np.sum(np.square(heard)))
    if energy <= 0.0:  # nothing echoed in the held-out part
        return None
    left = _left(heard, reference, trial, held_out)
    if left >= _left(heard, reference, impulse_response(learnt), held_out):
        return None
    solved = _wiener(capture, reference, judged)
    if solved is None:
        return None
    return Fit(weights=weights_of(solved), lag=0.0, gain=1.0, cancelled_db=_db(energy, left), kept=False)


def _wiener(capture: np.ndarray, reference: np.ndarray, judged: np.ndarray) -> np.ndarray | None:
    """The least-squares filter from ``reference`` to the ``judged`` samples of ``capture``; None
    where nothing played or the reference is too narrow to solve from, regularized or not."""
    taps = PARTITIONS * BLOCK
    heard = np.where(judged, capture, 0.0)
    size = 1 << int(np.ceil(np.log2(len(reference) + taps)))
    reference_spectrum = np.fft.rfft(reference, size)
    autocorrelation = np.fft.irfft(np.abs(reference_spectrum) ** 2, size)[:taps]
    crosscorrelation = np.fft.irfft(np.fft.rfft(heard, size) * np.conj(reference_spectrum), size)[:taps]
    autocorrelation[0] *= 1.0 + REGULARIZATION
    if autocorrelation[0] <= 0.0:  # nothing played
        return None
    try:
        solved = solve_toeplitz(autocorrelation, crosscorrelation)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(solved)):
        return None
    # The correlations run over the whole record, the heard samples over less of it (not before the
    # record's first filter length, nor past its end): the solution comes out short by about that
    # share (16-32%, 10-16 dB of cancellation), and is scaled back to fit the echo heard.
    echo = _predicted(reference, solved, judged)
    return solved * float(np.sum(heard * echo) / (np.sum(echo * echo) + 1e-12))


def _predicted(reference: np.ndarray, response: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """The echo ``response`` predicts from ``reference``, where ``judged``."""
    size = 1 << int(np.ceil(np.log2(len(reference) + len(response))))
    echo = np.fft.irfft(np.fft.rfft(reference, size) * np.fft.rfft(response, size), size)[: len(reference)]
    return np.where(judged, echo, 0.0)


def _left(heard: np.ndarray, reference: np.ndarray, response: np.ndarray, judged: np.ndarray) -> float:
    """The energy of the echo ``response`` leaves of ``heard``."""
    return float(np.sum(np.square(heard - _predicted(reference, response, judged))))


def solve_toeplitz(first: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``x`` with ``T x = right``, ``T`` the symmetric Toeplitz matrix whose first column is
    ``first`` (Levinson's recursion, O(n^2): 20-35 ms for the filter's 2,560 taps). numpy only: the
    appliance does not carry scipy."""
    first, right = np.asarray(first, dtype=np.float64), np.asarray(right, dtype=np.float64)
    forward = np.array([1.0 / first[0]])
    solution = np.array([right[0] / first[0]])
    for k in range(1, len(right)):
        lags = first[k:0:-1]
        reflection = float(lags @ forward)
        scale = 1.0 - reflection * reflection
        if not scale > 0.0:
            raise np.linalg.LinAlgError("the reference's autocorrelation is not positive definite")
        forward = (np.append(forward, 0.0) - reflection * np.append(0.0, forward[::-1])) / scale
        solution = np.append(solution, 0.0) + (right[k] - float(lags @ solution)) * forward[::-1]
    return solution


def _db(energy: float, left: float) -> float:
    return 10.0 * float(np.log10(energy / (left + 1e-12)))
