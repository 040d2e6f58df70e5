"""LLM benchmark: time to first token with the cached system prompt, cold, and llama.cpp's raw
prefill of only the new tokens; decode speed. Both bundle models by default.

    .venv/bin/python -m bench.llm [--models gemma-270m qwen-1.5b] [--repeats 3] [--threads 2]
                                  [--gpu-layers 0] [--reply-tokens 32] [--site-facts]

For each model the engine (system prompt cached at load) and a second, bare llama.cpp context on
the same GGUF are loaded. Every prompt is a first turn of a new conversation; the variants run
interleaved per prompt, so background load hits them alike:

- cached: the engine's own turn (``first_token_s``: call to first streamed text);
- cold:   the same prompt tokens, system prompt included, prefilled from an empty cache;
- raw:    only the tokens after the system prompt, prefilled by llama.cpp on a cache that holds
          the system prompt (the floor for ``cached``: what is left is the engine's own overhead).

Prints p50/p95/p99 of each, the ratios cold/cached and cached/raw (of the p50s), decode tokens/s,
what a batch of 4 tokens costs in single-token steps (speculative decoding's break-even), and writes everything to ~/.cache/appliance/bench-results/llm-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from appliance.agent.prompt import system_prompt as agent_prompt
from appliance.config import load_settings, override
from appliance.engine_set import llm_engine
from bench.paths import RESULTS
from engines.bundle import Bundle
from engines.llm import GenerationStats, Message
from engines.llm.llamacpp import LlamaCppLlm

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("cached", "cold", "raw")
SPECULATION_BATCH = 4
PROMPTS = (
    "Where is the nearest exit?",
    "What time does the canteen open tomorrow morning?",
    "Can you tell me how to get to loading bay four from here?",
    "Is the north car park full right now, and where else can I park?",
    "I have a delivery for the warehouse manager, who should I call?",
    "What should I do if the fire alarm goes off while I am in the workshop?",
)

# What a site adds to the persona (--site-facts): the system prompt a real device carries.
SITE_FACTS = (
    " Site facts: the depot is open from 6 am to 10 pm on weekdays and 8 am to 6 pm at weekends."
    " The canteen is on the first floor and opens at 7 am. Loading bays one to six are on the east"
    " side; bay four is reserved for refrigerated goods. Visitors park in the north car park;"
    " staff park in the south car park. The warehouse manager is Dana Ortiz, extension 2145."
    " In a fire alarm, leave by the nearest green exit and gather at assembly point B by the gate."
    " Lost badges are replaced at reception, which is staffed from 7 am to 7 pm."
)

log = logging.getLogger("bench.llm")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


class ModelBench:
    def __init__(self, bundle: Bundle, model: str, *, system_prompt: str, args: argparse.Namespace) -> None:
        from engines.llm.llama_runtime import LlamaRuntime

        # Greedy, no stop strings and a fixed reply length: every variant times the same tokens.
        settings = override(
            load_settings(None),
            llm={
                "model": model,
                "gpu_layers": args.gpu_layers,
                "context_tokens": args.context_tokens,
                "max_reply_tokens": args.reply_tokens,
                "temperature": 0.0,
                "threads": args.threads,
                "stop": (),
            },
        )
        engine = llm_engine(settings, bundle, prompt=system_prompt)
        assert isinstance(engine, LlamaCppLlm)
        started = time.perf_counter()
        engine.load()
        self.load_s = time.perf_counter() - started
        self.engine = engine
        self.raw = LlamaRuntime(
            bundle.path(f"llm/{model}"),
            gpu_layers=args.gpu_layers,
            context_tokens=args.context_tokens,
            threads=args.threads,
        )
        self.system_tokens = engine.prompt_tokens([Message("user", "x")])[: engine.system_prompt_tokens]
        self.reply_tokens = args.reply_tokens
        self._first_token(self.system_tokens, [])  # warm the bare context's graphs

    def cached(self, history: list[Message]) -> tuple[float, GenerationStats]:
        stats = GenerationStats()
        for _ in self.engine.stream(history, stats=stats):
            pass
        assert stats.first_token_s is not None
        return stats.first_token_s, stats

    def cold(self, history: list[Message]) -> float:
        return self._first_token([], self.engine.prompt_tokens(history))

    def raw_new_tokens(self, history: list[Message]) -> float:
        prompt = self.engine.prompt_tokens(history)
        return self._first_token(prompt[: len(self.system_tokens)], prompt[len(self.system_tokens) :])

    def raw_decode_tokens_per_s(self, history: list[Message]) -> float:
        """llama.cpp alone: greedy tokens after the prompt, one decode call each."""
        self._first_token([], self.engine.prompt_tokens(history))
        sampler = self.raw.sampler(_greedy())
        try:
            started = time.perf_counter()
            for _ in range(self.reply_tokens):
                self.raw.decode([self.raw.sample(sampler)])
            return self.reply_tokens / (time.perf_counter() - started)
        finally:
            self.raw.free_sampler(sampler)

    def raw_batch_steps(self, history: list[Message], size: int = SPECULATION_BATCH) -> float:
        """What one batch of ``size`` tokens costs in single-token steps, after the prompt: a draft
        model's guesses are checked in one such batch, so speculative decoding gains only where this
        is well below the guesses accepted (plus the draft's own steps)."""
        prompt = self.engine.prompt_tokens(history)
        self._first_token([], prompt)
        base = self.raw.kv_length()
        tokens = prompt[-size:]  # which tokens does not change the cost
        one: list[float] = []
        batch: list[float] = []
        for _ in range(3):
            for chunk, times in ((tokens[:1], one), (tokens, batch)):
                self.raw.truncate(base)
                started = time.perf_counter()
                self.raw.decode(chunk)
                self.raw.logits()  # waits for the graph, as a sample would
                times.append(time.perf_counter() - started)
        return statistics.median(batch) / statistics.median(one)

    def _first_token(self, untimed: list[int], timed: list[int]) -> float:
        self.raw.truncate(0)
        if untimed:
            self.raw.decode(untimed)
        sampler = self.raw.sampler(_greedy())
        try:
            started = time.perf_counter()
            self.raw.decode(timed)
            self.raw.sample(sampler)
            return time.perf_counter() - started
        finally:
            self.raw.free_sampler(sampler)

    def close(self) -> None:
        self.engine.close()
        self.raw.close()


def _greedy() -> Any:
    from engines.llm.llama_runtime import SamplingParams

    return SamplingParams(temperature=0.0)


def bench_model(bundle: Bundle, model: str, system_prompt: str, args: argparse.Namespace) -> dict[str, Any]:
    bench = ModelBench(bundle, model, system_prompt=system_prompt, args=args)
    first_token_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    decode_rates: list[float] = []
    raw_decode_rates: list[float] = []
    batch_steps: list[float] = []
    new_tokens: list[int] = []
    try:
        for repeat in range(args.repeats):
            for text in PROMPTS:
                history = [Message("user", text)]
                seconds, stats = bench.cached(history)
                first_token_s["cached"].append(seconds)
                first_token_s["cold"].append(bench.cold(history))
                first_token_s["raw"].append(bench.raw_new_tokens(history))
                new_tokens.append(stats.evaluated_prompt_tokens)
                if stats.generated_tokens > 1 and stats.total_s > seconds:
                    decode_rates.append((stats.generated_tokens - 1) / (stats.total_s - seconds))
                log.info("%s repeat %d: %s", model, repeat, text)
            raw_decode_rates.append(bench.raw_decode_tokens_per_s([Message("user", PROMPTS[0])]))
            batch_steps.append(bench.raw_batch_steps([Message("user", PROMPTS[0])]))
        return {
            "model": model,
            "load_s": bench.load_s,
            "system_prompt_tokens": len(bench.system_tokens),
            "new_prompt_tokens_median": statistics.median(new_tokens),
            "first_token_s": {
                v: {
                    "p50": percentile(s, 50),
                    "p95": percentile(s, 95),
                    "p99": percentile(s, 99),
                    "runs": s,
                }
                for v, s in first_token_s.items()
            },
            "ratio_cold_over_cached_p50": percentile(first_token_s["cold"], 50)
            / percentile(first_token_s["cached"], 50),
            "ratio_cached_over_raw_p50": percentile(first_token_s["cached"], 50)
            / percentile(first_token_s["raw"], 50),
            "decode_tokens_per_s_p50": percentile(decode_rates, 50),
            "raw_decode_tokens_per_s_p50": percentile(raw_decode_rates, 50),
            f"raw_batch_of_{SPECULATION_BATCH}_in_steps_p50": percentile(batch_steps, 50),
        }
    finally:
        bench.close()


def print_summary(result: dict[str, Any]) -> None:
    ft = result["first_token_s"]
    print(
        f"\n{result['model']}: load {result['load_s']:.2f} s, system prompt {result['system_prompt_tokens']} "
        f"tokens, new tokens per turn (median) {result['new_prompt_tokens_median']:.0f}"
    )
    print(f"  {'first token':<34} {'p50':>8} {'p95':>8} {'p99':>8}")
    labels = {
        "cached": "cached system prompt (engine)",
        "cold": "cold (system prompt prefilled)",
        "raw": "raw llama.cpp, new tokens only",
    }
    for variant in VARIANTS:
        row = ft[variant]
        print(f"  {labels[variant]:<34} {row['p50']:>7.3f}s {row['p95']:>7.3f}s {row['p99']:>7.3f}s")
    print(
        f"  cold/cached {result['ratio_cold_over_cached_p50']:.2f}x, "
        f"cached/raw {result['ratio_cached_over_raw_p50']:.2f}x (p50)"
    )
    print(
        f"  decode: engine {result['decode_tokens_per_s_p50']:.1f} tokens/s, "
        f"raw llama.cpp {result['raw_decode_tokens_per_s_p50']:.1f} tokens/s (p50)"
    )
    steps = result[f"raw_batch_of_{SPECULATION_BATCH}_in_steps_p50"]
    print(
        f"  a batch of {SPECULATION_BATCH} tokens costs {steps:.2f} single-token steps (p50): a draft model "
        f"gains only where more than {steps:.1f} of {SPECULATION_BATCH} guesses are accepted, its own steps aside"
    )


def main(argv: list[str] | None = None) -> int:
    from appliance.config import load_settings

    parser = argparse.ArgumentParser(prog="python -m bench.llm", description=__doc__)
    parser.add_argument("--models", nargs="+", default=["gemma-270m", "qwen-1.5b"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gpu-layers", type=int, default=0, help="-1 = all layers on the GPU")
    parser.add_argument("--context-tokens", type=int, default=2048)
    parser.add_argument("--reply-tokens", type=int, default=32)
    parser.add_argument(
        "--site-facts", action="store_true", help="append a block of site facts to the persona"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="results JSON (default ~/.cache/appliance/bench-results/)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    settings = load_settings(None)
    system_prompt = agent_prompt(settings.agent)
    if args.site_facts:
        system_prompt += SITE_FACTS
    bundle = Bundle.open(settings.bundle.dir)
    load_before = os.getloadavg()
    results = [bench_model(bundle, model, system_prompt, args) for model in args.models]
    for result in results:
        print_summary(result)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"llm-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "when_utc": stamp,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "load_average_before_after": [load_before, os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
