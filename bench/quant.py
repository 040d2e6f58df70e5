"""llama.cpp's 4-bit formats side by side on this processor: speed where a turn spends it, and quality.

    .venv/bin/python -m bench quant [--model qwen-1.5b] [--formats Q4_K_M Q4_0 IQ4_NL Q4_K_S] [--rounds 6]

Each format is made from the bundle's GGUF by llama.cpp's own quantizer (build_scripts.quantize; kept
under ~/.cache/appliance/quant/ for later runs) and loaded as the product loads it (engines.llm's
runtime, llm.threads), so llama.cpp repacks what it can for this CPU at load (Q4_0 and IQ4_NL into 8x8
interleaved blocks on AVX2/AVX-512; the log's ``CPU_REPACK``). Per format, interleaved round by round
so background load hits them alike:

- ``first_token_ms``: the turn's work after the end of speech: 7 prompt tokens on a cached system prompt
  (the words after the last partial and the template's end of message), to the first token's logits;
- ``token_ms``: one token of the reply (a decode step), the first clause's pace;
- ``perplexity`` on a held text (generated site facts, seed 99: sites no benchmark or test uses), and
  ``agrees``: how often its greedy next token is the source's (the same text, token by token).

Re-quantizing an already quantized GGUF loses more than quantizing from f16 (the bundle only has the
Q4_K_M): the quality figures are a lower bound for a format quantized from the original weights.
Writes ~/.cache/appliance/bench-results/quant-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.paths import RESULTS

PROMPT = (
    "You are the voice of a help kiosk at a factory. Answer in one or two short spoken sentences, no "
    "lists, no markdown. If the facts do not give the answer, say so."
)
QUESTION_TAIL = " the first aid room?"  # 7 tokens with the template's end of message, as after a partial


def held_text(tokens: int, runtime: Any) -> list[int]:
    from bench.site_generator import generate_sites

    text = "\n\n".join(site.facts for site in generate_sites(3, seed=99))
    return list(runtime.tokenize(text))[:tokens]


def quality(runtime: Any, tokens: list[int], reference: np.ndarray | None) -> dict[str, Any]:
    """Perplexity of ``tokens`` (one batch), and the greedy next tokens for comparison."""
    runtime.truncate(0, 0)
    logits = runtime.evaluate(tokens, 0).astype(np.float64)
    runtime.truncate(0, 0)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    nll = -log_probs[np.arange(len(tokens) - 1), tokens[1:]]
    greedy = logits.argmax(axis=1)
    result: dict[str, Any] = {"perplexity": round(float(np.exp(nll.mean())), 3), "greedy": greedy}
    if reference is not None:
        result["agrees"] = round(float((greedy == reference).mean()), 4)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quant", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen-1.5b", help="an LLM of the bundle (its GGUF is the source)")
    parser.add_argument("--formats", nargs="+", default=["Q4_K_M", "Q4_0", "IQ4_NL", "Q4_K_S"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--held-tokens", type=int, default=480)
    args = parser.parse_args(argv)

    from appliance.config import load_settings, override
    from appliance.engine_set import open_bundle
    from build_scripts.quantize import quantize
    from engines.llm.gguf import read_gguf
    from engines.llm.llama_runtime import LlamaRuntime

    settings = override(load_settings(None), llm={"model": args.model})
    bundle = open_bundle(settings)
    source = bundle.path(f"llm/{args.model}")
    source_type = read_gguf(source).file_type_name
    store = Path("~/.cache/appliance/quant").expanduser()
    store.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name in args.formats:
        if name == source_type:
            paths[name] = source
            continue
        path = store / f"{source.stem}.{name}.gguf"
        if not path.is_file():
            quantize(source, path, file_type=name, threads=settings.llm.threads)
        paths[name] = path

    load_before = os.getloadavg()
    runtimes = {
        name: LlamaRuntime(path, gpu_layers=0, context_tokens=1024, threads=settings.llm.threads)
        for name, path in paths.items()
    }
    rows: dict[str, dict[str, Any]] = {name: {"first_token_ms": [], "token_ms": []} for name in paths}
    reference: np.ndarray | None = None
    for name in sorted(paths, key=lambda n: n != source_type):  # the source first: the others agree with it
        runtime = runtimes[name]
        tokens = held_text(args.held_tokens, runtime)
        measured = quality(runtime, tokens, reference)
        greedy = measured.pop("greedy")
        reference = greedy if reference is None else reference
        rows[name].update(measured)
    for _ in range(args.rounds):
        for name, runtime in runtimes.items():
            system = list(runtime.tokenize(PROMPT))
            tail = list(runtime.tokenize(QUESTION_TAIL + "<|im_end|>\n<|im_start|>assistant\n"))[:7]
            runtime.truncate(0, 0)
            runtime.decode(system, 0)
            started = time.perf_counter()
            runtime.decode(tail, 0)
            runtime.logits(-1)
            rows[name]["first_token_ms"].append((time.perf_counter() - started) * 1000)
            position = len(system) + len(tail)
            for step in range(6):
                started = time.perf_counter()
                runtime.decode_step([(tail[step % len(tail)], position + step, 0)])
                rows[name]["token_ms"].append((time.perf_counter() - started) * 1000)
    result: dict[str, Any] = {"model": args.model, "source_file_type": source_type, "formats": {}}
    for name, row in rows.items():
        info = read_gguf(paths[name])
        result["formats"][name] = {
            "file_mb": round(info.file_size_bytes / 1e6, 1),
            "perplexity": row.get("perplexity"),
            "agrees_with_source": row.get("agrees", 1.0 if name == source_type else None),
            "first_token_ms": _stats(row["first_token_ms"]),
            "token_ms": _stats(row["token_ms"]),
        }
    for runtime in runtimes.values():
        runtime.close()
    base = result["formats"].get(source_type)
    print(f"{args.model}: {len(args.formats)} formats from {source_type}, {args.rounds} rounds interleaved")
    for name, figures in result["formats"].items():
        ratio = ""
        if base is not None and base["first_token_ms"]:
            ratio = f" ({figures['first_token_ms']['p50'] / base['first_token_ms']['p50']:.2f}x)"
        print(
            f"  {name:<7} {figures['file_mb']:>7.1f} MB  perplexity {figures['perplexity']}"
            f"  agrees {figures['agrees_with_source']}  first token p50 {figures['first_token_ms']['p50']:.1f}"
            f" p95 {figures['first_token_ms']['p95']:.1f} ms{ratio}  token p50 {figures['token_ms']['p50']:.1f}"
            f" p95 {figures['token_ms']['p95']:.1f} ms"
        )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"quant-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result["machine_load_before_after"] = [load_before, os.getloadavg()]
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


def _stats(values: list[float]) -> dict[str, float]:
    from appliance.trace.stats import percentile

    return {q: round(percentile(values, p), 1) for q, p in (("p50", 50), ("p95", 95), ("p99", 99))}


if __name__ == "__main__":
    raise SystemExit(main())
