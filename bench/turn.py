"""End of turn: the sound alone (Smart Turn), the words alone (the reply LLM's P(the words end the
message)), both fused, and a trivial baseline, on complete sentences and on mid-sentence pauses.

    .venv/bin/python -m bench turn [--call-path] [--out FILE] [--plot FILE]
    .venv/bin/python -m bench turn --live [--limit N] [--call-path]   (the real pipeline, bench/turn_live.py)
    .venv/bin/python -m bench turn --partials [--limit N]   (a verdict from the last partial? turn_partials.py)

The labelled set (bench/turn_set.py) is built from ../shared/data/speech/en: every sentence of at
least five words as recorded, and the same sentence with 300-1200 ms of its own background inserted
after a function word ("the", "of", "to", ...) and elsewhere in its middle. Each clip goes through the
real Silero VAD and the real endpointer. Every verdict arrives when it would on this machine:

- the sound: Smart Turn on the audio so far, asked after turn_check_ms of silence, answered after
  the model's measured time;
- the words: at the first silent frame the speculative turn transcribes the utterance (the shipped
  Whisper, measured) and the LLM (the shipped model) evaluates the words, its cache primed with all
  but the last two (what the partial transcripts' prefill leaves it); P(the words end the message)
  arrives after both measured times. Trailing punctuation is left out of the words judged: Whisper
  writes a full stop where a pause may only be a breath;
- the baseline: "unfinished" when the last word is a function word, else "finished", on the same
  clock as the words.

Reported per setting: endpoint wait p50/p95/p99 on complete sentences (last voiced frame ->
endpoint, model costs included), the share of complete sentences split, the share of pauses cut
(all, 500-900 ms, after a function word, elsewhere); per mode the trade-off curve (a PNG) and
eot-bench's two figures: the share of pauses cut when the wait is at most 300 ms, and the wait when at
most 5% of pauses are cut. ``--call-path`` runs the chosen settings again on the audio as a SIP call
delivers it (8 kHz G.711). Figures, not assertions: written to ~/.cache/appliance/bench-results/turn-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.paths import DATA, RESULTS
from bench.turn_replay import (
    FRAME_S,
    Judges,
    Words,
    _stats,
    last_voiced_end,
    replay,
    summarize,
    vad_probabilities,
)
from bench.turn_set import LEAD_S, Clip, build_clips, call_path, load_whisper
from engines.vad.params import EndpointerMode, VadParams

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = DATA

log = logging.getLogger("bench.turn")


def settings_grid(base: Any) -> list[tuple[str, str, Any]]:
    """(mode, label, params): the sound alone, the words alone, both fused, the baseline."""
    grid: list[tuple[str, str, Any]] = []
    sound = base.model_copy(update={"mode": EndpointerMode.SMART_TURN, "judge_words": False})
    for complete, incomplete in ((0.5, 0.5), (0.9, 0.05), (0.95, 0.2)):
        for check_ms in (160, 256):
            for long_ms in (1000, 1600):
                params = sound.model_copy(
                    update={
                        "turn_complete_threshold": complete,
                        "turn_incomplete_threshold": incomplete,
                        "turn_check_ms": check_ms,
                        "incomplete_silence_ms": long_ms,
                    }
                )
                grid.append(
                    ("sound", f"sound {complete}/{incomplete} check {check_ms} long {long_ms}", params)
                )
    # With the words: they hold a turn below text_incomplete, end it at or above text_complete; the
    # sound ends it at or above its complete_threshold (1.0 for "words": the sound never does).
    for mode, sound_ends, bands, unsure in (
        ("words", 1.0, ((0.2, 0.01), (0.35, 0.02), (0.5, 0.05)), (0.5, 0.8, 1.0)),
        ("fused", 0.9, ((0.35, 0.02), (0.5, 0.02), (0.35, 0.05), (0.5, 0.05)), (0.5, 0.8, 1.0)),
        ("baseline", 0.9, ((0.35, 0.02),), (0.5, 1.0)),
    ):
        for complete, incomplete in bands:
            for unsure_s in unsure:
                # words_wait_ms 2000: the reply cannot start before the words are judged anyway
                more = {
                    "mode": "smart_turn",
                    "turn_check_ms": 160,
                    "incomplete_silence_ms": 1000,
                    "words_wait_ms": 2000,
                }
                grid.append(_with_words(base, mode, sound_ends, complete, incomplete, unsure_s, **more))
    return grid


def _with_words(
    base: Any, row: str, sound_ends: float, complete: float, incomplete: float, unsure_s: float, **more: Any
) -> tuple[str, str, Any]:
    """(row's mode, label, params): ``base`` judging the words with these thresholds (and ``more`` keys)."""
    # model_copy: a sound threshold of 1.0 (never ends a turn) is outside the settings' range
    params = base.model_copy(
        update={
            "judge_words": True,
            "turn_complete_threshold": sound_ends,
            "words_complete_threshold": complete,
            "words_incomplete_threshold": incomplete,
            "words_unsure_silence_ms": round(unsure_s * 1000),
            **more,
        }
    )
    return row, f"{row} {complete}/{incomplete} sound {sound_ends} unsure {unsure_s * 1000:.0f}", params


def frontier(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode, eot-bench's two figures: the fewest pauses cut with a wait p50 of at most 300 ms,
    and the shortest wait p50 with at most 5% of pauses cut."""
    out: dict[str, dict[str, Any]] = {}
    for mode in sorted({row["mode"] for row in rows}):
        mine = [r for r in rows if r["mode"] == mode and r["complete_wait_ms"]]
        fast = [r for r in mine if r["complete_wait_ms"]["p50"] <= 300]
        safe = [r for r in mine if r["pauses_cut"] is not None and r["pauses_cut"] <= 0.05]
        best_fast = min(fast, key=lambda r: r["pauses_cut"]) if fast else None
        best_safe = min(safe, key=lambda r: r["complete_wait_ms"]["p50"]) if safe else None
        out[mode] = {
            "pauses_cut_at_wait_300ms": best_fast["pauses_cut"] if best_fast else None,
            "setting_at_wait_300ms": best_fast["setting"] if best_fast else None,
            "wait_p50_at_cut_5pct": best_safe["complete_wait_ms"]["p50"] if best_safe else None,
            "setting_at_cut_5pct": best_safe["setting"] if best_safe else None,
        }
    return out


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = {"sound": "o", "words": "s", "fused": "^", "baseline": "x"}
    for mode, marker in markers.items():
        points = [
            (r["complete_wait_ms"]["p50"], 100 * r["pauses_cut"])
            for r in rows
            if r["mode"] == mode and r["complete_wait_ms"] and r["pauses_cut"] is not None
        ]
        if points:
            xs, ys = zip(*sorted(points), strict=True)
            ax.scatter(xs, ys, marker=marker, label=mode)
    ax.axhline(10, color="grey", linestyle=":", linewidth=1)
    ax.axvline(250, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("endpoint wait p50 on complete sentences (ms, model costs included)")
    ax.set_ylabel("mid-sentence pauses cut (%)")
    ax.set_title("End of turn: each point one setting")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def decisive_verdicts(
    clips: list[Clip], probabilities: list[list[float]], judges: Judges, params: Any
) -> list[dict[str, Any]]:
    """For each clip, both verdicts on the pause that matters: the inserted one, or the end of a
    complete sentence (the audio up to its first silent frame, as the speculative turn hears it)."""
    rows = []
    for index, clip in enumerate(clips):
        at_s = (
            clip.pause_start_s
            if clip.pause_start_s is not None
            else last_voiced_end(probabilities[index], VadParams().threshold)
        )
        first_silent = (int(at_s / FRAME_S) + 1) * FRAME_S
        start = max(0, round((LEAD_S - params.pre_roll_s) * 16000))
        words = judges.words(index, start, round(first_silent * 16000))
        sound, _cost = judges.audio(index, start, round((first_silent + params.turn_check_s) * 16000))
        rows.append(
            {
                "name": clip.name,
                "kind": clip.kind,
                "heard": words.transcript,
                "words_p": None if words.llm_p is None else round(words.llm_p, 6),
                "sound_p": round(sound, 4),
            }
        )
    return rows


def run_grid(
    clips: list[Clip],
    probabilities: list[list[float]],
    judges: Judges,
    grid: list[tuple[str, str, Any]],
) -> list[dict[str, Any]]:
    def llm_words(index: int, start: int, end: int) -> tuple[float | None, float]:
        verdict = judges.words(index, start, end)
        return verdict.llm_p, verdict.cost_s

    def baseline_words(index: int, start: int, end: int) -> tuple[float | None, float]:
        verdict = judges.words(index, start, end)
        return verdict.baseline_p, verdict.cost_s

    sources: dict[str, Words | None] = {
        "sound": None,
        "words": llm_words,
        "fused": llm_words,
        "baseline": baseline_words,
    }
    rows = []
    for mode, label, params in grid:
        outcomes = [replay(i, probabilities[i], params, judges, sources[mode]) for i in range(len(clips))]
        rows.append({"mode": mode, "setting": label, **summarize(clips, outcomes)})
        log.info("%s: %s", label, {k: rows[-1][k] for k in ("complete_wait_ms", "pauses_cut")})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench turn", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--seed", type=int, default=0, help="pause lengths and background offsets")
    parser.add_argument("--limit", type=int, default=None, help="only the first N recordings (a quick look)")
    parser.add_argument("--call-path", action="store_true", help="also the shipped settings on 8 kHz G.711")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="the trade-off PNG (default beside --out)")
    parser.add_argument(
        "--live", action="store_true", help="the real pipeline in real time instead (bench/turn_live.py)"
    )
    parser.add_argument(
        "--partials",
        action="store_true",
        help="whether the last partial transcript could give the words' verdict (bench/turn_partials.py)",
    )
    args, _rest = parser.parse_known_args(argv)
    given = list(argv if argv is not None else sys.argv[1:])
    if args.live:
        from bench import turn_live

        return turn_live.main([a for a in given if a != "--live"])
    if args.partials:
        from bench import turn_partials

        return turn_partials.main([a for a in given if a != "--partials"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from appliance.config import load_settings, override
    from appliance.engine_set import (
        asr_engine,
        llm_engine,
        open_bundle,
        turn_detector,
        vad_engine,
    )
    from bench.machine import describe_machine

    settings = override(load_settings(None), endpointer={"mode": "smart_turn"})
    bundle = open_bundle(settings)
    clips = build_clips(args.data, load_whisper(bundle), seed=args.seed, limit=args.limit)
    vad, detector = vad_engine(settings, bundle), turn_detector(settings, bundle)
    asr, llm = asr_engine(settings, bundle), llm_engine(settings, bundle)
    assert detector is not None
    for engine in (vad, detector, asr, llm):
        engine.load()
    grid = settings_grid(settings.endpointer)
    shipped = settings.endpointer
    paths: dict[str, Any] = {"16 kHz": [c.audio for c in clips]}
    if args.call_path:
        paths["8 kHz call"] = [call_path(c.audio) for c in clips]
    results: dict[str, Any] = {}
    for path_name, audios in paths.items():
        judges = Judges(audios, detector, asr, llm)
        probabilities = [vad_probabilities(vad, audio) for audio in audios]
        chosen = grid if path_name == "16 kHz" else _shipped_and_today(shipped)
        rows = run_grid(clips, probabilities, judges, chosen)
        results[path_name] = {
            "smart_turn_ms": _stats(judges.audio_ms),
            "words_verdict_ms": _stats(judges.words_ms),
            "settings": rows,
            "frontier": frontier(rows),
            "verdicts": decisive_verdicts(clips, probabilities, judges, shipped),
        }
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "benchmark": "turn",
        "started_utc": stamp,
        "command": " ".join(["python -m bench turn", *(argv if argv is not None else sys.argv[1:])]),
        "machine": describe_machine(),
        "llm": settings.llm.model,
        "asr": settings.asr.model,
        "clips": [
            {
                "name": c.name,
                "kind": c.kind,
                "seconds": round(c.duration_s, 2),
                "pause_s": round(c.pause_s, 2),
                "cut_after": c.cut_after,
            }
            for c in clips
        ],
        "paths": results,
    }
    out = args.out or RESULTS / f"turn-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    picture = plot(results["16 kHz"]["settings"], args.plot or out.with_suffix(".png"))
    print(describe(result))
    print(f"\nwrote {out} and {picture}")
    return 0


def _shipped_and_today(shipped: Any) -> list[tuple[str, str, Any]]:
    """The call path: the sound as shipped before, the shipped setting, and the candidates closest to it."""
    today = shipped.model_copy(
        update={
            "judge_words": False,
            "turn_complete_threshold": 0.9,
            "turn_incomplete_threshold": 0.05,
            "turn_check_ms": 256,
        }
    )
    rows = [
        ("sound", "sound as shipped before (0.9/0.05 check 256 long 1000)", today),
        ("fused", "shipped", shipped),
    ]
    for mode, sound_ends, complete, incomplete, unsure_s in (
        ("words", 1.0, 0.35, 0.02, 1.0),
        ("fused", 0.9, 0.35, 0.05, 1.0),
        ("fused", 0.9, 0.35, 0.02, 0.8),
    ):
        rows.append(_with_words(shipped, mode, sound_ends, complete, incomplete, unsure_s))
    return rows


def describe(result: dict[str, Any]) -> str:
    counts = Counter(c["kind"] for c in result["clips"])
    lines = [
        f"{counts['complete']} complete sentences, {counts['pause_function']} paused after a function word, "
        f"{counts['pause_other']} paused elsewhere (300-1200 ms)"
    ]
    for path_name, path in result["paths"].items():
        st, words = path["smart_turn_ms"], path["words_verdict_ms"]
        lines += [
            "",
            f"== {path_name}: Smart Turn p50 {st['p50']} ms; words' verdict (ASR + LLM) p50 {words['p50']} ms, "
            f"p95 {words['p95']} ms",
            f"{'setting':<52} {'wait p50':>8} {'p95':>6} {'p99':>6} {'split':>6} {'cut':>5} {'500-900':>7} "
            f"{'fn':>5} {'other':>5}",
        ]
        for row in path["settings"]:
            wait = row["complete_wait_ms"] or {"p50": 0, "p95": 0, "p99": 0}
            lines.append(
                f"{row['setting']:<52} {wait['p50']:>8.0f} {wait['p95']:>6.0f} {wait['p99']:>6.0f}"
                f" {row['complete_split']:>6.0%} {row['pauses_cut']:>5.0%} {row['pauses_500_900_cut'] or 0:>7.0%}"
                f" {row['function_word_pauses_cut'] or 0:>5.0%} {row['other_pauses_cut'] or 0:>5.0%}"
            )
        for mode, figures in path["frontier"].items():
            lines.append(
                f"  {mode}: pauses cut at wait <= 300 ms: {figures['pauses_cut_at_wait_300ms']}; "
                f"wait p50 at <= 5% cut: {figures['wait_p50_at_cut_5pct']} ms"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
