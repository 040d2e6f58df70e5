"""llama.cpp builds side by side: prefill and decode speed of the same GGUF on each build.

    .venv/bin/python -m bench.llama_builds --build native=/path/to/lib [--build other=DIR]
        [--model gemma-270m] [--rounds 6] [--threads 2]

The installed build (``portable``, the set-up's profile) always runs; each ``--build NAME=DIR`` is a
folder holding another build's libllama/libggml libraries of the same llama.cpp version (loaded
through ``LLAMA_CPP_LIB_PATH``). Every round starts one fresh child process per build, in turn, so
background load hits all builds alike; each child prefills a 128-token prompt and decodes 32 tokens
three times. Prints p50/p95/p99 tokens/s per build and the ratios to the installed build, and writes
~/.cache/appliance/bench-results/llama-builds-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.paths import RESULTS

REPO = Path(__file__).resolve().parents[1]
PROMPT_TOKENS = 128
DECODE_TOKENS = 32
REPEATS = 3
INSTALLED = "portable"


def _child(model: Path, threads: int) -> None:
    from engines.llm.llama_runtime import LlamaRuntime, SamplingParams, llama_cpp

    runtime = LlamaRuntime(model, gpu_layers=0, context_tokens=512, threads=threads)
    text = " ".join(["The quick brown fox jumps over the lazy dog near the loading bay."] * 20)
    prompt = runtime.tokenize(text)[:PROMPT_TOKENS]
    sampler = runtime.sampler(SamplingParams(temperature=0.0))
    prefill, decode = [], []
    for _ in range(REPEATS):
        runtime.truncate(0)
        started = time.perf_counter()
        runtime.decode(prompt)
        runtime.sample(sampler)  # waits for the logits
        prefill.append(len(prompt) / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(DECODE_TOKENS):
            runtime.decode([runtime.sample(sampler)])
        runtime.sample(sampler)
        decode.append(DECODE_TOKENS / (time.perf_counter() - started))
    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    runtime.free_sampler(sampler)
    runtime.close()
    print(json.dumps({"prefill_tok_s": prefill, "decode_tok_s": decode, "system_info": info}))


def _percentiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    array = np.asarray(values)
    return {f"p{q}": float(np.percentile(array, q)) for q in (50, 95, 99)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.llama_builds", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--build", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--model", default="gemma-270m")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.threads)
        return 0

    from appliance.config import load_settings
    from engines.bundle import Bundle

    bundle = Bundle.open(load_settings(None).bundle.dir)
    model = bundle.path(f"llm/{args.model}")
    builds: dict[str, str | None] = {INSTALLED: None}
    for spec in args.build:
        name, _, folder = spec.partition("=")
        builds[name] = str(Path(folder).resolve())
    samples: dict[str, dict[str, list[float]]] = {n: {"prefill": [], "decode": []} for n in builds}
    info: dict[str, str] = {}
    for round_ in range(args.rounds):
        for name, folder in builds.items():
            env = dict(os.environ)
            env.pop("LLAMA_CPP_LIB_PATH", None)
            if folder:
                env["LLAMA_CPP_LIB_PATH"] = folder
            command = [
                sys.executable,
                "-m",
                "bench.llama_builds",
                "--child",
                str(model),
                "--threads",
                str(args.threads),
            ]
            child = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=REPO)
            report = json.loads(child.stdout.strip().splitlines()[-1])
            samples[name]["prefill"] += report["prefill_tok_s"]
            samples[name]["decode"] += report["decode_tok_s"]
            info[name] = report["system_info"]
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    summary: dict[str, Any] = {}
    base = {k: _percentiles(v)["p50"] for k, v in samples[INSTALLED].items()}
    print(
        f"\n{args.model}, {args.threads} threads, {PROMPT_TOKENS}-token prefill, {DECODE_TOKENS}-token decode"
    )
    print(
        f"{'build':10s} {'prefill tok/s p50/p95/p99':>28s} {'ratio':>6s} {'decode tok/s p50/p95/p99':>28s} {'ratio':>6s}"
    )
    for name, kinds in samples.items():
        row = {kind: _percentiles(values) for kind, values in kinds.items()}
        row["ratio_to_installed"] = {kind: row[kind]["p50"] / base[kind] for kind in kinds}
        summary[name] = row
        cells = []
        for kind in ("prefill", "decode"):
            p = row[kind]
            cells.append(
                f"{p['p50']:8.1f} {p['p95']:8.1f} {p['p99']:8.1f}  {row['ratio_to_installed'][kind]:6.2f}"
            )
        print(f"{name:10s} {cells[0]:>35s} {cells[1]:>35s}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"llama-builds-{stamp}.json"
    payload = {"when_utc": stamp, "model": args.model, "threads": args.threads, "builds": builds,
               "system_info": info, "summary": summary, "samples": samples, "load_average": os.getloadavg()}  # fmt: skip
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
