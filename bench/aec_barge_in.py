"""People speaking over a reply in a simulated room: detected within how long, and what Whisper
hears of them once the reply stops (bench/aec.py runs these)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from bench import rooms
from bench.aec_echo import (
    BARGE_IN_AT_S,
    DETECT_WITHIN_S,
    EAR,
    FIRST_REPLY_AT_S,
    FRAME,
    GAP_S,
    LEVELS,
    REMEMBERED,
    RESTART_MOVED_S,
    SOLVED,
    STOP_LAG_S,
    WARM_UP,
    WITH_LINEAR_EAR,
    Bench,
    EchoPath,
    cancel,
    converged_at_s,
    speech_starts,
)
from bench.asr import percentile

log = logging.getLogger("bench.aec")


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
