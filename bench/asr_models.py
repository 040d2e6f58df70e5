"""Whisper models side by side as the appliance runs them: WER and latency per model, on the
microphone path (16 kHz) and the call path (8 kHz G.711, upsampled), and as partial transcripts
(the first 60% of each utterance, compared with the same words of the reference).

    .venv/bin/python -m bench.asr_models [--models whisper-base whisper-tiny-en] [--repeats 2]

Every model uses the shipped settings (int8, real-length encoding, asr.threads); files are visited
in turn and models interleaved within each file, so background load hits them alike. Writes
~/.cache/appliance/bench-results/asr-models-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.asr import DEFAULT_DATA, RESULTS, transcribed_speech
from bench.e2e import summary
from bench.turn_set import call_path

PARTIAL_SHARE = 0.6

log = logging.getLogger("bench.asr_models")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asr_models", description=__doc__)
    parser.add_argument("--models", nargs="+", default=["whisper-base", "whisper-tiny-en"])
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per file, model and path")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from appliance.config import load_settings
    from appliance.engine_set import asr_engine, open_bundle
    from bench.machine import describe_machine
    from engines.asr.text import word_error_rate
    from engines.audio import load_audio_16k

    settings = load_settings(None)
    bundle = open_bundle(settings)
    engines = {name: asr_engine(settings, bundle, model=name) for name in args.models}
    for engine in engines.values():
        engine.load()
    cases = [c for c in transcribed_speech(args.data) if "/speech/en/" in str(c.path)]
    paths = ("microphone", "call", "partial")
    times: dict[tuple[str, str], list[float]] = {(m, p): [] for m in engines for p in paths}
    texts: dict[tuple[str, str], list[str]] = {(m, p): [] for m in engines for p in paths}
    references: dict[str, list[str]] = {p: [] for p in paths}
    load_before = list(os.getloadavg())
    for case in cases:
        audio = load_audio_16k(case.path)
        words = case.reference.split()
        inputs = {
            "microphone": (audio, case.reference),
            "call": (call_path(audio), case.reference),
            # A partial hears the start of the utterance; its reference is the words spoken by then
            # (by word count, an approximation that treats every word as equally long).
            "partial": (
                audio[: int(len(audio) * PARTIAL_SHARE)],
                " ".join(words[: max(1, int(len(words) * PARTIAL_SHARE))]),
            ),
        }
        for path, (samples, reference) in inputs.items():
            references[path].append(reference)
            for name, engine in engines.items():
                for repeat in range(args.repeats):
                    started = time.perf_counter()
                    text = engine.transcribe(samples).text
                    times[(name, path)].append((time.perf_counter() - started) * 1000.0)
                    if repeat == 0:
                        texts[(name, path)].append(text)
    result: dict[str, Any] = {
        "benchmark": "asr_models",
        "command": " ".join(["python -m bench.asr_models", *(argv if argv is not None else sys.argv[1:])]),
        "machine": describe_machine(),
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "files": len(cases),
        "settings": {
            "precision": settings.asr.precision,
            "encode_real_length": settings.asr.encode_real_length,
        },
        "models": {
            name: {
                path: {
                    "wer": round(word_error_rate(references[path], texts[(name, path)]), 4),
                    "latency_ms": summary(times[(name, path)]),
                }
                for path in paths
            }
            for name in engines
        },
    }
    base = args.models[0]
    for name in args.models[1:]:
        result["models"][name]["latency_p50_vs_" + base] = {
            path: round(
                result["models"][name][path]["latency_ms"]["p50"]
                / result["models"][base][path]["latency_ms"]["p50"],
                3,
            )
            for path in paths
        }
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"asr-models-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for name, by_path in result["models"].items():
        for path in paths:
            figures = by_path[path]
            lat = figures["latency_ms"]
            print(
                f"{name:<18} {path:<10} WER {figures['wer'] * 100:5.1f}%  "
                f"p50 {lat['p50']:6.1f} ms  p95 {lat['p95']:6.1f}  p99 {lat['p99']:6.1f}"
            )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
