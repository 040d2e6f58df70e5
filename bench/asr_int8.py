"""Whisper int8 quantization choices: speed, WER, and whether the integer kernels can saturate.

    .venv/bin/python -m bench.asr_int8 [--repeats 2] [--threads 2] [--files N]

ONNX Runtime's dynamic quantization multiplies uint8 activations by int8 weights. On x86-64 without
AVX-512 VNNI (or AVX-VNNI) the kernel adds pairs of products in 16 bits with saturation (vpmaddubsw),
so 8-bit weights can clip and the same graph gives other logits than on a VNNI processor; 7-bit weights
(``reduce_range``) keep every pair in range, so the integer part is exact everywhere. This quantizes
the bundle's fp32 Whisper graphs each way, runs every variant on the same recordings (real-length
encoding, as shipped, variants interleaved per file), and prints p50/p95/p99, WER, WER against the
fp32 graphs and faster-whisper fp32, and the largest |weight| per graph.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.asr import DEFAULT_DATA, RESULTS, percentile, transcribed_speech
from engines.asr.text import word_error_rate

VARIANTS = {
    "per-tensor": {"per_channel": False, "reduce_range": False},
    "per-tensor-7bit": {"per_channel": False, "reduce_range": True},
    "per-channel": {"per_channel": True, "reduce_range": False},
    "per-channel-7bit": {"per_channel": True, "reduce_range": True},
}


def largest_weight(path: Path) -> int:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    peaks = [
        int(np.abs(numpy_helper.to_array(init).astype(np.int32)).max())
        for init in model.graph.initializer
        if init.data_type == onnx.TensorProto.INT8 and init.name.endswith("_quantized")
    ]
    return max(peaks, default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asr_int8", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--files", type=int, default=0)
    args = parser.parse_args(argv)

    from functools import partial

    from appliance.config import load_settings
    from build_scripts.whisper.export import quantize_int8
    from engines.asr.artifacts import config_artifact, onnx_artifact, tokenizer_artifact
    from engines.asr.factory import REAL_LENGTH_POLICY, _onnxruntime_runner
    from engines.asr.whisper import WhisperEngine, WhisperFiles
    from engines.audio import load_audio_16k
    from engines.bundle import Bundle

    bundle = Bundle.open(load_settings(None).bundle.dir)
    fp32 = {
        f"{p}-fp32": bundle.path(onnx_artifact("whisper-base", p, "fp32")) for p in ("encoder", "decoder")
    }
    cases = transcribed_speech(args.data)[: args.files or None]
    runner = partial(_onnxruntime_runner, device="cpu", threads=args.threads)

    def engine(encoder: Path, decoder: Path) -> WhisperEngine:
        files = WhisperFiles(
            config=bundle.path(config_artifact("whisper-base")),
            tokenizer=bundle.path(tokenizer_artifact("whisper-base")),
            encoder=encoder,
            decoder=decoder,
        )
        made = WhisperEngine(files, runner, language="en", policy=REAL_LENGTH_POLICY)
        made.load()
        return made

    engines: dict[str, WhisperEngine] = {"fp32": engine(fp32["encoder-fp32"], fp32["decoder-fp32"])}
    peaks: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="asr-int8-") as tmp:
        for name, options in VARIANTS.items():
            out = Path(tmp) / name
            out.mkdir()
            graphs = quantize_int8(fp32, out, **options)
            peaks[name] = {part: largest_weight(graphs[f"{part}-int8"]) for part in ("encoder", "decoder")}
            engines[name] = engine(graphs["encoder-int8"], graphs["decoder-int8"])
        print(f"{len(cases)} files, {args.repeats} runs each, {args.threads} threads; |weight| max: {peaks}")
        latencies: dict[str, list[float]] = {n: [] for n in engines}
        texts: dict[str, list[str]] = {n: [] for n in engines}
        for case in cases:
            audio = load_audio_16k(case.path)
            for repeat in range(args.repeats):
                for name, made in engines.items():
                    started = time.perf_counter()
                    text = made.transcribe(audio).text
                    latencies[name].append(time.perf_counter() - started)
                    if repeat == 0:
                        texts[name].append(text)
            print(
                f"{case.path.name:48s} " + " ".join(f"{n}={latencies[n][-1]:.2f}s" for n in engines),
                flush=True,
            )
    references = [c.reference for c in cases]
    summary: dict[str, Any] = {}
    base_p50 = percentile(latencies["fp32"], 50)
    print(
        f"\n{'variant':18s} {'p50 s':>7s} {'p95 s':>7s} {'p99 s':>7s} {'vs fp32':>8s} {'WER %':>7s} {'WER vs fp32':>12s}"
    )
    for name in engines:
        row: dict[str, Any] = {
            "p50_s": percentile(latencies[name], 50),
            "p95_s": percentile(latencies[name], 95),
            "p99_s": percentile(latencies[name], 99),
            "wer_pct": 100 * word_error_rate(references, texts[name]),
            "wer_vs_fp32_pct": 100 * word_error_rate(texts["fp32"], texts[name]),
            "max_abs_weight": peaks.get(name),
            **VARIANTS.get(name, {}),
        }
        row["p50_ratio_vs_fp32"] = row["p50_s"] / base_p50
        summary[name] = row
        print(
            f"{name:18s} {row['p50_s']:7.3f} {row['p95_s']:7.3f} {row['p99_s']:7.3f} "
            f"{row['p50_ratio_vs_fp32']:8.2f} {row['wer_pct']:7.2f} {row['wer_vs_fp32_pct']:12.2f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"asr-int8-{stamp}.json"
    cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line), "")
    payload = {
        "when_utc": stamp,
        "cpu": cpu.split(":")[-1].strip(),
        "vnni": "avx512_vnni" in Path("/proc/cpuinfo").read_text()
        or "avx_vnni" in Path("/proc/cpuinfo").read_text(),
        "load_average": os.getloadavg(),
        "summary": summary,
        "texts": texts,
        "median_latency_s": {n: statistics.median(v) for n, v in latencies.items()},
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
