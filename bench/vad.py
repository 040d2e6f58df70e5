"""Silero VAD per-frame cost: onnxruntime vs torch (same model, same frames), plus the endpointer.

    .venv/bin/python -m bench.vad [--repeats 3] [--seconds 60] [--torch-threads 1]

Every backend scores the same 16 kHz frames (the 60 s Silero test recording by default), each
frame timed on its own; backends take turns per repeat so background load hits them alike. Prints
p50/p95/p99 per frame, the real-time factor, the torch/onnxruntime ratio, and the endpointer's own
cost per frame, and writes ~/.cache/appliance/bench-results/vad-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.paths import DATA, RESULTS

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = DATA
FRAME_MS = 32.0

log = logging.getLogger("bench.vad")


def _stats_ms(values_s: list[float]) -> dict[str, float]:
    ms = np.asarray(values_s) * 1000
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "frames": int(ms.size),
    }


def _time_frames(stream: Any, frames: list[np.ndarray]) -> list[float]:
    times = []
    for frame in frames:
        started = time.perf_counter()
        stream.probability(frame)
        times.append(time.perf_counter() - started)
    return times


def _endpointer_cost(probabilities: list[float]) -> list[float]:
    from engines.vad.endpointer import Endpointer
    from engines.vad.params import EndpointerParams

    endpointer = Endpointer(EndpointerParams(mode="silence"))
    times = []
    for probability in probabilities:
        started = time.perf_counter()
        endpointer.feed(probability, FRAME_MS / 1000)
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vad", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="audio length scored per repeat")
    parser.add_argument("--file", type=Path, default=DEFAULT_DATA / "vad/speech/silero_test.wav")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch's process-wide thread count (default: torch's own, usually the core count)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from appliance.config import load_settings, override
    from appliance.engine_set import open_bundle, vad_engine
    from engines.audio import load_audio_16k
    from engines.vad.frames import iter_frames

    settings = load_settings(None)
    bundle = open_bundle(settings)
    audio = load_audio_16k(args.file)[: int(args.seconds * 16000)]
    frames = list(iter_frames(audio))
    engines = {}
    load_s = {}
    for backend in ("onnxruntime", "torch"):
        threads = args.torch_threads if backend == "torch" else 1
        engine = vad_engine(override(settings, vad={"backend": backend, "threads": threads}), bundle)
        started = time.perf_counter()
        engine.load()
        load_s[backend] = time.perf_counter() - started
        engines[backend] = engine
    import torch

    times: dict[str, list[float]] = {name: [] for name in engines}
    for repeat in range(args.repeats):
        for name, engine in engines.items():
            times[name] += _time_frames(engine.stream(), frames)
        log.info("repeat %d/%d done", repeat + 1, args.repeats)
    probabilities = [engines["onnxruntime"].stream().probability(f) for f in frames]
    endpointer_times = _endpointer_cost(probabilities * args.repeats)

    stats = {name: _stats_ms(values) for name, values in times.items()}
    stats["endpointer"] = _stats_ms(endpointer_times)
    ratio = stats["torch"]["p50_ms"] / stats["onnxruntime"]["p50_ms"]
    print(f"Silero VAD, {len(frames)} frames of {args.file.name} x {args.repeats} repeats, one frame = 32 ms")
    print(f"torch threads: {torch.get_num_threads()}, onnxruntime intra-op threads: 1")
    print(f"{'':12} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'RTF':>7} {'load s':>7}")
    for name, row in stats.items():
        rtf = row["mean_ms"] / FRAME_MS
        loaded = f"{load_s[name]:7.2f}" if name in load_s else f"{'-':>7}"
        print(
            f"{name:12} {row['p50_ms']:8.3f} {row['p95_ms']:8.3f} {row['p99_ms']:8.3f} "
            f"{row['mean_ms']:8.3f} {rtf:7.4f} {loaded}"
        )
    print(f"torch / onnxruntime (p50): {ratio:.2f}x")

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"vad-{stamp}.json"
    record = {
        "file": str(args.file),
        "frames": len(frames),
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "load_s": load_s,
        "stats": stats,
        "torch_over_onnxruntime_p50": ratio,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"written {out}")
    for engine in engines.values():
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
