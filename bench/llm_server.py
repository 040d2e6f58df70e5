"""The cost of the HTTP hop: first token from a site server (``llama_cpp.server`` on loopback, the same
GGUF) against the in-process engine, same questions, interleaved so background load hits both alike.

    .venv/bin/python -m bench llm_server [--models gemma-270m qwen-1.5b] [--repeats 3] [--reply-tokens 16]

Every question is the first turn of a new conversation, greedy, no stop strings. The in-process engine
has its system prompt cached at load; llama_cpp.server keeps the prompt it evaluated last and reuses its
common prefix (the system prompt) the same way. Prints p50/p95/p99 of each and the ratio of the p50s,
writes ~/.cache/appliance/bench-results/llm_server-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.llm import PROMPTS, percentile
from bench.machine import write_result
from bench.paths import RESULTS

PERSONA = (
    "You are a helpful voice assistant on a device at the Northgate depot. Answer in one or two short "
    "spoken sentences, without lists or markdown."
)
# llama_cpp.server's chat format where the GGUF carries no template of its own (None: the GGUF's)
CHAT_FORMATS: dict[str, str | None] = {"gemma-270m": "gemma", "qwen-1.5b": None}


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` with one model on a loopback port, until ``stop()``."""

    def __init__(
        self, model: Path, log: Path, *, chat_format: str | None = "gemma", threads: int = 2
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--n_ctx", "2048", "--n_threads", str(threads)]
        command += ["--n_threads_batch", str(threads)]
        if chat_format is not None:
            command += ["--chat_format", chat_format]
        with log.open("w") as sink:
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.3)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def bench_model(model: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from appliance.config import load_settings, override
    from appliance.engine_set import llm_engine, open_bundle
    from engines.llm import GenerationStats, Message
    from engines.llm.openai_server import OpenAiLlm
    from engines.llm.params import LlmServerParams

    settings = override(
        load_settings(None),
        llm={
            "model": model,
            "max_reply_tokens": args.reply_tokens,
            "temperature": 0.0,
            "stop": [],
            "slots": 1,
        },
    )
    bundle = open_bundle(settings)
    local = llm_engine(settings, bundle, prompt=PERSONA, seed=0)
    local.load()
    server = LlamaServer(
        bundle.path(f"llm/{model}"), out / f"server-{model}.log", chat_format=CHAT_FORMATS[model]
    )
    remote = OpenAiLlm(
        LlmServerParams(
            server_url=server.url,
            allowed_hosts=("127.0.0.1",),
            server_first_token_timeout_s=120,
            server_idle_timeout_s=120,
        ),
        system_prompt=PERSONA,
        max_reply_tokens=args.reply_tokens,
        temperature=0.0,
        stop=(),
        seed=0,
    )
    first: dict[str, list[float]] = {"in_process": [], "server": []}
    total: dict[str, list[float]] = {"in_process": [], "server": []}
    try:
        for engine in (local, remote):  # warm both once
            "".join(engine.stream([Message("user", "Hello.")], conversation="warm"))
        local.end_conversation("warm")
        for repeat in range(args.repeats):
            for index, prompt in enumerate(PROMPTS):
                order = (("in_process", local), ("server", remote))
                for name, engine in order if (repeat + index) % 2 == 0 else order[::-1]:
                    stats = GenerationStats()
                    conversation = f"q{repeat}-{index}"
                    "".join(engine.stream([Message("user", prompt)], stats=stats, conversation=conversation))
                    engine.end_conversation(conversation)
                    if stats.first_token_s is not None:
                        first[name].append(stats.first_token_s)
                    total[name].append(stats.total_s)
    finally:
        server.stop()
        local.close()
    summary: dict[str, Any] = {"model": model, "questions": len(PROMPTS) * args.repeats}
    for name in first:
        summary[name] = {
            "first_token_ms": {
                q: 1000 * percentile(first[name], p) for q, p in (("p50", 50), ("p95", 95), ("p99", 99))
            },
            "reply_ms_p50": 1000 * percentile(total[name], 50),
        }
    summary["server_over_in_process_p50"] = (
        summary["server"]["first_token_ms"]["p50"] / summary["in_process"]["first_token_ms"]["p50"]
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench llm_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gemma-270m", "qwen-1.5b"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reply-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = RESULTS
    out.mkdir(parents=True, exist_ok=True)
    results = [bench_model(model, args, out) for model in args.models]
    print(f"first token, {args.repeats} x {len(PROMPTS)} questions (p50 / p95 / p99 ms)")
    for row in results:
        for name in ("in_process", "server"):
            ms = row[name]["first_token_ms"]
            print(f"  {row['model']:<11} {name:<10} {ms['p50']:7.0f} {ms['p95']:7.0f} {ms['p99']:7.0f}")
        print(f"  {row['model']:<11} server / in-process (p50): {row['server_over_in_process_p50']:.2f}x")
    write_result("llm_server", vars(args), {"models": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
