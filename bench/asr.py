"""Whisper ASR benchmark: our ONNX runtime against faster-whisper with the same weights.

    .venv/bin/python -m bench.asr [--repeats 3] [--threads 2] [--files N] [--variants ...]

Every variant transcribes every transcribed speech file of the test data (greedy, no timestamps,
language given, same thread count); files are visited in turn, variants interleaved within each
file, so background load hits all variants alike. Prints per-file p50/p95, overall p50/p95/p99,
the ratio ours/theirs (median of per-file p50 ratios) and the corpus WER of each variant, and
writes everything to ~/.cache/appliance/bench-results/asr-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.paths import DATA, RESULTS
from engines.asr.text import word_error_rate

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = DATA
OURS = ("ours-int8-full", "ours-int8-real", "ours-fp32-full", "ours-fp32-real")
THEIRS = ("fw-float32", "fw-int8")

log = logging.getLogger("bench.asr")


@dataclass(frozen=True)
class Case:
    path: Path
    reference: str


@dataclass
class Runs:
    latencies_s: dict[str, list[float]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)


def transcribed_speech(data_dir: Path) -> list[Case]:
    """Files under speech/ whose MANIFEST.tsv transcript is complete."""
    with (data_dir / "MANIFEST.tsv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [
        Case(data_dir / row["file"], row["transcript"])
        for row in rows
        if row["file"].startswith("speech/")
        and row["transcript"] not in ("", "-")
        and not row["transcript"].startswith("[partial]")
    ]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _ours(precision: str, real_length: bool, threads: int) -> Callable[[np.ndarray], str]:
    from appliance.config import load_settings, override
    from appliance.engine_set import asr_engine, open_bundle

    chosen = {"precision": precision, "encode_real_length": real_length, "threads": threads}
    settings = override(load_settings(None), asr=chosen)
    engine = asr_engine(settings, open_bundle(settings))
    engine.load()
    return lambda audio: engine.transcribe(audio).text


def _faster_whisper(compute_type: str, threads: int) -> Callable[[np.ndarray], str]:
    from faster_whisper import WhisperModel

    from appliance.config import load_settings
    from engines.bundle import Bundle

    bundle = Bundle.open(load_settings(None).bundle.dir)
    folder = bundle.path("asr/whisper-base/ct2/model.bin").parent
    model = WhisperModel(str(folder), device="cpu", compute_type=compute_type, cpu_threads=threads)

    def transcribe(audio: np.ndarray) -> str:
        segments, _ = model.transcribe(
            audio,
            language="en",
            beam_size=1,
            temperature=0.0,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(s.text.strip() for s in segments)

    transcribe(np.zeros(16000, dtype=np.float32))  # warm-up
    return transcribe


def make_variant(name: str, threads: int) -> Callable[[np.ndarray], str]:
    if name.startswith("ours-"):
        _, precision, mode = name.split("-")
        return _ours(precision, mode == "real", threads)
    return _faster_whisper(name.removeprefix("fw-"), threads)


def run(cases: list[Case], variants: list[str], repeats: int, threads: int) -> dict[str, Runs]:
    from engines.audio import load_audio_16k

    engines = {name: make_variant(name, threads) for name in variants}
    results: dict[str, Runs] = {}
    for case in cases:
        audio = load_audio_16k(case.path)
        runs = results.setdefault(case.path.name, Runs())
        for repeat in range(repeats):
            for name, transcribe in engines.items():
                started = time.perf_counter()
                text = transcribe(audio)
                runs.latencies_s.setdefault(name, []).append(time.perf_counter() - started)
                if repeat == 0:
                    runs.texts[name] = text
        print(
            f"{case.path.name:48s} "
            + " ".join(f"{n}={statistics.median(runs.latencies_s[n]):.2f}s" for n in variants),
            flush=True,
        )
    return results


def summarize(cases: list[Case], results: dict[str, Runs], variants: list[str]) -> dict[str, Any]:
    references = [c.reference for c in cases]
    summary: dict[str, Any] = {"variants": {}, "ratios": {}}
    for name in variants:
        all_runs = [t for r in results.values() for t in r.latencies_s[name]]
        hyps = [results[c.path.name].texts[name] for c in cases]
        summary["variants"][name] = {
            "p50_s": percentile(all_runs, 50),
            "p95_s": percentile(all_runs, 95),
            "p99_s": percentile(all_runs, 99),
            "total_median_s": sum(statistics.median(r.latencies_s[name]) for r in results.values()),
            "wer_pct": 100 * word_error_rate(references, hyps),
        }
    for ours in (v for v in variants if v.startswith("ours-")):
        for theirs in (v for v in variants if v.startswith("fw-")):
            per_file = [
                statistics.median(r.latencies_s[ours]) / statistics.median(r.latencies_s[theirs])
                for r in results.values()
            ]
            summary["ratios"][f"{ours}/{theirs}"] = {
                "median_of_file_ratios": statistics.median(per_file),
                "total_ratio": summary["variants"][ours]["total_median_s"]
                / summary["variants"][theirs]["total_median_s"],
                "wer_delta_points": summary["variants"][ours]["wer_pct"]
                - summary["variants"][theirs]["wer_pct"],
            }
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    print(f"\n{'variant':18s} {'p50 s':>7s} {'p95 s':>7s} {'p99 s':>7s} {'WER %':>7s}")
    for name, row in summary["variants"].items():
        print(f"{name:18s} {row['p50_s']:7.3f} {row['p95_s']:7.3f} {row['p99_s']:7.3f} {row['wer_pct']:7.1f}")
    print(f"\n{'ours/theirs':34s} {'ratio (median per file)':>24s} {'total':>7s} {'WER delta':>10s}")
    for name, row in summary["ratios"].items():
        print(
            f"{name:34s} {row['median_of_file_ratios']:24.2f} {row['total_ratio']:7.2f} "
            f"{row['wer_delta_points']:+10.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asr", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per file and variant")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--files", type=int, default=0, help="only the first N files (0 = all)")
    parser.add_argument("--variants", nargs="+", default=[*OURS, *THEIRS], choices=[*OURS, *THEIRS])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cases = transcribed_speech(args.data)
    if args.files:
        cases = cases[: args.files]
    print(
        f"{len(cases)} files, {args.repeats} runs each, {args.threads} threads, variants: {' '.join(args.variants)}"
    )
    results = run(cases, args.variants, args.repeats, args.threads)
    summary = summarize(cases, results, args.variants)
    print_summary(summary)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"asr-{stamp}.json"
    payload = {
        "when_utc": stamp,
        "threads": args.threads,
        "repeats": args.repeats,
        "load_average": os.getloadavg(),
        "summary": summary,
        "files": {name: {"latencies_s": r.latencies_s, "texts": r.texts} for name, r in results.items()},
        "references": {c.path.name: c.reference for c in cases},
    }
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
