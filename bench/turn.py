"""End of turn: a fixed silence vs Smart Turn, on complete sentences and on mid-sentence pauses.

    .venv/bin/python -m bench turn [--bands 0.5:0.5 0.9:0.05 ...] [--checks-ms 160 256]
                                   [--incomplete-ms 1000 1600] [--silence-ms 300 500 800]

The labelled set (bench/turn_set.py) is built from ../shared/data/speech/en: every sentence as
recorded, and the same sentence with 500-900 ms of its own background inserted at the word boundary
nearest its middle. Each clip goes through the real Silero VAD and the real endpointer; in smart_turn
mode each TURN_CHECK runs the real Smart Turn model on the audio so far, and its measured cost is
added to the endpoint wait (the verdict comes that much after the check). Reported per setting:
endpoint wait p50/p95/p99 on complete sentences (last voiced frame -> endpoint), the share of
sentences split into two turns (a cut-off), and what ended the turns. Figures, not assertions:
written to bench/results/turn-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.turn_set import Clip, build_clips, call_path, load_whisper

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("APPLIANCE_TEST_DATA", REPO.parent / "shared" / "data"))
RESULTS = REPO / "bench" / "results"
FRAME_SAMPLES = 512
FRAME_S = FRAME_SAMPLES / 16000

log = logging.getLogger("bench.turn")

# (probability, seconds the model took) for the audio between two sample indices of a clip
Judge = Callable[[int, int, int], tuple[float, float]]


@dataclass(frozen=True)
class Ending:
    time_s: float  # stream time of the endpoint decision
    speech_end_s: float
    by: str
    wait_ms: float  # last voiced frame -> endpoint, the model's cost included


@dataclass(frozen=True)
class Outcome:
    endings: tuple[Ending, ...]
    checks: int
    incomplete: int

    @property
    def split(self) -> bool:
        return len(self.endings) > 1


def replay(clip_index: int, probabilities: list[float], params: Any, judge: Judge) -> Outcome:
    """One clip through the endpointer; TURN_CHECKs answered by ``judge`` at once."""
    from engines.vad.endpointer import Endpointer, EndpointEvent, EventKind

    endpointer = Endpointer(params)
    endings: list[Ending] = []
    checks = incomplete = 0

    def ended(event: EndpointEvent, cost_s: float) -> None:
        assert event.speech_end_s is not None
        wait = (event.time_s - event.speech_end_s + cost_s) * 1000.0
        endings.append(Ending(event.time_s, event.speech_end_s, event.by, wait))

    def handle(events: list[EndpointEvent]) -> None:
        nonlocal checks, incomplete
        for event in events:
            if event.kind is EventKind.ENDPOINT:
                ended(event, 0.0)
            elif event.kind is EventKind.TURN_CHECK:
                start, end = int(event.utterance_start_s * 16000), round(event.time_s * 16000)
                probability, cost_s = judge(clip_index, start, end)
                checks += 1
                incomplete += probability < params.complete_threshold
                for verdict_event in endpointer.verdict(event.check_id, probability):
                    ended(verdict_event, cost_s)

    for probability in probabilities:
        handle(endpointer.feed(probability, FRAME_S))
    handle(endpointer.finish())
    return Outcome(tuple(endings), checks, incomplete)


def vad_probabilities(vad: Any, audio: np.ndarray) -> list[float]:
    stream = vad.stream()
    frames = len(audio) // FRAME_SAMPLES
    return [stream.probability(audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]) for i in range(frames)]


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    array = np.asarray(values)
    return {
        "count": int(array.size),
        "p50": round(float(np.percentile(array, 50)), 1),
        "p95": round(float(np.percentile(array, 95)), 1),
        "p99": round(float(np.percentile(array, 99)), 1),
        "max": round(float(array.max()), 1),
    }


def summarize(clips: list[Clip], outcomes: list[Outcome]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for kind in ("complete", "pause"):
        pairs = [(c, o) for c, o in zip(clips, outcomes, strict=True) if c.kind == kind]
        final_waits = [o.endings[-1].wait_ms for _c, o in pairs if o.endings]
        split = [c.name for c, o in pairs if o.split]
        result[kind] = {
            "clips": len(pairs),
            "endpoint_wait_ms": _stats(final_waits),
            "split_share": round(len(split) / len(pairs), 3) if pairs else None,
            "split": split,
            "ended_by": dict(Counter(e.by for _c, o in pairs for e in o.endings)),
            "incomplete_verdicts": sum(o.incomplete for _c, o in pairs),
            "checks": sum(o.checks for _c, o in pairs),
        }
    return result


def compare_call_path(detector: Any, clips: list[Clip], check_s: float) -> dict[str, Any]:
    """Smart Turn on each clip's words as heard on a call (16 kHz -> 8 kHz G.711 u-law -> the call's
    own 16 kHz upsampler) vs at 16 kHz: the audio up to the end of speech (complete) or to the
    pause (pause clips), plus ``check_s`` of the clip's background."""
    wide, narrow = [], []
    for clip in clips:
        words_end_s = clip.pause_start_s if clip.kind == "pause" else clip.speech_end_s
        assert words_end_s is not None
        audio = clip.audio[: round((words_end_s + check_s) * 16000)]
        wide.append(detector.complete_probability(audio))
        narrow.append(detector.complete_probability(call_path(audio)))
    w, n = np.asarray(wide), np.asarray(narrow)
    return {
        "clips": len(clips),
        "same_side_of_0.5": round(float(np.mean((w >= 0.5) == (n >= 0.5))), 3),
        "mean_abs_difference": round(float(np.mean(np.abs(w - n))), 3),
    }


def settings_grid(args: argparse.Namespace, base: Any) -> list[tuple[str, Any]]:
    grid = [
        (f"silence {ms} ms", replace(base, mode="silence", end_silence_s=ms / 1000)) for ms in args.silence_ms
    ]
    for band in args.bands:
        complete, incomplete = (float(part) for part in band.split(":"))
        for check_ms in args.checks_ms:
            for incomplete_ms in args.incomplete_ms:
                label = f"smart_turn {complete}/{incomplete} check {check_ms}, long {incomplete_ms}"
                params = replace(
                    base,
                    mode="smart_turn",
                    complete_threshold=complete,
                    incomplete_threshold=incomplete,
                    turn_check_s=check_ms / 1000,
                    incomplete_silence_s=incomplete_ms / 1000,
                )
                grid.append((label, params))
    return grid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench turn", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--bands",
        nargs="+",
        default=["0.5:0.5", "0.8:0.5", "0.9:0.5", "0.9:0.2", "0.95:0.2", "0.95:0.05"],
        help="COMPLETE:INCOMPLETE threshold pairs (at or above COMPLETE: end now; below INCOMPLETE: "
        "wait the long silence; in between: end_silence)",
    )
    parser.add_argument("--checks-ms", type=int, nargs="+", default=[160, 256])
    parser.add_argument("--incomplete-ms", type=int, nargs="+", default=[1000, 1600])
    parser.add_argument("--silence-ms", type=int, nargs="+", default=[300, 500, 800])
    parser.add_argument("--seed", type=int, default=0, help="pause lengths and background offsets")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from appliance.config import load_settings, override
    from appliance.engine_set import endpointer_params, open_bundle, turn_detector, vad_engine
    from bench.machine import describe_machine

    settings = override(load_settings(None), endpointer={"mode": "smart_turn"})
    bundle = open_bundle(settings)
    clips = build_clips(args.data, load_whisper(bundle), seed=args.seed)
    vad = vad_engine(settings, bundle)
    vad.load()
    probabilities = [vad_probabilities(vad, clip.audio) for clip in clips]
    detector = turn_detector(settings, bundle)
    assert detector is not None
    detector.load()
    cache: dict[tuple[int, int, int], tuple[float, float]] = {}
    costs: list[float] = []

    def judge(index: int, start: int, end: int) -> tuple[float, float]:
        key = (index, start, end)
        if key not in cache:
            started = time.perf_counter()
            probability = detector.complete_probability(clips[index].audio[start:end])
            cost = time.perf_counter() - started
            costs.append(cost * 1000.0)
            cache[key] = (probability, cost)
        return cache[key]

    call_path = compare_call_path(detector, clips, endpointer_params(settings).turn_check_s)
    rows = []
    for label, params in settings_grid(args, endpointer_params(settings)):
        outcomes = [replay(i, probabilities[i], params, judge) for i in range(len(clips))]
        rows.append({"setting": label, "params": params.__dict__, **summarize(clips, outcomes)})
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "benchmark": "turn",
        "started_utc": stamp,
        "command": " ".join(["python -m bench turn", *(argv if argv is not None else sys.argv[1:])]),
        "machine": describe_machine(),
        "clips": [
            {"name": c.name, "kind": c.kind, "seconds": round(c.duration_s, 2), "cut_after": c.cut_after}
            for c in clips
        ],
        "smart_turn_call_ms": _stats(costs),
        "call_path_8khz": call_path,
        "settings": rows,
    }
    out = args.out or RESULTS / f"turn-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(describe(result))
    print(f"\nwrote {out}")
    return 0


def describe(result: dict[str, Any]) -> str:
    cost = result["smart_turn_call_ms"]
    counts = Counter(c["kind"] for c in result["clips"])
    lines = [
        f"{counts['complete']} complete sentences, {counts['pause']} with a mid-sentence pause",
        f"Smart Turn call: p50 {cost['p50']} ms, p95 {cost['p95']} ms, p99 {cost['p99']} ms ({cost['count']} calls)",
        f"8 kHz call path vs 16 kHz: same verdict (0.5) on {result['call_path_8khz']['same_side_of_0.5']:.0%} of "
        f"{result['call_path_8khz']['clips']} clips, mean |difference| {result['call_path_8khz']['mean_abs_difference']}",
        "",
        f"{'setting':<52} {'wait p50':>9} {'p95':>7} {'p99':>7} {'complete split':>15} {'pause cut':>10}",
    ]
    for row in result["settings"]:
        wait = row["complete"]["endpoint_wait_ms"]
        lines.append(
            f"{row['setting']:<52} {wait['p50']:>9.0f} {wait['p95']:>7.0f} {wait['p99']:>7.0f}"
            f" {row['complete']['split_share']:>15.0%} {row['pause']['split_share']:>10.0%}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
