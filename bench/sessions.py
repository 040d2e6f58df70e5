"""Several calls on one LLM: batched replies in per-conversation slots vs one reply at a time.

    .venv/bin/python -m bench sessions [--models gemma-270m qwen-1.5b] [--calls 1 2 4] [--turns 3]

For each model, two engines in one run: **batched** (``llm.slots`` = the most calls, one decode loop
batching every reply being generated) and **serialized** (``llm.slots = 1``: one reply at a time and
one conversation's history in the cache, as the engine was before slots; ``llm.max_queue`` high so no
busy line is said and the wait is heard as silence). Through each, 1, 2 and 4 simultaneous loopback
SIP calls (the real pipeline: VAD, Whisper, LLM, Piper, G.711 RTP), each caller asking ``--turns``
recorded questions of ../shared/data (in its own order), waiting for the reply to play out each time.

Reported per engine and number of calls: turn latency at the caller (the moment the packet carrying
the last voiced sample left -> the first loud reply packet back; endpoint wait included) p50/p95/p99
and the ratio to one call; the prompt tokens each conversation's 2nd and 3rd turn evaluated after the
end of speech beside the tokens its prompt added to the previous turn's (the previous reply and the
new question: what a conversation that kept its cache has to evaluate at most); replies that waited for
a slot. Then the engine alone: aggregate decode tok/s of 1 vs 3 replies generated at once, and peak
RSS. Results: ~/.cache/appliance/bench-results/sessions-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import Settings, load_settings
from appliance.engine_set import build_engines, llm_engine, load_engines, open_bundle, session_config
from appliance.pipeline.engines import SessionEngines
from bench.machine import write_result
from bench.sip import DATA, QUESTIONS, Caller, _percentiles, serve_calls
from engines.audio import load_audio_16k, resample
from engines.llm import GenerationStats, Message

log = logging.getLogger("bench.sessions")

# Long answers, so that every reply runs to the token limit and the three stay batched to the end.
ENGINE_QUESTIONS = (
    "Tell me a long story about a dragon and a knight, in one paragraph.",
    "Describe every room of a very large house, one by one, in one paragraph.",
    "Explain in detail how a steam locomotive works, in one paragraph.",
)


def _settings(model: str, *, slots: int, max_calls: int, reply_tokens: int) -> Settings:
    settings = load_settings(None)
    llm = settings.llm.model_copy(
        update={
            "model": model,
            "max_reply_tokens": reply_tokens,
            "slots": slots,
            # serialized: no busy line, so the wait is heard as it was before slots
            "max_queue": 0 if slots > 1 else 64,
        }
    )
    sip = settings.sip.model_copy(update={"enabled": True, "max_calls": max_calls})
    return settings.model_copy(update={"llm": llm, "sip": sip})


async def _calls(
    engines: SessionEngines, settings: Settings, questions_8k: list[np.ndarray], calls: int, turns: int
) -> dict[str, Any]:
    callers = [
        Caller([questions_8k[(i + k) % len(questions_8k)] for k in range(turns)], 8000) for i in range(calls)
    ]
    traces = await serve_calls(engines, session_config(settings), callers)
    latencies = [value for c in callers for value in c.latencies_s]
    return {"caller_ms": _percentiles(latencies)} | _cache_use(traces)


def _cache_use(traces: list[Any]) -> dict[str, Any]:
    """Per conversation and turn: prompt tokens evaluated after the end of speech vs what its prompt
    added to the previous turn's."""
    by_session: dict[str, list[Any]] = defaultdict(list)
    for trace in traces:
        if trace.transcript and not trace.cancelled and trace.error is None:
            by_session[trace.session_id].append(trace)
    later: dict[str, list[dict[str, int]]] = {"2": [], "3": []}
    for turns in by_session.values():
        turns.sort(key=lambda t: t.wall_time)
        for index in (1, 2):
            if index < len(turns):
                previous, turn = turns[index - 1], turns[index]
                later[str(index + 1)].append(
                    {
                        "evaluated": turn.llm_evaluated_tokens,
                        "prefilled": turn.prefill_reused,
                        "added": turn.llm_prompt_tokens - previous.llm_prompt_tokens,
                        "prompt": turn.llm_prompt_tokens,
                    }
                )
    stages: dict[str, list[float]] = defaultdict(list)
    for trace in traces:
        for stage, ms in trace.stages_ms().items():
            if ms is not None:
                stages[stage].append(ms)
    return {
        "stages_p50_ms": {stage: _p50(values) for stage, values in stages.items()},
        "turns": len(traces),
        "queued_turns": sum(1 for t in traces if t.llm_queued_ms > 0),
        "queued_ms_p50": _p50([t.llm_queued_ms for t in traces if t.llm_queued_ms > 0]),
        "busy_replies": sum(1 for t in traces if t.busy_reply),
        "later_turns": later,
    }


def _p50(values: list[float]) -> float | None:
    return float(np.percentile(values, 50)) if values else None


def _decode_rate(engine: Any, streams: int) -> dict[str, float]:
    """``streams`` replies generated at once (each from a fresh conversation, so every prompt costs
    the same): tokens per second of the decode steps (the engine's own step time; prompts apart) and
    of the whole run (prompts included)."""
    results: list[GenerationStats] = []
    start = threading.Barrier(streams)
    stamp = time.perf_counter_ns()
    before = engine.occupancy()

    def run(index: int) -> None:
        stats = GenerationStats()
        start.wait()
        history = [Message("user", ENGINE_QUESTIONS[index % len(ENGINE_QUESTIONS)])]
        for _ in engine.stream(history, stats=stats, conversation=f"rate-{stamp}-{index}"):
            pass
        results.append(stats)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    after = engine.occupancy()
    for index in range(streams):
        engine.end_conversation(f"rate-{stamp}-{index}")
    step_tokens = after.decode_step_tokens - before.decode_step_tokens
    step_s = after.decode_step_s - before.decode_step_s
    tokens = sum(s.generated_tokens for s in results)
    return {
        "streams": streams,
        "tokens": tokens,
        "wall_s": wall,
        "decode_tok_s": step_tokens / max(step_s, 1e-9),
        "mean_batch": step_tokens / max(after.decode_steps - before.decode_steps, 1),
        "run_tok_s": tokens / wall,
    }


async def _engine_rates(settings: Settings, bundle: Any, repeats: int) -> dict[str, Any]:
    engine = llm_engine(settings, bundle)
    engine.load()
    try:
        loop = asyncio.get_running_loop()
        single, triple = [], []
        for _ in range(repeats):  # alternated, so a slow spell of a shared machine hits both
            single.append(await loop.run_in_executor(None, _decode_rate, engine, 1))
            triple.append(await loop.run_in_executor(None, _decode_rate, engine, 3))
    finally:
        engine.close()
    figures: dict[str, Any] = {}
    for key in ("decode_tok_s", "run_tok_s"):
        one = float(np.median([r[key] for r in single]))
        three = float(np.median([r[key] for r in triple]))
        figures[key] = {"1 stream": one, "3 at once": three, "ratio": three / one}
    return figures | {"runs": single + triple}


_RSS_PROBE = """
import resource, sys, threading
from bench.sessions import ENGINE_QUESTIONS, _settings
from appliance.engine_set import llm_engine, open_bundle
from engines.llm import Message
from bench.paths import DATA
model, slots, context = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
settings = _settings(model, slots=slots, max_calls=slots, reply_tokens=48)
settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"context_tokens": context})})
engine = llm_engine(settings, open_bundle(settings))
engine.load()
def reply(i):
    for _ in engine.stream([Message("user", ENGINE_QUESTIONS[i % 3])], conversation=str(i)):
        pass
threads = [threading.Thread(target=reply, args=(i,)) for i in range(slots)]
[t.start() for t in threads]
[t.join() for t in threads]
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, engine.kv_cache_bytes / 2**20)
engine.close()
"""


def engine_rss(model: str, slots: int, context_tokens: int) -> dict[str, float]:
    """Peak RSS of a fresh process that loads the LLM with ``slots`` slots and fills each with a reply."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, model, str(slots), str(context_tokens)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    rss, kv = (float(v) for v in done.stdout.split()[-2:])
    return {"peak_rss_mib": rss, "kv_cache_mib": kv}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    if args.rss_only:
        return {
            model: {str(slots): engine_rss(model, slots, 2048) for slots in (1, 4)} for model in args.models
        }
    most = max(args.calls)
    questions = [load_audio_16k(DATA / name) for name in QUESTIONS]
    questions_8k = [
        resample(
            np.concatenate([q / max(float(np.abs(q).max()), 1e-6) * 0.5, np.zeros(8000, np.float32)]),
            16000,
            8000,
        )
        for q in questions
    ]
    results: dict[str, Any] = {}
    for model in args.models:
        # The engine alone first, in a process that has run nothing else yet.
        settings = _settings(model, slots=3, max_calls=most, reply_tokens=args.engine_tokens)
        per_model: dict[str, Any] = {
            "engine": await _engine_rates(settings, open_bundle(settings), args.repeats)
        }
        for variant, slots in (("batched", most), ("serialized", 1)):
            settings = _settings(model, slots=slots, max_calls=most, reply_tokens=args.reply_tokens)
            engines = build_engines(settings, open_bundle(settings))
            await load_engines(engines)
            runs: dict[str, Any] = {}
            try:
                for calls in args.calls:
                    print(f"{model} {variant}: {calls} call(s)...", flush=True)
                    runs[str(calls)] = await _calls(engines, settings, questions_8k, calls, args.turns)
            finally:
                await engines.close()
            one = runs[str(min(args.calls))]["caller_ms"]["p50"]
            for figures in runs.values():
                figures["p50_vs_one_call"] = figures["caller_ms"]["p50"] / one
            per_model[variant] = runs
        results[model] = per_model
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["gemma-270m", "qwen-1.5b"])
    parser.add_argument("--calls", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--turns", type=int, default=3, help=f"questions per caller (max {len(QUESTIONS)})")
    parser.add_argument("--reply-tokens", type=int, default=32, help="llm.max_reply_tokens for the calls")
    parser.add_argument("--engine-tokens", type=int, default=48, help="reply tokens for the tok/s figures")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each tok/s figure (median)")
    parser.add_argument(
        "--rss-only",
        action="store_true",
        help="only the peak RSS of the LLM with 1 and 4 slots of 2048 tokens",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(main_async(args))
    write_result("sessions-rss" if args.rss_only else "sessions", vars(args), results)
    if args.rss_only:
        for model, by_slots in results.items():
            for slots, figures in by_slots.items():
                print(
                    f"{model:<11} {slots} slot(s) x 2048: peak RSS {figures['peak_rss_mib']:.0f} MiB, "
                    f"KV cache {figures['kv_cache_mib']:.0f} MiB"
                )
        return
    _print(results)


def _print(results: dict[str, Any]) -> None:
    print("turn latency at the caller, end of speech -> first reply audio (ms), per simultaneous calls")
    for model, per_model in results.items():
        if not isinstance(per_model, dict):
            continue
        for variant in ("batched", "serialized"):
            for calls, figures in per_model[variant].items():
                c = figures["caller_ms"]
                later = figures["later_turns"]
                used = [f"{t['evaluated']}/{t['added']}" for t in later["2"] + later["3"]]
                stages = figures["stages_p50_ms"]
                print(
                    f"{model:<11} {variant:<10} {calls} call(s) n={c['n']:>2} p50 {c['p50']:>6.0f} "
                    f"p95 {c['p95']:>6.0f} p99 {c['p99']:>6.0f} x{figures['p50_vs_one_call']:.2f} "
                    f"waited {figures['queued_turns']}/{figures['turns']} "
                    f"2nd/3rd turns evaluated/added: {' '.join(used)}\n"
                    f"{'':<23}stage p50 ms: "
                    + ", ".join(
                        f"{k} {v:.0f}" for k, v in stages.items() if v is not None and k != "turn_total"
                    )
                )
        for key, what in (("decode_tok_s", "decode steps"), ("run_tok_s", "whole replies, prompts included")):
            rate = per_model["engine"][key]
            print(
                f"{model:<11} {what}: 1 stream {rate['1 stream']:.1f} tok/s, 3 at once "
                f"{rate['3 at once']:.1f} tok/s aggregate (x{rate['ratio']:.2f})"
            )
    print(f"peak RSS {results['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
