"""Echo cancellation in simulated rooms: the appliance's own Piper replies through a room (pyroomacoustics)
into its microphone, delayed 20-120 ms, with the room's noise, and people speaking over them.

    .venv/bin/python -m bench aec [--replies 8] [--people 10]

Per room and echo level (normal: the reply as loud as a person at the kiosk; loud: 6 dB louder), one
run compares, on the same signals:
- **aec**: the WebRTC canceller (``engines.aec``) fed the played audio as its reference, aligned by the
  delay a calibration (``appliance.audio.calibrate``'s chirps, through the same room) measured, then
  Silero VAD at the normal threshold (``vad.threshold``, 0.5);
- **raised**: no canceller, Silero at the raised threshold (0.85), the appliance's behaviour before;
- (for reference) **none**: no canceller, normal threshold;
- **aec, linear ear**: AEC3's output and, while a reply plays, the linear canceller's (the session's
  linear ear); **aec, room kept, linear ear**: the same, the stream starting from the room a session
  before kept (``audio.echo_room_file``; here learnt from the replies in the other order).

Until a stream has heard ``CONVERGE_S`` of playback the session does not hear AEC3's output, only the
linear ear (which trusts only a filter that already cancels): so too here, and a person speaking
``FIRST_REPLY_AT_S`` into a new session's first reply is heard only through it.

Figures: ERLE after the first 2 s (the echo alone, no noise: noise would bound the figure, not the
canceller); false barge-ins per minute of echo-only playback (speech starts by the endpointer's own
rule, ``endpointer.min_speech_ms``); the share of people detected within 300 ms of starting to speak
over a reply, and how long it took; WER of Whisper on what the turn would hear (the reply is stopped at
the detection, as the session does) against the clean recording's; canceller CPU per 10 ms block
(thread time). Writes ~/.cache/appliance/bench-results/aec-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from appliance.audio.echo import CONVERGE_S, LEAD_S
from bench import rooms
from bench.asr import DEFAULT_DATA, percentile, transcribed_speech

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

log = logging.getLogger("bench.aec")


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


def run_room(bench: Bench, room: rooms.Room, level: str, delay_s: float) -> dict[str, Any]:
    """The replies back to back, ``GAP_S`` apart, through one canceller stream (as one session's),
    ``delay_s`` late; then the barge-in cases."""
    from engines.asr.text import word_error_rate

    reference_delay_s = max(0.0, calibrated_delay_s(room, delay_s) - LEAD_S)
    result: dict[str, Any] = {
        "room": room.name,
        "level": level,
        "distance_m": round(room.distance_m, 2),
        "device_delay_ms": round(delay_s * 1000),
        "calibrated_delay_ms": round(1000 * (reference_delay_s + LEAD_S), 1),
    }
    gap = np.zeros(round(GAP_S * rooms.SAMPLE_RATE_HZ), dtype=np.float32)
    played = np.concatenate([part for reply in bench.replies for part in (reply, gap)])
    bounds = np.cumsum([0] + [len(reply) + len(gap) for reply in bench.replies]) / rooms.SAMPLE_RATE_HZ
    echo = rooms.echo(played, room, delay_s=delay_s, level_dbfs=LEVELS[level])
    mic = echo + rooms.noise_bed(bench.noise, len(echo), room.noise_dbfs)
    # name -> (the VAD's input, its threshold, the linear ear's input, the ear's settings, a canceller's)
    heard: dict[str, tuple[np.ndarray, float, Linear | None, dict[str, Any] | None, bool]] = {
        "raised": (mic, 0.85, None, None, False),
        "none": (mic, 0.5, None, None, False),
    }
    erle: dict[str, float] = {}
    costs: dict[str, list[float]] = {}
    for name, engine in bench.cancellers.items():
        suppressed, linear, _ = cancel(engine, echo, played, reference_delay_s)
        erle[name] = round(erle_db(echo, suppressed), 1)
        erle[f"{name} linear"] = round(erle_db(echo, linear.linear), 1)
        out, linear, costs[name] = cancel(engine, mic, played, reference_delay_s)
        heard[name] = (out, 0.5, None, None, True)
        if name in WITH_LINEAR_EAR:
            for label, ear in bench.ears.items():
                heard[f"{name}{EAR}{label}"] = (out, 0.5, linear, ear, True)
            kept = kept_room(engine, bench, room, level, delay_s, reference_delay_s)
            result["kept_room_db"] = None if kept is None else round(kept.cancelled_db, 1)
            result["first_reply_barge_in"] = first_reply_barge_ins(
                bench, room, level, delay_s, reference_delay_s, kept
            )
            out, linear, _ = cancel(engine, mic, played, reference_delay_s, room=kept)
            heard[f"{name}{REMEMBERED}{EAR}"] = (out, 0.5, linear, None, True)
    cut: dict[str, list[int]] = {}
    per_minute = {}
    paused: dict[str, int] = {}
    trusted_s = converged_at_s(played, reference_delay_s)
    playing = [
        (start, start + len(reply) / rooms.SAMPLE_RATE_HZ)
        for start, reply in zip(bounds[:-1], bench.replies, strict=True)
    ]
    for name, (signal, threshold, with_linear, ear_settings, canceller) in heard.items():
        voiced_from: list[float] = []
        starts = [
            e.time_s
            for e in speech_starts(
                bench.vad,
                signal,
                threshold,
                bench.params,
                linear=with_linear,
                learning_s=trusted_s if canceller else 0.0,
                ear_settings=ear_settings,
                voiced_from=voiced_from,
            )
        ]
        # Until the canceller converged the session hears only the linear ear, where there is one.
        if canceller and with_linear is None:
            starts = [t for t in starts if t >= trusted_s]
            voiced_from = [t for t in voiced_from if t >= trusted_s]
        paused[name] = sum(begin <= t < end for t in voiced_from for begin, end in playing)
        per_reply = np.histogram(starts, bins=bounds)[0]
        cut[name] = [int(i) for i in np.flatnonzero(per_reply)]
        per_minute[name] = round(len(starts) / (len(played) / rooms.SAMPLE_RATE_HZ / 60.0), 2)
    result["echo_only_s"] = round(len(played) / rooms.SAMPLE_RATE_HZ, 1)
    result["replies"] = len(bench.replies)
    result["false_barge_ins_per_min"] = per_minute
    # The session pauses a playing reply at its first voiced frame: each is a gap the listener hears.
    result["paused_by_own_echo_per_min"] = {
        k: round(n / (sum(end - begin for begin, end in playing) / 60.0), 2) for k, n in paused.items()
    }
    result["replies_cut_by_own_echo"] = {k: len(v) for k, v in cut.items()}
    result["first_reply_cut"] = {k: 0 in v for k, v in cut.items()}
    result["erle_db"] = erle
    result["cpu_ms_per_10ms"] = {
        k: {f"p{q}": round(percentile(v, q) * 1000, 3) for q in (50, 95, 99)} for k, v in costs.items()
    }
    result["barge_in"] = barge_ins(bench, room, level, delay_s, reference_delay_s)
    refs = [text for _, text in bench.people]
    clean = [bench.transcribe(audio) for audio, _ in bench.people]
    result["barge_in"]["wer"]["recording"] = round(word_error_rate(refs, clean), 3)
    return result


def barge_ins(
    bench: Bench, room: rooms.Room, level: str, delay_s: float, reference_delay_s: float
) -> dict[str, Any]:
    """Each person starts ``BARGE_IN_AT_S`` into a reply, after ``WARM_UP`` earlier replies on the
    same canceller stream. Their onset is where the endpointer puts the start of their speech with
    no reply playing; a condition detects them when its endpointer starts speech at or after that
    onset (less 50 ms). A start before it means the reply cut itself off on its own echo before the
    person spoke. Once detected, the reply stops (as the session stops it) and what the turn would
    transcribe, from 0.3 s before the onset, is heard without it."""
    from engines.asr.text import word_error_rate

    rate = rooms.SAMPLE_RATE_HZ
    # name -> (the canceller, the VAD's threshold, the linear ear's settings: None for no ear)
    conditions: dict[str, tuple[Any, float, dict[str, Any] | None]] = {
        name: (engine, 0.5, None) for name, engine in bench.cancellers.items()
    }
    conditions.update(
        {
            f"{name}{EAR}{label}": (bench.cancellers[name], 0.5, ear)
            for name in WITH_LINEAR_EAR
            for label, ear in bench.ears.items()
        }
    )
    conditions["raised"] = (None, 0.85, None)
    latency: dict[str, list[float | None]] = {name: [] for name in [*conditions, "no reply"]}
    self_cut = dict.fromkeys(conditions, 0)
    texts: dict[str, list[str]] = {name: [] for name in [*conditions, "no reply"]}
    gap = np.zeros(round(GAP_S * rate), dtype=np.float32)
    for index, (person, _text) in enumerate(bench.people):
        warm = [
            part
            for k in range(WARM_UP)
            for part in (bench.replies[(index + 1 + k) % len(bench.replies)], gap)
        ]
        reply = bench.replies[index % len(bench.replies)]
        reply_at = sum(len(part) for part in warm)
        at = reply_at + round(BARGE_IN_AT_S * rate)
        length = (max(reply_at + len(reply), at + len(person)) + rate) // FRAME * FRAME
        near = rooms.noise_bed(bench.noise, length, room.noise_dbfs)
        near[at : at + len(person)] += person
        alone = [e for e in speech_starts(bench.vad, near, 0.5, bench.params) if e.time_s >= reply_at / rate]
        if not alone:
            log.warning("person %d is not heard even without a reply; left out", index)
            continue
        onset, detected_alone = alone[0].speech_start_s, alone[0].time_s
        latency["no reply"].append(detected_alone - onset)
        window = slice(max(0, round((onset - 0.3) * rate)), at + len(person) + rate // 2)
        texts["no reply"].append(bench.transcribe(near[window]))
        played_full = np.zeros(length, dtype=np.float32)
        body = np.concatenate([*warm, reply])
        played_full[: len(body)] = body
        for name, (canceller, threshold, ear) in conditions.items():
            path = EchoPath(room, level, delay_s, near, canceller, reference_delay_s)
            suppressed, linear = path.heard(played_full)
            with_ear = ear is not None and canceller is not None
            starts = speech_starts(
                bench.vad,
                suppressed,
                threshold,
                bench.params,
                linear=linear if with_ear else None,
                ear_settings=ear,
            )
            during = [e.time_s for e in starts if e.time_s >= reply_at / rate]
            first = during[0] if during else None
            _note_detection(first, onset, latency[name], self_cut, name)
            played = played_full.copy()
            if first is not None:  # the session stops the reply; the turn hears the rest without it
                played[round((first + STOP_LAG_S) * rate) :] = 0.0
            suppressed, for_asr = path.heard(played)
            texts[name].append(bench.transcribe(for_asr.linear[window]))
            if canceller is not None and ear is None:
                texts.setdefault(f"{name} suppressed", []).append(bench.transcribe(suppressed[window]))
    refs = [text for _, text in bench.people][: len(texts["no reply"])]
    summary: dict[str, Any] = {
        "people": len(refs),
        "detected_within_300ms": {},
        "detect_ms": {},
        "cut_by_own_echo": self_cut,
        "wer": {},
        "transcripts": texts,
    }
    for name, times in latency.items():
        within, seen, summary["detect_ms"][name] = _detected(times)
        summary["detected_within_300ms"][name] = within
        summary["detect_ms"][name]["missed"] = len(times) - len(seen) - self_cut.get(name, 0)
    for name, heard_texts in texts.items():
        summary["wer"][name] = round(word_error_rate(refs, heard_texts), 3)
    return summary


def kept_room(
    engine: Any, bench: Bench, room: rooms.Room, level: str, delay_s: float, reference_delay_s: float
) -> Any:
    """What a session before kept of ``room`` (``audio.echo_room_file``): the replies in the other
    order through one stream, kept only when the daemon would keep it (``KEEP_DB``); else None. That
    start's latencies differed from this one's by ``RESTART_MOVED_S`` (its reference came that much
    later), which the new stream finds by itself (``engines.aec.room.fit_room``)."""
    from appliance.audio.echo_room import worth_keeping
    from engines.aec import BLOCK_SAMPLES

    gap = np.zeros(round(GAP_S * rooms.SAMPLE_RATE_HZ), dtype=np.float32)
    played = np.concatenate([part for reply in bench.replies[::-1] for part in (reply, gap)])
    mic = rooms.echo(played, room, delay_s=delay_s, level_dbfs=LEVELS[level])
    mic = mic + rooms.noise_bed(bench.noise, len(mic), room.noise_dbfs)
    shift = round((reference_delay_s + RESTART_MOVED_S) * rooms.SAMPLE_RATE_HZ)
    reference = np.concatenate([np.zeros(shift, dtype=np.float32), played])[: len(mic)]
    stream = engine.stream()
    for start in range(0, len(mic) - BLOCK_SAMPLES + 1, FRAME):
        stream.process(mic[start : start + FRAME], reference[start : start + FRAME])
    learnt = stream.room()
    return learnt if worth_keeping(learnt) else None


def first_reply_barge_ins(
    bench: Bench,
    room: rooms.Room,
    level: str,
    delay_s: float,
    reference_delay_s: float,
    kept: Any,
    at_s: float = FIRST_REPLY_AT_S,
) -> dict[str, Any]:
    """Each person starts ``at_s`` into a new session's first reply, while its canceller has not
    yet heard ``CONVERGE_S`` of playback: only the linear ear may hear them, starting from nothing
    (``webrtc, linear ear``: the adaptive filter alone, as shipped; ``SOLVED``: the room solved from
    the first echo) or from the room kept before. Detected as in ``barge_ins``."""
    rate = rooms.SAMPLE_RATE_HZ
    engine = bench.cancellers[WITH_LINEAR_EAR[0]]
    name = WITH_LINEAR_EAR[0]
    # name -> (the room kept, solving, the ear's settings)
    conditions: dict[str, tuple[Any, bool, dict[str, Any]]] = {}
    for label, ear in bench.ears.items():
        conditions[f"{name}{EAR}{label}"] = (None, False, ear)
        conditions[f"{name}{SOLVED}{EAR}{label}"] = (None, True, ear)
        conditions[f"{name}{REMEMBERED}{EAR}{label}"] = (kept, False, ear)
    latency: dict[str, list[float | None]] = {name: [] for name in conditions}
    self_cut = dict.fromkeys(conditions, 0)
    for index, (person, _text) in enumerate(bench.people):
        reply = bench.replies[index % len(bench.replies)]
        at = round(at_s * rate)
        length = (max(len(reply), at + len(person)) + rate) // FRAME * FRAME
        near = rooms.noise_bed(bench.noise, length, room.noise_dbfs)
        near[at : at + len(person)] += person
        alone = speech_starts(bench.vad, near, 0.5, bench.params)
        if not alone:
            continue
        onset = alone[0].speech_start_s
        played = np.zeros(length, dtype=np.float32)
        played[: len(reply)] = reply
        learning_s = converged_at_s(played, reference_delay_s)
        mic = rooms.echo(played, room, delay_s=delay_s, level_dbfs=LEVELS[level]) + near
        for name, (start_from, solving, ear) in conditions.items():
            with solving_rooms(solving):
                suppressed, linear, _ = cancel(engine, mic, played, reference_delay_s, room=start_from)
            starts = speech_starts(
                bench.vad,
                suppressed,
                0.5,
                bench.params,
                linear=linear,
                learning_s=learning_s,
                ear_settings=ear,
            )
            _note_detection(starts[0].time_s if starts else None, onset, latency[name], self_cut, name)
    summary: dict[str, Any] = {
        "at_s": at_s,
        "kept_room_db": None if kept is None else round(kept.cancelled_db, 1),
        "detected_within_300ms": {},
        "detected": {},
        "detect_ms": {},
        "cut_by_own_echo": self_cut,
    }
    for name, times in latency.items():
        within, seen, summary["detect_ms"][name] = _detected(times)
        summary["detected_within_300ms"][name] = within
        summary["detected"][name] = round(len(seen) / max(1, len(times)), 3)
    return summary


@contextlib.contextmanager
def solving_rooms(on: bool) -> Iterator[None]:
    """New streams made within solve for the room from their first echo (``SOLVE_TRIED_AT_S``), or
    not (as shipped)."""
    import engines.aec.blocks as blocks
    from engines.aec.room import SOLVE_TRIED_AT_S

    shipped = blocks.SOLVE_AT_S
    blocks.SOLVE_AT_S = SOLVE_TRIED_AT_S if on else ()
    try:
        yield
    finally:
        blocks.SOLVE_AT_S = shipped


def _note_detection(
    first: float | None, onset: float, latency: list[float | None], self_cut: dict[str, int], name: str
) -> None:
    """One person: how long after their onset the condition ``name`` started speech (None: never),
    or None and one more reply cut by its own echo when it started before they spoke."""
    if first is not None and first < onset - 0.05:
        self_cut[name] += 1
        latency.append(None)
    else:
        latency.append(None if first is None else first - onset)


def _detected(times: list[float | None]) -> tuple[float, list[float], dict[str, Any]]:
    """The share detected within ``DETECT_WITHIN_S``, the detection times (ms) and their p50/p95."""
    seen = [t * 1000 for t in times if t is not None]
    within = round(sum(t is not None and t <= DETECT_WITHIN_S for t in times) / max(1, len(times)), 3)
    return within, seen, {"p50": round(percentile(seen, 50), 0), "p95": round(percentile(seen, 95), 0)}


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


def _people(data_dir: Path, count: int) -> list[tuple[np.ndarray, str]]:
    from engines.audio import load_audio_16k

    cases = [c for c in transcribed_speech(data_dir) if "telephony" not in str(c.path)]
    cases = sorted(cases, key=lambda c: c.path.name)[:count]
    return [(rooms.at_level(load_audio_16k(c.path), rooms.SPEECH_DBFS), c.reference) for c in cases]


def _aec_audio_processing() -> Any | None:
    """The other candidate (``pip install aec-audio-processing``), for the comparison only."""
    try:
        from aec_audio_processing import AudioProcessor
    except ImportError:
        return None
    from engines.aec import BlockCanceller

    class Engine:
        def stream(self) -> BlockCanceller:
            processor = AudioProcessor(enable_aec=True, enable_ns=False, enable_agc=False, enable_vad=False)
            processor.set_stream_format(16000, 1)
            processor.set_reverse_stream_format(16000, 1)

            def block(capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
                processor.process_reverse_stream(reference.tobytes())
                return np.frombuffer(processor.process_stream(capture.tobytes()), dtype=np.int16)

            return BlockCanceller(block)

    return Engine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench aec", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--replies", type=int, default=len(REPLIES), help="Piper replies per room (echo only)"
    )
    parser.add_argument("--people", type=int, default=10, help="recordings speaking over a reply, per room")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rooms", default="", help="only these rooms, by number from 0 (e.g. 0,1)")
    parser.add_argument(
        "--ear-variants",
        action="store_true",
        help="also measure the linear ear as it was before its rules for noise and usual cancellation (EAR_VARIANTS)",
    )
    parser.add_argument(
        "--first-reply-at",
        default="",
        help="only the first-reply measure, people starting at these seconds into it (e.g. 1.0,1.5)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from appliance.config import load_settings, override
    from appliance.engine_set import (
        asr_engine,
        echo_canceller,
        open_bundle,
        tts_engine,
        vad_engine,
    )
    from bench.machine import write_result
    from engines.audio import load_audio_16k

    settings = load_settings(None)
    bundle = open_bundle(settings)
    tts = tts_engine(settings, bundle)
    tts.load()
    replies = [
        np.concatenate(list(tts.synthesize(text, sample_rate_hz=16000))) for text in REPLIES[: args.replies]
    ]
    tts.close()
    replies = [rooms.at_level(reply[: len(reply) // FRAME * FRAME], -20.0) for reply in replies]
    vad = vad_engine(settings, bundle)
    vad.load()
    asr = asr_engine(settings, bundle)
    asr.load()
    cancellers: dict[str, Any] = {}
    for name, ns in (("webrtc", False), ("webrtc+ns", True)):
        engine = echo_canceller(override(settings, audio={"echo_noise_suppression": ns}), microphone=True)
        assert engine is not None
        engine.load()
        cancellers[name] = engine
    other = _aec_audio_processing()
    if other is not None:
        cancellers["aec-audio-processing"] = other
    bench = Bench(
        vad=vad,
        transcribe=lambda audio: str(asr.transcribe(audio).text),
        cancellers=cancellers,
        replies=replies,
        people=_people(args.data, args.people),
        noise=load_audio_16k(args.data / "vad/noise/speechbrain_noise1.wav"),
        params=override(settings, endpointer={"mode": "silence"}).endpointer,
        ears={"": {}, **(EAR_VARIANTS if args.ear_variants else {})},
    )
    if args.first_reply_at:
        return first_replies(bench, [float(at) for at in args.first_reply_at.split(",")])
    results: list[dict[str, Any]] = []
    wanted = {int(k) for k in args.rooms.split(",")} if args.rooms else set(range(len(rooms.ROOMS)))
    for row, (room, level) in enumerate(itertools.product(rooms.ROOMS, LEVELS)):
        if rooms.ROOMS.index(room) in wanted:
            delay_s = DELAYS_S[row % len(DELAYS_S)]
            log.info("%s, %s echo, %.0f ms late", room.name, level, delay_s * 1000)
            results.append(run_room(bench, room, level, delay_s))
            _print(results[-1])
    write_result(
        "aec",
        {
            "replies": len(replies),
            "people": len(bench.people),
            "reply_s": round(sum(len(r) for r in replies) / 16000, 1),
        },
        {"rows": results, "cancellers": list(cancellers)},
    )
    return 0


def first_replies(bench: Bench, moments: list[float]) -> int:
    """``--first-reply-at``: the first-reply measure alone, at each moment, in every room and level
    (the rows' delays as in the full run)."""
    from bench.machine import write_result

    engine = bench.cancellers[WITH_LINEAR_EAR[0]]
    rows: list[dict[str, Any]] = []
    for room in rooms.ROOMS:
        for level in LEVELS:
            delay_s = DELAYS_S[len(rows) % len(DELAYS_S)]
            reference_delay_s = max(0.0, calibrated_delay_s(room, delay_s) - LEAD_S)
            kept = kept_room(engine, bench, room, level, delay_s, reference_delay_s)
            row: dict[str, Any] = {"room": room.name, "level": level, "moments": []}
            for at_s in moments:
                first = first_reply_barge_ins(bench, room, level, delay_s, reference_delay_s, kept, at_s)
                row["moments"].append(first)
                print(
                    f"{room.name}, {level}, {at_s} s in (room kept: {first['kept_room_db']} dB): within 300 ms "
                    f"{first['detected_within_300ms']}, cut by own echo {first['cut_by_own_echo']}",
                    flush=True,
                )
            rows.append(row)
    write_result("aec-first-reply", {"people": len(bench.people), "moments": moments}, {"rows": rows})
    return 0


def _print(row: dict[str, Any]) -> None:
    barge = row["barge_in"]
    replies = row["replies"]
    print(
        f"\n{row['room']} ({row['distance_m']} m), {row['level']} echo, {row['device_delay_ms']} ms late "
        f"(calibrated {row['calibrated_delay_ms']} ms); first reply cut: {row['first_reply_cut']}"
    )
    print(
        f"  {'':34} {'ERLE dB':>8} {'false/min':>9} {'paused/min':>10} {'cut/' + str(replies):>6} {'<=300ms':>8} "
        f"{'detect p50/p95':>15} {'WER':>6} {'CPU ms/10ms p50/p99':>20}"
    )
    ears = [name for name in row["false_barge_ins_per_min"] if EAR in name]
    for name in [*row["erle_db"], *ears, "raised", "none", "no reply"]:
        erle = row["erle_db"].get(name, "-")
        within = barge["detected_within_300ms"].get(name, "-")
        detect = barge["detect_ms"].get(name)
        detect_text = f"{detect['p50']:.0f}/{detect['p95']:.0f}" if detect else "-"
        wer = barge["wer"].get(name, "-")
        cpu = row["cpu_ms_per_10ms"].get(name)
        cpu_text = f"{cpu['p50']}/{cpu['p99']}" if cpu else "-"
        false = row["false_barge_ins_per_min"].get(name, "-")
        cut = row["replies_cut_by_own_echo"].get(name, "-")
        paused = row["paused_by_own_echo_per_min"].get(name, "-")
        print(
            f"  {name:34} {erle!s:>8} {false!s:>9} {paused!s:>10} {cut!s:>6} {within!s:>8} {detect_text:>15} {wer!s:>6} "
            f"{cpu_text:>20}"
        )
    print(
        f"  the recordings alone: WER {barge['wer']['recording']}; cut by own echo before the person: {barge['cut_by_own_echo']}"
    )
    first = row["first_reply_barge_in"]
    print(
        f"  {FIRST_REPLY_AT_S} s into a new session's first reply (room kept: {first['kept_room_db']} dB): "
        f"detected {first['detected']}, within 300 ms {first['detected_within_300ms']}, "
        f"p50/p95 {first['detect_ms']}, cut by own echo {first['cut_by_own_echo']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
