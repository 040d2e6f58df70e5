"""Speech over a reply: does a backchannel let it go on, does a stop word or a new question stop it?

    .venv/bin/python -m bench interruptions [--modes decide,interrupt] [--after 0.5,1.5] [--call-path]
        [--echo [--echo-rooms new,solved,remembered] [--echo-from-start]]

A person (bench/overlap_set.py ``CueSource``) asks "Tell me about the history of the Brooklyn
Bridge." in the Piper voice, then, ``--after`` seconds into the reply they hear, says a backchannel
("yes", "right": real recordings; "mm-hmm", "uh-huh", "yeah", "okay", "sure", a laugh: Piper; a
made-up cough), a stop word ("stop", "no": real; "wait", "hold on", "cancel": Piper) or an
interruption (two new questions in Piper, a recorded sentence). The real session hears it in real
time: Silero VAD, Smart Turn, Whisper, the shipped LLM, Piper. ``--call-path``: the person's audio
also as a SIP call delivers it (8 kHz G.711), as a second set. ``--echo``: also at a kiosk with an open
speaker (bench/simulated_room.py, an office): the microphone hears the reply's echo as loud as the
person, through the WebRTC canceller at the delay calibration finds; the canceller learns the room from
the first ``CONVERGE_S`` of a reply (the session ignores the microphone until then, as a new kiosk
session does), so there ``--after`` counts from that moment. It does so twice (``--echo-rooms``): in a
``new`` room, the canceller starting from nothing (a kiosk's first reply ever, or after a move), and in
the room ``remembered`` (``audio.echo_room_file``): the canceller starts from what a session before
learnt there, live, from one reply of its own (a kiosk's first reply after a restart); ``solved`` is
the new room with the stream solving for the room from its first half second (off as shipped).
``--echo-from-start``: ``--after`` counts from the reply's start, inside the learning time.

Reported per mode and path: backchannels that let the reply go on (and were not answered),
stop words that stopped it without being answered, interruptions that stopped it and were answered;
the time from the overlap's first sample to the reply's silence and to the decision (p50/p95), and how
long a resumed reply was paused. ``interrupt`` is the rule before: any speech over a reply stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import rooms
from bench.overlap_set import QUESTION, CueSink, CueSource, OverlapClip, overlap_clips, spoken
from bench.paths import DATA
from bench.turn_set import call_path
from engines.aec import EchoRoom

log = logging.getLogger("bench.interruptions")
KINDS = ("backchannel", "stop_word", "interruption")
QUIET_S = 2.0  # a case is over when the person has finished and the speaker has been silent this long
ECHO_DEVICE_DELAY_S = 0.07  # the device's own audio path, as in tests/test_echo_session.py

ECHO_ROOM = rooms.ROOMS[1]  # an office, the speaker 0.6 m from the microphone


def _pct(values: list[float], q: float) -> float | None:
    return None if not values else round(float(np.percentile(values, q)), 1)


async def run_case(
    engines: Any, settings: Any, question: np.ndarray, clip: OverlapClip, audio: np.ndarray, after_s: float
) -> dict[str, Any]:
    from appliance.engine_set import session_config
    from appliance.pipeline.session import Session

    sink = CueSink(engines.tts.sample_rate_hz)
    source = CueSource(question, audio, sink, after_s=after_s)
    session = Session(engines=engines, source=source, sink=sink, config=session_config(settings))
    await asyncio.wait_for(session.run(), 180)
    return _row(session, clip, after_s, source.overlap_at, sink.flushed_at)


def _row(
    session: Any, clip: OverlapClip, after_s: float, said_at: float | None, flushed_at: list[float]
) -> dict[str, Any]:
    """One case's outcome: what was decided, whether the reply went on, how soon it fell silent."""
    traces = [t for t in session.turns.traces if t.transcript]
    reply = traces[0] if traces else None
    overlaps = reply.overlaps if reply is not None else []
    decision = overlaps[0] if overlaps else {}
    silenced = [t for t in flushed_at if said_at is not None and t >= said_at]
    return {
        "clip": clip.name,
        "meant": clip.kind,
        "source": clip.source,
        "after_s": after_s,
        "said": said_at is not None,
        "decided": decision.get("kind", "none"),
        "heard": decision.get("heard", ""),
        "reply_went_on": reply is not None and not reply.cancelled,
        "answered_as_turn": len(traces) > 1,
        "silenced_ms": None
        if not silenced or said_at is None
        else round((silenced[0] - said_at) * 1000.0, 1),
        "decided_ms": decision.get("decided_ms"),  # from the first voiced frame
        "voiced_ms": decision.get("voiced_ms"),
        "by_linear_ear": decision.get("by_linear_ear", False),  # paused for what AEC3's output lacked
        "first_transcript": reply.transcript if reply is not None else "",
        "overlaps": len(overlaps),  # more than one: the reply paused again (an echo, a second word)
    }


async def run_echo_case(
    engines: Any,
    settings: Any,
    question: np.ndarray,
    clip: OverlapClip,
    after_s: float,
    *,
    delay_ms: float,
    noise: np.ndarray,
    remembered: EchoRoom | None = None,
    solving: bool = False,
    from_start: bool = False,
) -> dict[str, Any]:
    from appliance.audio.echo import CONVERGE_S
    from bench.aec_barge_in import solving_rooms
    from bench.simulated_room import run_until

    with solving_rooms(solving):
        stream = engines.aec.stream(remembered)
    room, session = _office_session(engines, settings, question, stream, delay_ms, noise)
    learning_s = 0.0 if from_start else CONVERGE_S
    room.speak(rooms.at_level(clip.audio, rooms.SPEECH_DBFS), after_s=learning_s + after_s)

    def over() -> bool:
        return room.start is not None and room.quiet_after_person(time.monotonic(), QUIET_S)

    await asyncio.wait_for(run_until(session, over), 180)
    return _row(session, clip, after_s, room.person_said_at, room.speaker.flushed_at)


async def learn_room(
    engines: Any, settings: Any, question: np.ndarray, *, delay_ms: float, noise: np.ndarray
) -> EchoRoom:
    """What a session learns of ``ECHO_ROOM`` from one whole reply to ``question`` with nobody
    speaking over it, as the daemon keeps it (``audio.echo_room_file``)."""
    from bench.simulated_room import run_until

    stream = engines.aec.stream()
    room, session = _office_session(engines, settings, question, stream, delay_ms, noise)

    def over() -> bool:
        if room.start is None or room.first_play is None:
            return False
        return room.now_sample(time.monotonic()) >= room.written_end + round(QUIET_S * rooms.SAMPLE_RATE_HZ)

    await asyncio.wait_for(run_until(session, over), 180)
    learnt = stream.room()
    if learnt is None:
        raise RuntimeError("the canceller heard no echo alone in a whole reply")
    log.warning("the room learnt from one reply: echo %.1f dB down", learnt.cancelled_db)
    return learnt


def _office_session(
    engines: Any, settings: Any, question: np.ndarray, stream: Any, delay_ms: float, noise: np.ndarray
) -> tuple[Any, Any]:
    """``ECHO_ROOM`` (a person asks ``question``; the room's ``noise``) and a session in it behind
    the canceller ``stream``."""
    from appliance.audio.echo import cancel_echo
    from appliance.engine_set import session_config
    from appliance.pipeline.session import Session
    from bench.simulated_room import SimulatedRoom

    room = SimulatedRoom(
        ECHO_ROOM,
        device_delay_s=ECHO_DEVICE_DELAY_S,
        first=np.concatenate([np.zeros(8000, np.float32), rooms.at_level(question, rooms.SPEECH_DBFS)]),
        noise=noise,
        seconds=60.0,
    )
    source, sink = cancel_echo(
        room, room.speaker, stream=stream, worker=engines.aec_worker, echo_delay_ms=delay_ms
    )
    session = Session(
        engines=engines, source=source, sink=sink, config=session_config(settings, echo_cancelled=True)
    )
    return room, session


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    said = [r for r in rows if r["said"]]
    by = {kind: [r for r in said if r["meant"] == kind] for kind in KINDS}
    right = {kind: [_right(r) for r in rows_of_kind] for kind, rows_of_kind in by.items()}
    silenced = [r["silenced_ms"] for r in said if r["silenced_ms"] is not None]
    decided = [r["decided_ms"] for r in said if r["decided_ms"] is not None]
    paused = [
        r["decided_ms"] for r in by["backchannel"] if r["reply_went_on"] and r["decided_ms"] is not None
    ]
    return {
        "cases": len(rows),
        "overlap_not_said": len(rows) - len(said),  # the reply ended before the cue
        "right": {kind: f"{sum(flags)}/{len(flags)}" for kind, flags in right.items()},
        "silenced_ms": {"p50": _pct(silenced, 50), "p95": _pct(silenced, 95)},
        "decided_ms": {"p50": _pct(decided, 50), "p95": _pct(decided, 95)},
        "backchannel_paused_ms": {"p50": _pct(paused, 50), "p95": _pct(paused, 95)},
        "wrong": [
            f"{r['clip']} ({r['meant']}) -> {r['decided']} {r['heard']!r}" for r in said if not _right(r)
        ],
    }


def _right(row: dict[str, Any]) -> bool:
    if row["meant"] == "backchannel":
        return bool(row["reply_went_on"] and not row["answered_as_turn"])
    if row["meant"] == "stop_word":
        return bool(not row["reply_went_on"] and not row["answered_as_turn"])
    return bool(not row["reply_went_on"] and row["answered_as_turn"])


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from appliance.config import load_settings, override
    from appliance.engine_set import build_engines, load_engines, open_bundle

    base = override(load_settings(None), llm={"max_reply_tokens": args.reply_tokens})
    if args.echo:
        base = override(base, audio={"echo_cancellation": "on"})
    engines = build_engines(base, open_bundle(base), microphone=args.echo)
    await load_engines(engines)
    question = spoken(engines.tts, QUESTION)
    clips = overlap_clips(engines.tts, args.data)
    if args.only:
        clips = [c for c in clips if c.name in args.only.split(",")]
    Case = Callable[[Any, OverlapClip, float], Awaitable[dict[str, Any]]]
    paths: dict[str, Case] = {
        "16 kHz": lambda settings, clip, after: run_case(engines, settings, question, clip, clip.audio, after)
    }
    if args.call_path:
        paths["8 kHz call"] = lambda settings, clip, after: run_case(
            engines, settings, call_path(question), clip, call_path(clip.audio), after
        )
    if args.echo:
        from bench.aec_echo import calibrated_delay_s
        from engines.audio import load_audio_16k

        delay_ms = calibrated_delay_s(ECHO_ROOM, ECHO_DEVICE_DELAY_S) * 1000.0
        noise = load_audio_16k(args.data / "vad/noise/speechbrain_noise1.wav")
        echo_rooms = args.echo_rooms.split(",")

        def echo_path(**start_from: Any) -> Case:
            return lambda settings, clip, after: run_echo_case(
                engines,
                settings,
                question,
                clip,
                after,
                delay_ms=delay_ms,
                noise=noise,
                from_start=args.echo_from_start,
                **start_from,
            )

        if "new" in echo_rooms:
            paths["16 kHz, open speaker, echo canceller"] = echo_path()
        if "solved" in echo_rooms:
            paths["16 kHz, open speaker, new room solved"] = echo_path(solving=True)
        if "remembered" in echo_rooms:
            learnt = await learn_room(engines, base, question, delay_ms=delay_ms, noise=noise)
            paths["16 kHz, open speaker, room remembered"] = echo_path(remembered=learnt)
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for path_name, case in paths.items():
        for mode in args.modes.split(","):
            settings = override(base, overlap={"mode": mode})
            found = []
            for after_s in (float(a) for a in args.after.split(",")):
                for clip in clips:
                    row = await case(settings, clip, after_s)
                    row.update(path=path_name, mode=mode)
                    log.warning(
                        "%s %s %s after %.1f s: %s %r",
                        path_name,
                        mode,
                        clip.name,
                        after_s,
                        row["decided"],
                        row["heard"],
                    )
                    found.append(row)
            rows.extend(found)
            results[f"{path_name} {mode}"] = summarize(found)
    return {"summary": results, "cases": rows}


def main() -> None:
    from bench.machine import write_result

    parser = argparse.ArgumentParser(prog="python -m bench interruptions", description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="decide,interrupt", help="overlap.mode values, side by side")
    parser.add_argument("--after", default="0.5,1.5", help="seconds into the reply the person speaks")
    parser.add_argument("--call-path", action="store_true", help="also as a SIP call delivers the audio")
    parser.add_argument(
        "--echo", action="store_true", help="also at a kiosk whose speaker the microphone hears"
    )
    parser.add_argument(
        "--echo-rooms",
        default="new,remembered",
        help="with --echo: the canceller starting from nothing (new), from nothing solving for the room from "
        "its first echo (solved: off as shipped), from the room a session before learnt (remembered)",
    )
    parser.add_argument(
        "--echo-from-start",
        action="store_true",
        help="with --echo: --after counts from the reply's start, inside the canceller's learning time",
    )
    parser.add_argument("--reply-tokens", type=int, default=48)
    parser.add_argument("--only", default="", help="these clips only (names, comma-separated)")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    results = asyncio.run(main_async(args))
    for name, summary in results["summary"].items():
        print(f"{name}: {summary}")
    write_result("interruptions", vars(args) | {"data": str(args.data)}, results)


if __name__ == "__main__":
    main()
