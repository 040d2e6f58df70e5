"""End of turn, live: the real pipeline on this machine, not replayed costs.

    .venv/bin/python -m bench turn --live [--limit N] [--call-path | --call-path-only] [--reply-tokens 12]

Each clip of the labelled set (bench/turn_set.py: complete sentences, and the same sentences with a
pause after a function word and elsewhere) is fed to a real ``Session`` in real time, as a microphone
would (an ``ArraySource`` paced by the clock), on the shipped settings and the real engines: Silero
VAD, Smart Turn, Whisper with its partial transcripts, the LLM with its prefills and its words'
verdict, Piper. Everything competes for the cores as in service, so the words' verdict arrives when
this machine delivers it. Two endpointers run side by side, clip by clip:

- ``before``: the rule until December 2026, where an unsure sound ended the pause after
  ``end_silence_ms`` even while the words were on their way;
- ``after``: the shipped rule, where nothing of the sound ends a pause before the expected words (at
  most ``words_wait_ms``).

Reported per endpointer and audio path: the share of pauses cut (a turn ended inside the inserted
pause), after a function word and elsewhere, and the share of pause clips split anywhere (a
recording's own pause between sentences counts there too, as it does for complete sentences); the share of complete sentences split; on complete sentences the endpoint
wait and the turn latency minus its floor (ASR + first token + first clause + first audio of the same
turn: what no endpointer can save) p50/p95; and the share of turns decided by the sound alone (no
words' verdict when the pause was decided), with why the words were not expected. Replies are cut to
``--reply-tokens`` tokens: the decision and the first audio are measured, not the reply's length.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from bench.turn_set import Clip, build_clips, call_path, clip_arguments, load_whisper

log = logging.getLogger("bench.turn_live")


@dataclass
class ClipOutcome:
    clip: str
    kind: str
    turns: int
    endpoint_by: list[str]
    endpoint_wait_ms: float | None
    latency_minus_floor_ms: float | None
    sound_alone: bool  # the pause that ended the (last) turn was decided without the words' verdict
    words_not_expected: str
    speech_ends_s: list[float]  # where each turn's speech ended, in the clip (s)
    cut_at_pause: bool  # pause clips: a turn (not the last) ended inside the inserted pause


# A turn's end of speech is the VAD's estimate: it may fall a little before the pause's first sample.
CUT_EARLY_S = 0.25


def cut_inside(clip: Clip, speech_ends_s: list[float]) -> bool:
    """Whether a turn other than the last ended inside the clip's inserted pause."""
    if clip.pause_start_s is None or clip.pause_end_s is None:
        return False
    return any(clip.pause_start_s - CUT_EARLY_S <= end <= clip.pause_end_s for end in speech_ends_s[:-1])


def _floor_s(trace: Any) -> float | None:
    parts = [trace.stage_s(s) for s in ("asr", "llm_first_token", "first_clause", "tts_first_audio")]
    return None if any(p is None for p in parts) else float(sum(parts))


def run_clip(engines: Any, settings: Any, audio: np.ndarray, clip: Clip) -> ClipOutcome:
    from appliance.audio import ArraySource, MemorySink
    from appliance.engine_set import session_config
    from appliance.pipeline.session import Session

    source = ArraySource(audio, realtime=True)
    session = Session(
        engines=engines,
        source=source,
        sink=MemorySink(engines.tts.sample_rate_hz),
        config=session_config(settings),
    )
    asyncio.run(asyncio.wait_for(session.run(), 300))
    traces = [t for t in session.turns.traces if t.transcript]
    started = source.started_at
    ends = [
        round(t.speech_end - started, 3) for t in traces if started is not None and t.speech_end is not None
    ]
    last = traces[-1] if traces else None
    wait = last.stage_s("endpoint_wait") if last else None
    latency = last.stage_s("turn_latency") if last else None
    floor = _floor_s(last) if last else None
    return ClipOutcome(
        clip=clip.name,
        kind=clip.kind,
        turns=len(traces),
        endpoint_by=[t.endpoint_by for t in traces],
        endpoint_wait_ms=None if wait is None else round(wait * 1000, 1),
        latency_minus_floor_ms=None
        if latency is None or floor is None
        else round((latency - floor) * 1000, 1),
        sound_alone=bool(last is not None and last.words_complete_p is None),
        words_not_expected=last.words_not_expected if last else "",
        speech_ends_s=ends,
        cut_at_pause=cut_inside(clip, ends),
    )


def _pct(values: list[float], q: float) -> float | None:
    return None if not values else round(float(np.percentile(values, q)), 1)


def _share(flags: list[bool]) -> float | None:
    return None if not flags else round(sum(flags) / len(flags), 3)


def summarize(outcomes: list[ClipOutcome]) -> dict[str, Any]:
    complete = [o for o in outcomes if o.kind == "complete"]
    waits = [o.endpoint_wait_ms for o in complete if o.endpoint_wait_ms is not None]
    over_floor = [o.latency_minus_floor_ms for o in complete if o.latency_minus_floor_ms is not None]
    return {
        "clips": len(outcomes),
        "pauses_cut": _share([o.cut_at_pause for o in outcomes if o.kind != "complete"]),
        "pauses_cut_after_function_word": _share(
            [o.cut_at_pause for o in outcomes if o.kind == "pause_function"]
        ),
        "pauses_cut_elsewhere": _share([o.cut_at_pause for o in outcomes if o.kind == "pause_other"]),
        "pause_clips_split_anywhere": _share([o.turns > 1 for o in outcomes if o.kind != "complete"]),
        "complete_split": _share([o.turns > 1 for o in complete]),
        "complete_unanswered": _share([o.turns == 0 for o in complete]),
        "endpoint_wait_ms": {"p50": _pct(waits, 50), "p95": _pct(waits, 95)},
        "latency_minus_floor_ms": {"p50": _pct(over_floor, 50), "p95": _pct(over_floor, 95)},
        "decided_by_sound_alone": _share([o.sound_alone for o in outcomes if o.turns]),
        "words_not_expected": dict(Counter(o.words_not_expected for o in outcomes if o.words_not_expected)),
        "ended_by": dict(Counter(by for o in outcomes for by in o.endpoint_by)),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench turn --live", description=__doc__)
    clip_arguments(parser)
    parser.add_argument("--call-path-only", action="store_true", help="only as a SIP call delivers it")
    parser.add_argument("--reply-tokens", type=int, default=12)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE[,...]",
        help="also the shipped rule with these settings, side by side (repeatable), as python -m bench "
        "--variant: endpointer.words_incomplete_silence_ms=1000",
    )
    parser.add_argument("--no-before", action="store_true", help="leave out the rule until December 2026")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from appliance.config import load_settings, override
    from appliance.engine_set import build_engines, load_engines, open_bundle
    from bench.e2e import parse_variant
    from bench.machine import describe_machine
    from bench.turn import DEFAULT_DATA, RESULTS

    settings = override(load_settings(None), llm={"max_reply_tokens": args.reply_tokens})
    bundle = open_bundle(settings)
    clips = build_clips(args.data or DEFAULT_DATA, load_whisper(bundle), seed=args.seed, limit=args.limit)
    engines = build_engines(settings, bundle)
    asyncio.run(load_engines(engines))
    paths = {} if args.call_path_only else {"16 kHz": [c.audio for c in clips]}
    if args.call_path or args.call_path_only:
        paths["8 kHz call"] = [call_path(c.audio) for c in clips]
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    before = override(settings, endpointer={"words_hold_any_sound": False})
    variants = {"after": settings} if args.no_before else {"before": before, "after": settings}
    for spec in args.variant:
        variants[spec] = override(settings, **parse_variant(spec))
    for path_name, audios in paths.items():
        outcomes: dict[str, list[ClipOutcome]] = {name: [] for name in variants}
        for clip, audio in zip(clips, audios, strict=True):
            for variant, chosen in variants.items():  # side by side, clip by clip: the same load on all
                outcome = run_clip(engines, chosen, audio, clip)
                outcomes[variant].append(outcome)
                pause = (
                    {"pause_start_s": round(clip.pause_start_s or 0.0, 3), "pause_s": round(clip.pause_s, 3)}
                    if clip.kind != "complete"
                    else {}
                )
                rows.append({"path": path_name, "variant": variant, **outcome.__dict__, **pause})
                log.warning("%s %s %s %s: %s", path_name, variant, clip.name, clip.kind, outcome.endpoint_by)
        results[path_name] = {variant: summarize(found) for variant, found in outcomes.items()}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "benchmark": "turn --live",
        "started_utc": stamp,
        "command": " ".join(["python -m bench turn --live", *argv]),
        "machine": describe_machine(),
        "llm": settings.llm.model,
        "reply_tokens": args.reply_tokens,
        "paths": results,
        "clips": rows,
    }
    out = args.out or RESULTS / f"turn-live-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(describe(results))
    print(f"\nwrote {out}")
    return 0


def describe(results: dict[str, Any]) -> str:
    lines = []
    for path_name, variants in results.items():
        lines.append(f"{path_name}:")
        for variant, summary in variants.items():
            wait, over = summary["endpoint_wait_ms"], summary["latency_minus_floor_ms"]
            lines.append(
                f"  {variant:6} pauses cut {_fmt(summary['pauses_cut'])} (after a function word "
                f"{_fmt(summary['pauses_cut_after_function_word'])}, elsewhere {_fmt(summary['pauses_cut_elsewhere'])}; "
                f"split anywhere {_fmt(summary['pause_clips_split_anywhere'])}), "
                f"complete split {_fmt(summary['complete_split'])}; wait p50/p95 {wait['p50']}/{wait['p95']} ms, "
                f"latency - floor p50/p95 {over['p50']}/{over['p95']} ms; sound alone "
                f"{_fmt(summary['decided_by_sound_alone'])} {summary['words_not_expected']}; {summary['ended_by']}"
            )
    return "\n".join(lines)


def _fmt(share: float | None) -> str:
    return "-" if share is None or math.isnan(share) else f"{share:.0%}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
