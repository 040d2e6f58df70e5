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
import itertools
import logging
from pathlib import Path
from typing import Any

import numpy as np

from appliance.audio.echo import LEAD_S
from bench import rooms
from bench.aec_barge_in import (
    barge_ins,
    first_reply_barge_ins,
    kept_room,
)
from bench.aec_echo import (
    DELAYS_S,
    EAR,
    EAR_VARIANTS,
    FIRST_REPLY_AT_S,
    FRAME,
    GAP_S,
    LEVELS,
    REMEMBERED,
    REPLIES,
    WITH_LINEAR_EAR,
    Bench,
    Linear,
    calibrated_delay_s,
    cancel,
    converged_at_s,
    erle_db,
    speech_starts,
)
from bench.asr import DEFAULT_DATA, percentile, transcribed_speech

log = logging.getLogger("bench.aec")


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
