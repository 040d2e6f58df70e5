"""End-to-end turn latency: real speech through the real pipeline in real time, side by side with the
processing floor and a sequential pipeline, per LLM; cold start and peak RSS; JSON and PNG plots.

    .venv/bin/python -m bench [--llm gemma-270m qwen-1.5b] [--turns 20] [--out DIR]

For each LLM the engines are loaded once; each turn feeds a real recording (../shared/data/speech/en)
through ``one_turn`` at microphone pace, then measures the floor and the sequential baseline on the same
engines (bench/e2e_turns.py). Cold start runs in a subprocess (bench/e2e_cold.py). Prints p50/p95/p99
of ``speech_end -> playback_start``, the stage breakdown, latency/floor, latency - floor and the speed-up
vs sequential, and writes result.json plus PNGs to ~/.cache/appliance/bench-results/<time>/. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.e2e_turns import Utterance, run_turn
from bench.machine import peak_rss_mb
from bench.paths import DATA, RESULTS

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = DATA
SCHEMA_VERSION = 1
MIN_UTTERANCE_S, MAX_UTTERANCE_S, MIN_WORDS = 1.5, 5.0, 4

log = logging.getLogger("bench.e2e")


def load_utterances(data_dir: Path) -> list[Utterance]:
    """The short English sentences with a full transcript, in file order."""
    manifest = data_dir / "MANIFEST.tsv"
    if not manifest.is_file():
        raise SystemExit(f"error: {manifest} not found (fix: pass --data DIR with the shared test data)")
    found: list[Utterance] = []
    with manifest.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            text = row["transcript"]
            if not row["file"].startswith("speech/en/") or text == "-" or text.startswith("[partial]"):
                continue
            seconds = float(row["seconds"])
            if MIN_UTTERANCE_S <= seconds <= MAX_UTTERANCE_S and len(text.split()) >= MIN_WORDS:
                found.append(Utterance(data_dir / row["file"], seconds, text))
    return sorted(found, key=lambda u: u.path.name)


def summary(values: list[float]) -> dict[str, float] | None:
    from appliance.trace.stats import percentile

    if not values:
        return None
    return {
        "count": len(values),
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
    }


def summarize_model(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from appliance.trace.record import STAGES

    good = [r for r in rows if r.get("latency_ms") is not None and not r.get("error")]
    stages = {
        s: summary([r["stages_ms"][s] for r in good if r["stages_ms"].get(s) is not None]) for s in STAGES
    }
    floor_keys = (
        "asr_ms",
        "llm_first_clause_ms",
        "tts_first_chunk_ms",
        "floor_ms",
        "llm_total_ms",
        "tts_whole_ms",
        "endpoint_plus_floor_ms",
    )
    from engines.asr.text import word_error_rate

    counters = (
        "partials",
        "partial_asr_ms",
        "prefill_tokens",
        "prefill_reused",
        "prefill_discarded",
        "llm_prompt_tokens",
        "llm_evaluated_tokens",
    )
    return {
        "turns_ok": len(good),
        "turns_failed": len(rows) - len(good),
        "same_reply_as_baseline": sum(bool(r.get("same_reply")) for r in good),
        "transcript_wer": round(
            word_error_rate([r["reference"] for r in good], [r["transcript"] for r in good]), 4
        )
        if good
        else None,
        # Per turn: partial transcripts and LLM prefill while the person spoke, and the prompt tokens
        # the LLM still had to evaluate after the end of speech (llm_evaluated_tokens).
        "during_speech": {k: summary([float(r.get(k) or 0) for r in good]) for k in counters},
        "turn_latency_ms": summary([r["latency_ms"] for r in good]),
        "stages_ms": stages,
        "floor_ms": {k: summary([r["floor"][k] for r in good]) for k in floor_keys},
        "sequential_ms": summary([r["floor"]["sequential_ms"] for r in good]),
        "latency_over_floor": summary([r["latency_over_floor"] for r in good]),
        "latency_minus_floor_ms": summary([r["latency_minus_floor_ms"] for r in good]),
        "speedup_vs_sequential": summary([r["speedup_vs_sequential"] for r in good]),
        "stage_profile_ms": stage_profile(good),
    }


def stage_profile(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float] | None]]:
    """Per stage, per kind of engine work (and ``no_engine``): its ms inside the stage over the turns
    (0 in a turn where it did not run)."""
    profile: dict[str, dict[str, dict[str, float] | None]] = {}
    for stage in sorted({stage for r in rows for stage in r.get("engine_ms", {})}):
        kinds = sorted({k for r in rows for k in r.get("engine_ms", {}).get(stage, {})})
        profile[stage] = {
            kind: summary(
                [float(r["engine_ms"].get(stage, {}).get(kind, 0.0)) for r in rows if "engine_ms" in r]
            )
            for kind in kinds
        }
    return profile


def cold_start(llm: str, wav: Path, *, as_daemon: bool = False) -> dict[str, Any]:
    """Process start -> engines loaded and warm, in a fresh interpreter; its peak RSS then and after one
    turn from ``wav``. ``as_daemon``: with the checksum pass and smoke decode ``appliance run`` does."""
    command = [sys.executable, "-m", "bench.e2e_cold", "--llm", llm, "--wav", str(wav)]
    command += ["--started-at", repr(time.time())] + (["--as-daemon"] if as_daemon else [])
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-500:]}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def parse_variant(spec: str) -> dict[str, dict[str, Any]]:
    """``partials.partial_interval_ms=600,partials.partial_model=whisper-tiny-en`` -> settings overrides."""
    overrides: dict[str, dict[str, Any]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot and section and name):
            raise ValueError(f"bad variant item {item!r}: expected section.key=value")
        overrides.setdefault(section, {})[name] = _setting_value(value)
    return overrides


def _setting_value(text: str) -> Any:
    """Numbers, true/false and lists as JSON; anything else (a model name) as the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


async def bench_model(
    llm: str,
    utterances: list[Utterance],
    overrides: dict[str, dict[str, Any]] | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    from appliance.config import load_settings, override
    from appliance.engine_set import build_engines, llm_engine, load_engines, open_bundle, session_config
    from bench.e2e_turns import TurnAudio
    from bench.engine_timeline import EngineTimeline

    settings = override(load_settings(None), llm={"model": llm})
    for section, values in (overrides or {}).items():
        settings = override(settings, **{section: values})
    bundle = open_bundle(settings)
    engines = build_engines(settings, bundle)
    engines.asr = TurnAudio(engines.asr)  # the baselines transcribe exactly what the turn did
    if seed is not None:
        engines.use_llm(llm_engine(settings, bundle, seed=seed))
    config = session_config(settings)
    rows: list[dict[str, Any]] = []
    timeline = EngineTimeline()
    try:
        load_s = await load_engines(engines)
        timeline.install(engines)
        for index, utterance in enumerate(utterances, 1):
            row = await run_turn(engines, utterance, config, timeline)
            rows.append(row)
            log.info(
                "%s turn %d/%d %s: latency %s ms, floor %s ms, sequential %s ms",
                llm,
                index,
                len(utterances),
                utterance.path.name,
                row.get("latency_ms"),
                row.get("floor", {}).get("floor_ms"),
                row.get("floor", {}).get("sequential_ms"),
            )
    finally:
        timeline.uninstall()
        await engines.close()
    return {
        "llm": llm,
        "endpointer_mode": settings.endpointer.mode,
        "partial_interval_ms": settings.partials.partial_interval_ms,
        "variant": overrides or {},
        "seed": seed,
        "settings": {
            "endpointer": settings.endpointer.model_dump(),
            "first_clause_words": settings.tts.first_clause_words,
            "max_reply_tokens": settings.llm.max_reply_tokens,
            "temperature": settings.llm.temperature,
            "asr_model": settings.asr.model,
            "partial_interval_ms": settings.partials.partial_interval_ms,
            "partial_model": settings.partials.partial_model or settings.asr.model,
            "llm_prefill": settings.partials.prefill,
            "tts_voice": settings.tts.voice,
            "threads": {
                "asr": settings.asr.threads,
                "llm": settings.llm.threads,
                "vad": settings.vad.threads,
            },
        },
        "engine_load_s": {k: round(v, 3) for k, v in load_s.items()},
        "summary": summarize_model(rows),
        "bench_process_peak_rss_mb": peak_rss_mb(),
        "turns": rows,
    }


def _fmt(stats: dict[str, float] | None, unit: str = "") -> str:
    if not stats:
        return "n/a"
    return f"p50 {stats['p50']:.1f}{unit}  p95 {stats['p95']:.1f}{unit}  p99 {stats['p99']:.1f}{unit}"


def describe(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {result['machine']['cpu_model']}, {result['machine']['cpu_cores_logical']} cores, GPU {result['machine']['gpu']}"
    ]
    for model in result["models"]:
        s = model["summary"]
        cold = model["cold_start"]
        lines += [
            "",
            f"== {model['llm']}, endpointer {model.get('endpointer_mode', 'silence')}, partials"
            f" {model.get('partial_interval_ms') or 'off'}, variant {model.get('variant') or '-'}:"
            f" {s['turns_ok']} turns ok,"
            f" {s['turns_failed']} failed",
            f"turn latency (speech_end -> playback_start) ms: {_fmt(s['turn_latency_ms'])}",
            f"floor (ASR + LLM first clause + TTS first chunk) ms: {_fmt(s['floor_ms']['floor_ms'])}",
            f"endpoint + floor (a pipeline that starts at the endpoint) ms: {_fmt(s['floor_ms']['endpoint_plus_floor_ms'])}",
            f"sequential (endpoint + ASR + whole reply + whole synthesis) ms: {_fmt(s['sequential_ms'])}",
            f"latency / floor: {_fmt(s['latency_over_floor'], 'x')}   (goal: latency <= floor + 50 ms)",
            f"latency - floor ms: {_fmt(s['latency_minus_floor_ms'])}",
            f"speed-up vs sequential: {_fmt(s['speedup_vs_sequential'], 'x')}   (goal >= 3x)",
            f"transcript WER {s.get('transcript_wer')}; prompt tokens evaluated after the end of speech:"
            f" {_fmt(s['during_speech']['llm_evaluated_tokens'])}",
            f"partials per turn: {_fmt(s['during_speech']['partials'])}; prefill tokens reused:"
            f" {_fmt(s['during_speech']['prefill_reused'])}, discarded: {_fmt(s['during_speech']['prefill_discarded'])}",
        ]
        for stage, stats in s["stages_ms"].items():
            lines.append(f"  stage {stage:<16} {_fmt(stats)}")
            for kind, busy in s.get("stage_profile_ms", {}).get(stage, {}).items():
                if busy and busy["p95"] >= 1.0:
                    lines.append(f"      {kind:<28} {_fmt(busy)}")
        lines.append(
            f"cold start (engines only): {cold.get('ready_s', 'n/a')} s to engines ready, peak RSS"
            f" {cold.get('peak_rss_mb', 'n/a')} MB ready, {cold.get('peak_rss_after_turn_mb', 'n/a')} MB after"
            " one turn (fresh process)" + (f" ({cold['error']})" if "error" in cold else "")
        )
        daemon = model.get("cold_start_as_daemon", {})
        lines.append(
            f"cold start as appliance run (checksum pass + llama.cpp smoke decode, {daemon.get('start_checks_s', 'n/a')}"
            f" s of it): {daemon.get('ready_s', 'n/a')} s to engines ready"
            + (f" ({daemon['error']})" if "error" in daemon else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--llm", nargs="+", default=None, help="LLM models (default: every one in the bundle)"
    )
    parser.add_argument(
        "--turns", type=int, default=20, help="turns per LLM, cycling through the utterances (default 20)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result folder (default ~/.cache/appliance/bench-results/<time>/)",
    )
    parser.add_argument(
        "--data", type=Path, default=Path(os.environ.get("APPLIANCE_TEST_DATA", DEFAULT_DATA))
    )
    parser.add_argument(
        "--endpointer",
        nargs="+",
        choices=["silence", "smart_turn"],
        default=None,
        help="endpointer modes to run side by side (default: the configured one)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SPEC",
        help="settings to run side by side, e.g. partials.partial_interval_ms=600,asr.model=whisper-tiny-en"
        " (repeatable; combined with --endpointer)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed the LLM's sampling: pipeline and baselines give the same reply",
    )
    parser.add_argument("--no-cold-start", action="store_true", help="skip the cold-start subprocess")
    parser.add_argument("--no-plots", action="store_true", help="JSON only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.turns < 1:
        parser.error(f"--turns must be >= 1, got {args.turns}")

    from appliance.config import load_settings
    from appliance.engine_set import open_bundle
    from bench.machine import describe_machine
    from engines.llm import available_models

    bundle_models = available_models(open_bundle(load_settings(None)))
    models = args.llm or bundle_models
    unknown = [m for m in models if m not in bundle_models]
    if unknown:
        parser.error(f"unknown LLM {', '.join(unknown)}; the bundle has: {', '.join(bundle_models)}")
    pool = load_utterances(args.data)
    if not pool:
        parser.error(f"no short English sentences found in {args.data}/MANIFEST.tsv")
    utterances = [pool[i % len(pool)] for i in range(args.turns)]

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / stamp
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "benchmark": "e2e",
        "started_utc": stamp,
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "machine": describe_machine(),
        "load_average_before": list(os.getloadavg()),  # a contended run shows here
        "turns_per_model": args.turns,
        "models": [],
        "plots": [],
    }
    try:
        specs = [parse_variant(v) for v in args.variant] or [{}]
    except ValueError as err:
        parser.error(str(err))
    variants: list[dict[str, dict[str, Any]]] = []
    for mode in args.endpointer or [None]:
        for spec in specs:
            variant = {section: dict(values) for section, values in spec.items()}
            if mode is not None:
                variant.setdefault("endpointer", {})["mode"] = mode
            variants.append(variant)
    for llm in models:
        for index, variant in enumerate(variants):
            model = asyncio.run(bench_model(llm, utterances, variant, args.seed))
            if args.no_cold_start or index > 0:
                model["cold_start"] = model["cold_start_as_daemon"] = {"skipped": True}
            else:
                model["cold_start"] = cold_start(llm, utterances[0].path)
                model["cold_start_as_daemon"] = cold_start(llm, utterances[0].path, as_daemon=True)
            result["models"].append(model)
    result["load_average_after"] = list(os.getloadavg())
    if not args.no_plots:
        from bench.plots import write_plots

        result["plots"] = [path.name for path in write_plots(result, out)]
    path = out / "result.json"
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(describe(result))
    print(f"\nwrote {path}" + (f" and {', '.join(result['plots'])}" if result["plots"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
