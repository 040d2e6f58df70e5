"""The echo benchmark's room and canceller: a reply played into a simulated room, the canceller's
output, and the measures taken of it (ERLE, convergence, the delay found)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.audio.echo import CONVERGE_S
from bench import rooms

FRAME = 512
FRAME_S = FRAME / rooms.SAMPLE_RATE_HZ
DELAYS_S = (0.02, 0.05, 0.08, 0.12)
LEVELS = {"quiet": rooms.QUIET_ECHO_DBFS, "normal": rooms.NORMAL_ECHO_DBFS, "loud": rooms.LOUD_ECHO_DBFS}
DETECT_WITHIN_S = 0.3
BARGE_IN_AT_S = 1.5  # into the reply
STOP_LAG_S = 0.064  # the player's lead: what is still heard after a barge-in flushes the speaker
REPLIES = (
    "The canteen is open from half past eleven to two, and the menu is on the board by the entrance.",
    "Line three stopped at ten past nine for a tool change. It should be running again within the hour.",
    "First aid kits are next to every fire exit, and the nearest defibrillator is at reception.",
    "Visitors park in the north car park. Please sign in at the front desk and wear your badge at all times.",
    "The torque for the M8 flange bolts is twenty five newton metres, tightened in a cross pattern.",
    "Your shift starts at six tomorrow. The bus leaves the station at twenty past five.",
    "I can help with opening hours, directions, safety questions and the status of the production lines.",
    "Platform two is closed for maintenance today, so trains to the city leave from platform four.",
)


@dataclass
class Bench:
    """The engines and the audio every room is measured with."""

    vad: Any
    transcribe: Callable[[np.ndarray], str]
    cancellers: dict[str, Any]  # name -> engine with stream()
    replies: list[np.ndarray]
    people: list[tuple[np.ndarray, str]]
    noise: np.ndarray
    params: Any  # the endpointer's
    # the linear ear's settings measured, by a label for the condition's name ("": as shipped)
    ears: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}})


def speech_starts(
    vad: Any,
    audio: np.ndarray,
    threshold: float,
    params: Any,
    *,
    linear: Linear | None = None,
    learning_s: float = 0.0,
    ear_settings: dict[str, Any] | None = None,
    voiced_from: list[float] | None = None,
) -> list[Any]:
    """The endpointer's SPEECH_START events over ``audio`` (``time_s``: when it fired;
    ``speech_start_s``: the first voiced frame); with ``linear``, the session's linear ear hears its
    output too, as while a reply plays, and alone for the first ``learning_s`` (the canceller has not
    yet heard ``CONVERGE_S`` of playback: the session does not hear AEC3's output). ``ear_settings``: the
    ear's settings where not as shipped (``EAR_VARIANTS``). ``voiced_from`` gets the time of each
    voiced frame after one that was not: where a session pauses a playing reply."""
    from appliance.pipeline.echo_gate import LINEAR_THRESHOLD
    from appliance.pipeline.linear_ear import LinearEar
    from engines.audio import power
    from engines.vad.endpointer import Endpointer, EventKind

    stream = vad.stream()
    endpointer = Endpointer(params)
    endpointer.threshold = threshold
    ear, ear_stream = LinearEar(LINEAR_THRESHOLD, **(ear_settings or {})), vad.stream()
    starts = []
    was_voiced = False
    for index in range(len(audio) // FRAME):
        window = slice(index * FRAME, (index + 1) * FRAME)
        probability = stream.probability(audio[window])
        if index * FRAME_S < learning_s:
            probability = 0.0
        if linear is not None:
            heard = ear_stream.probability(linear.linear[window])
            new_filter = index in linear.new_filter
            if ear.hears(
                heard, power(linear.linear[window]), power(linear.echo[window]), new_filter=new_filter
            ):
                probability = max(probability, heard)
        voiced = probability >= endpointer.threshold
        if voiced and not was_voiced and voiced_from is not None:
            voiced_from.append(index * FRAME_S)
        was_voiced = voiced
        starts += [
            e for e in endpointer.feed(float(probability), FRAME_S) if e.kind is EventKind.SPEECH_START
        ]
    return starts


@dataclass(frozen=True)
class Linear:
    """The linear canceller's output and the echo it took out, for the linear ear, and the frames
    in which it went on from another filter (the room kept, placed, or solved)."""

    linear: np.ndarray
    echo: np.ndarray
    new_filter: frozenset[int] = frozenset()


def cancel(
    engine: Any, mic: np.ndarray, played: np.ndarray, reference_delay_s: float, *, room: Any = None
) -> tuple[np.ndarray, Linear, list[float]]:
    """The canceller's outputs, suppressed (for the VAD) and linear (for Whisper and the linear
    ear), aligned back by its block and as long as ``mic``, and the thread time of each 10 ms block;
    ``room``: a room kept before to start the stream from (``engines.aec.EchoRoom``)."""
    from engines.aec import BLOCK_SAMPLES

    shift = round(reference_delay_s * rooms.SAMPLE_RATE_HZ)
    reference = np.concatenate([np.zeros(shift, dtype=np.float32), played])[: len(mic)]
    stream = engine.stream(room) if room is not None else engine.stream()
    suppressed, linear, echo, costs = [], [], [], []
    fit, new_filter = None, set[int]()
    for index in range(len(mic) // FRAME):
        window = slice(index * FRAME, (index + 1) * FRAME)
        started = time.thread_time()
        out = stream.process(mic[window], reference[window])
        costs.append((time.thread_time() - started) * BLOCK_SAMPLES / FRAME)
        if stream.fit is not fit:
            fit = stream.fit
            if fit.used and not fit.kept and not new_filter:  # the first room solved, as the session's source
                new_filter.add(index)
        suppressed.append(out.suppressed)
        linear.append(out.linear)
        echo.append(out.echo)
    tail = np.zeros(BLOCK_SAMPLES, dtype=np.float32)
    return (
        np.concatenate([*suppressed, tail])[BLOCK_SAMPLES:],
        Linear(
            np.concatenate([*linear, tail])[BLOCK_SAMPLES:],
            np.concatenate([*echo, tail])[BLOCK_SAMPLES:],
            frozenset(new_filter),
        ),
        costs,
    )


def calibrated_delay_s(room: rooms.Room, delay_s: float) -> float:
    """What ``appliance calibrate`` finds in this room: its chirps through the same path."""
    from appliance.audio.calibrate import chirp, find_delays

    sweep = chirp()
    lead = np.zeros(8000, dtype=np.float32)
    played = np.concatenate([lead, sweep, np.zeros(24000, dtype=np.float32)])
    heard = rooms.echo(played, room, delay_s=delay_s, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    delays, _ = find_delays(heard, played, [len(lead) - 160])
    return delays[0] / 1000.0


def converged_at_s(played: np.ndarray, reference_delay_s: float) -> float:
    """When a new stream has learnt from ``CONVERGE_S`` of playback (``EchoCancelledSource.echo_converged``)."""
    from engines.aec.blocks import BLOCK_SAMPLES, REFERENCE_FLOOR

    blocks = len(played) // BLOCK_SAMPLES
    power = np.mean(np.square(played[: blocks * BLOCK_SAMPLES].reshape(blocks, BLOCK_SAMPLES)), axis=1)
    needed = round(CONVERGE_S * rooms.SAMPLE_RATE_HZ / BLOCK_SAMPLES)
    active = np.flatnonzero(power > REFERENCE_FLOOR)
    if len(active) < needed:
        return float("inf")
    return float((active[needed - 1] + 1) * BLOCK_SAMPLES / rooms.SAMPLE_RATE_HZ + reference_delay_s)


def erle_db(mic: np.ndarray, out: np.ndarray, settle_s: float = 2.0) -> float:
    """Echo return loss enhancement after ``settle_s``: the echo's power over what is left of it."""
    start = round(settle_s * rooms.SAMPLE_RATE_HZ)
    return float(10 * np.log10(np.sum(mic[start:] ** 2) / max(float(np.sum(out[start:] ** 2)), 1e-12)))


WITH_LINEAR_EAR = ("webrtc",)  # the cancellers also measured with the session's linear ear
EAR = ", linear ear"
REMEMBERED = ", room kept"  # the stream starts from the room a session before kept (audio.echo_room_file)
SOLVED = (
    ", room solved"  # a new stream solves for the room from its first echo (engines.aec.room, off as shipped)
)
FIRST_REPLY_AT_S = 1.0  # a person over a new session's first reply: while the canceller still learns
RESTART_MOVED_S = 0.0013  # the echo against its reference, from the start that kept the room to this one
GAP_S = 1.0  # silence between two replies
# The linear ear as it was before its rules for the room's noise and the frames its filter leaves
# as usual (appliance/pipeline/linear_ear.py).
EAR_VARIANTS: dict[str, dict[str, Any]] = {" (before)": {"unexplained_db": None, "noise_margin_db": None}}
WARM_UP = 1  # replies played before a barge-in case: the canceller of a session that has spoken before


@dataclass(frozen=True)
class EchoPath:
    """The microphone of one barge-in case: the reply's echo, the person and the noise, then the
    canceller (None: the raw microphone)."""

    room: rooms.Room
    level: str
    delay_s: float
    near: np.ndarray
    canceller: Any
    reference_delay_s: float

    def heard(self, played: np.ndarray) -> tuple[np.ndarray, Linear]:
        """What the VAD judges (AEC3's output) and what Whisper hears (the linear canceller's)."""
        mic = rooms.echo(played, self.room, delay_s=self.delay_s, level_dbfs=LEVELS[self.level]) + self.near
        if self.canceller is None:
            return mic, Linear(mic, np.zeros_like(mic))
        suppressed, linear, _ = cancel(self.canceller, mic, played, self.reference_delay_s)
        return suppressed, linear
