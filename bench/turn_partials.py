"""Could the words' verdict on a pause come from the last partial transcript, before Whisper's final pass?

    .venv/bin/python -m bench turn --partials [--limit N] [--call-path]

The session transcribes the utterance so far every ``partials.partial_interval_ms`` while the person speaks
(appliance/pipeline/partials.py) and stops at the first unvoiced frame after speech (PROBABLY_ENDED),
where the turn starts and Whisper's final pass begins; the words' verdict comes from the reply's prompt
pass after it. A verdict read from the last partial would be free and earlier only when that partial
already holds every word the final pass hears, and useful only when it agrees with the final's.

Each clip of the labelled set (bench/turn_set.py) is fed frame by frame through the real VAD and the
shipped endpointer up to its first PROBABLY_ENDED. The partials are scheduled as the session schedules
them, each taking the time this machine's Whisper takes for it (one at a time; a partial still running at
PROBABLY_ENDED is lost, as the turn's start stops it). Reported per audio path: the share of pauses whose
last finished partial holds the final pass's words, the share whose verdict (finished / unsure /
unfinished at the shipped thresholds) agrees with the final's, and the time the final pass took (what a
partial verdict would save). Figures, not assertions: written to ~/.cache/appliance/bench-results/turn-partials-<time>.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench.paths import DATA as DEFAULT_DATA
from bench.turn_replay import FRAME_S, FRAME_SAMPLES
from bench.turn_set import Clip, build_clips, call_path, clip_arguments, load_whisper
from engines.asr.text import normalize_text
from engines.audio import SAMPLE_RATE_HZ


@dataclass(frozen=True)
class PauseWords:
    clip: str
    kind: str
    final: str  # the final pass's words at PROBABLY_ENDED
    partial: str  # the last partial finished before it ("" when none)
    partial_age_ms: float | None  # PROBABLY_ENDED minus the end of that partial's audio
    covered: bool  # the partial holds the final's words
    final_p: float | None
    partial_p: float | None
    agree: bool  # same verdict class (finished / unsure / unfinished)
    final_asr_ms: float


def verdict_class(p: float | None, params: Any) -> str:
    if p is None:
        return "none"
    if p >= params.words_complete_threshold:
        return "finished"
    return "unfinished" if p < params.words_incomplete_threshold else "unsure"


class WordsJudge:
    """P(end of message | words) from the reply LLM, as the engine reads it on a prompt pass."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self._count = 0

    def __call__(self, text: str) -> float | None:
        from engines.llm import Message
        from engines.llm.llamacpp import judged_words

        words = judged_words(text)
        if not words:
            return None
        self._count += 1
        stats = self.llm.prefill([Message("user", words)], conversation=f"partials-{self._count}")
        return stats.end_of_message_p


def first_pause(
    audio: np.ndarray, vad: Any, params: Any, asr: Any, interval_s: float
) -> tuple[float, list[tuple[float, str]]]:
    """Frame by frame to the first PROBABLY_ENDED: its stream time, and the partials finished before it
    as (end of their audio, text), each started when the session would start it (a partial due while
    one runs waits for it) and taking the time this machine's Whisper takes for it."""
    from engines.vad.endpointer import Endpointer, EventKind

    endpointer, stream = Endpointer(params), vad.stream()
    partials: list[tuple[float, float, str]] = []  # (end of its audio, when it finished, text)
    utterance_start: float | None = None
    due = busy_until = float("inf")
    for index in range(len(audio) // FRAME_SAMPLES):
        frame = audio[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES]
        for event in endpointer.feed(stream.probability(frame), FRAME_S):
            if event.kind is EventKind.SPEECH_START:
                utterance_start, busy_until = event.utterance_start_s, 0.0
                due = event.speech_start_s + interval_s
            elif event.kind is EventKind.PROBABLY_ENDED:
                return event.time_s, [(end, text) for end, done, text in partials if done <= event.time_s]
        now = (index + 1) * FRAME_S
        if utterance_start is not None and now >= due and now >= busy_until:
            due = now + interval_s
            started = time.perf_counter()
            text = asr.transcribe(
                audio[int(utterance_start * SAMPLE_RATE_HZ) : int(now * SAMPLE_RATE_HZ)]
            ).text.strip()
            busy_until = now + (time.perf_counter() - started)
            partials.append((now, busy_until, text))
    return len(audio) / SAMPLE_RATE_HZ, [(end, text) for end, _done, text in partials]


def measure(
    clip: Clip, audio: np.ndarray, engines: dict[str, Any], params: Any, interval_s: float
) -> PauseWords:
    ended_s, partials = first_pause(audio, engines["vad"], params, engines["asr"], interval_s)
    started = time.perf_counter()
    final = engines["asr"].transcribe(audio[: int(ended_s * SAMPLE_RATE_HZ)]).text.strip()
    final_asr_ms = (time.perf_counter() - started) * 1000.0
    partial = partials[-1][1] if partials else ""
    covered = bool(partial) and normalize_text(partial) == normalize_text(final)
    judge: WordsJudge = engines["judge"]
    final_p = judge(final)
    partial_p = judge(partial) if partial else None
    return PauseWords(
        clip=clip.name,
        kind=clip.kind,
        final=final,
        partial=partial,
        partial_age_ms=round((ended_s - partials[-1][0]) * 1000.0, 1) if partials else None,
        covered=covered,
        final_p=final_p,
        partial_p=partial_p,
        agree=verdict_class(final_p, params) == verdict_class(partial_p, params),
        final_asr_ms=round(final_asr_ms, 1),
    )


def summarize(rows: list[PauseWords]) -> dict[str, Any]:
    def share(flags: list[bool]) -> float | None:
        return round(sum(flags) / len(flags), 3) if flags else None

    asr = [r.final_asr_ms for r in rows]
    return {
        "pauses": len(rows),
        "partial_holds_the_words": share([r.covered for r in rows]),
        "verdict_agrees": share([r.agree for r in rows]),
        "verdict_agrees_when_held": share([r.agree for r in rows if r.covered]),
        "no_partial_before_the_pause": share([not r.partial for r in rows]),
        "final_asr_ms": {
            "p50": round(float(np.percentile(asr, 50)), 1),
            "p95": round(float(np.percentile(asr, 95)), 1),
        }
        if asr
        else None,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench turn --partials", description=__doc__)
    clip_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from appliance.config import load_settings
    from appliance.engine_set import asr_engine, llm_engine, open_bundle, vad_engine
    from bench.machine import write_result

    settings = load_settings(None)
    bundle = open_bundle(settings)
    clips = build_clips(args.data or DEFAULT_DATA, load_whisper(bundle), seed=args.seed, limit=args.limit)
    engines: dict[str, Any] = {
        "vad": vad_engine(settings, bundle),
        "asr": asr_engine(settings, bundle),
        "llm": llm_engine(settings, bundle),
    }
    for engine in engines.values():
        engine.load()
    engines["judge"] = WordsJudge(engines["llm"])
    params, interval_s = settings.endpointer, settings.partials.partial_interval_s
    paths = {"16 kHz": [c.audio for c in clips]}
    if args.call_path:
        paths["8 kHz call"] = [call_path(c.audio) for c in clips]
    results: dict[str, Any] = {}
    for name, audios in paths.items():
        rows = [measure(c, a, engines, params, interval_s) for c, a in zip(clips, audios, strict=True)]
        results[name] = {"summary": summarize(rows), "pauses": [asdict(r) for r in rows]}
        print(f"{name}: {json.dumps(results[name]['summary'])}")
    arguments = {**vars(args), "data": str(args.data), "out": str(args.out)}
    arguments["partial_interval_ms"] = settings.partials.partial_interval_ms
    if args.out is None:
        write_result("turn-partials", arguments, results)
    else:
        args.out.write_text(json.dumps({"args": arguments, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
