"""Any frame length in, 10 ms blocks to the cancellers, the same length out at a constant delay."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engines.aec.linear import REFERENCE_FLOOR, LinearCanceller
from engines.aec.room import ALIGN_S, SOLVE_AT_S, EchoRoom, Fit, fit_room, solve_room
from engines.audio import SAMPLE_RATE_HZ, power
from engines.errors import InputError

BLOCK_SAMPLES = 160  # 10 ms at 16 kHz: WebRTC's audio processing takes nothing else
FIT_BLOCKS = 100  # a stream places or solves the room from its last second (ALIGN_S, SOLVE_AT_S)

__all__ = ["BLOCK_SAMPLES", "REFERENCE_FLOOR", "BlockCanceller", "Cancelled", "to_int16"]


@dataclass(frozen=True)
class Cancelled:
    """One stretch of microphone audio without the echo, in two versions of equal length:
    ``suppressed`` (echo removed and what may remain of it turned down: for the VAD, which must not
    hear the reply) and ``linear`` (the echo path's estimate subtracted, nothing turned down: for
    Whisper and the turn detector, which must hear all of a person who speaks over the reply), and
    ``echo``, what the linear canceller took out of the microphone to make ``linear``."""

    suppressed: np.ndarray
    linear: np.ndarray
    echo: np.ndarray


class BlockCanceller:
    """Cuts capture and reference into blocks for ``process_block`` (int16 capture, int16 reference ->
    int16 capture without echo), runs the linear canceller beside it, and gives back exactly as many
    samples as it was given.

    The output starts with one block of silence, so it always lags the input by ``BLOCK_SAMPLES``: what
    is held back (input not yet a whole block) plus what is ready (processed, not yet returned) is
    always one block.
    """

    def __init__(
        self, process_block: Callable[[np.ndarray, np.ndarray], np.ndarray], *, room: EchoRoom | None = None
    ) -> None:
        self._process_block = process_block
        self._linear = LinearCanceller()
        # A room kept before is placed on this stream's own first echo (each start's latencies
        # differ), from what it records until then; without one that fits, the room is solved from
        # that echo. The linear canceller goes on from either.
        self._kept = room
        self._solves = list(SOLVE_AT_S)  # seconds of playback
        self._starting = room is not None or bool(self._solves)  # recording until placed or solved
        self._recorded: deque[np.ndarray] = deque(maxlen=FIT_BLOCKS)  # [capture, reference] blocks
        self._fit: Fit | None = None
        self._pending: np.ndarray = np.zeros((2, 0), dtype=np.float32)
        self._ready: np.ndarray = np.zeros((3, BLOCK_SAMPLES), dtype=np.float32)
        self._reference_blocks = 0  # blocks in which the reference played: what the filters learnt from

    def process(self, capture: np.ndarray, reference: np.ndarray) -> Cancelled:
        capture = np.asarray(capture, dtype=np.float32).reshape(-1)
        reference = np.asarray(reference, dtype=np.float32).reshape(-1)
        if capture.shape != reference.shape:
            raise InputError(
                f"capture and reference differ in length ({len(capture)} vs {len(reference)} samples)",
                fix="give the canceller the reference for exactly the captured samples",
            )
        pending = np.concatenate([self._pending, np.stack([capture, reference])], axis=1)
        blocks = pending.shape[1] // BLOCK_SAMPLES
        done = [self._ready]
        for index in range(blocks):
            block = pending[:, index * BLOCK_SAMPLES : (index + 1) * BLOCK_SAMPLES]
            done.append(self._run(block[0], block[1]))
        self._pending = pending[:, blocks * BLOCK_SAMPLES :]
        ready = np.concatenate(done, axis=1)
        self._ready = ready[:, len(capture) :]
        count = len(capture)
        return Cancelled(suppressed=ready[0, :count], linear=ready[1, :count], echo=ready[2, :count])

    def reference_heard_s(self) -> float:
        """Seconds of playback the cancellers have learnt from (the reference above -40 dBFS)."""
        return self._reference_blocks * BLOCK_SAMPLES / SAMPLE_RATE_HZ

    def _start_from_room(self, capture: np.ndarray, reference: np.ndarray) -> None:
        self._recorded.append(np.stack([capture, reference]).astype(np.float64))
        heard = self._reference_blocks * BLOCK_SAMPLES
        if heard < (ALIGN_S if self._kept is not None else self._solves[0]) * SAMPLE_RATE_HZ:
            return
        recorded = np.concatenate(list(self._recorded), axis=1)
        fit: Fit | None
        if self._kept is not None:
            placed = fit_room(self._kept, recorded[0], recorded[1])
            self._kept, fit = None, placed
            self._starting = not placed.used and bool(self._solves)  # then solved, where solving is on
        else:
            fit = solve_room(recorded[0], recorded[1], self._linear.weights)
            self._solves.pop(0)
            self._starting = bool(self._solves)
        if fit is not None:
            self._fit = fit
            if fit.used:
                self._linear.adopt(fit.weights)
        if not self._starting:
            self._recorded.clear()

    @property
    def fit(self) -> Fit | None:
        """Where the kept room was placed, or the room solved from the first echo, once it was."""
        return self._fit

    def room(self) -> EchoRoom | None:
        """What the linear canceller has learnt of the room, once it has heard echo alone."""
        cancelled = self._linear.cancelled_db()
        if cancelled is None:
            return None
        return EchoRoom(weights=self._linear.weights, cancelled_db=cancelled, learnt_at=time.time())

    def _run(self, capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
        out = self._process_block(to_int16(capture), to_int16(reference)).astype(np.float32) / 32768.0
        linear = self._linear.process(capture, reference, out).astype(np.float32)
        if power(reference) > REFERENCE_FLOOR:
            self._reference_blocks += 1
        if self._starting:
            self._start_from_room(capture, reference)
        return np.stack([out, linear, capture - linear])


def to_int16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)
