"""llama.cpp on the GPU against the CPU, on random-weight models of the bundled LLMs' exact layout.

The weights are noise, the rest is the real model: the same tensor types (so the same CUDA kernels),
the same sizes (so the same memory and speed), the same vocabulary and chat template. Checks:

- parity: the logits of one prompt on the GPU against the CPU's, measured against the CPU's own
  disagreement with itself (the same prompt evaluated one token at a time): a random 28-layer model
  amplifies rounding far more than a trained one, so a fixed tolerance would say little;
- every layer offloaded, read from llama.cpp's own log;
- prefill and decode tokens/s on the GPU and the CPU, and the decode of several sequences in one step
  (the engine's batched slots);
- the engine (``engines.llm``) with ``gpu_layers = -1``: a streamed reply, the second turn evaluating
  only its new tokens, a cancel within one token.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from build_scripts.synthetic.gguf_layout import load_layout, write_random_gguf
from engines.llm import GenerationStats, Message
from engines.llm.llama_runtime import LlamaRuntime

PROMPT_TEXT = (
    "The depot at Northgate opens at six. Trains to the harbour leave every twenty minutes from platform "
    "two, and the door code of the staff room is four seven one nine. "
)
PARITY_TOKENS = 32
# The GPU's mean disagreement with the CPU may be this many times the CPU's with itself, and at least
# the floor (a fraction of the logits' spread) before parity fails.
PARITY_FACTOR = 4.0
PARITY_FLOOR = 0.02


@contextmanager
def llama_log() -> Iterator[list[str]]:
    """llama.cpp's log lines (the runtime routes them to this logger at DEBUG) while inside."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage().rstrip())

    logger = logging.getLogger("engines.llm.llama_cpp")
    handler, level = Collect(level=logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def offload_line(lines: list[str]) -> tuple[int, int] | None:
    """(offloaded, total) from llama.cpp's "offloaded 29/29 layers to GPU"."""
    for line in reversed(lines):
        if "offloaded" in line and "layers to GPU" in line:
            done, total = line.split("offloaded", 1)[1].split("layers")[0].strip().split("/")
            return int(done), int(total)
    return None


def prompt_tokens(runtime: LlamaRuntime, count: int) -> list[int]:
    tokens: list[int] = []
    while len(tokens) < count:
        tokens += runtime.tokenize(PROMPT_TEXT)
    return tokens[:count]


def compare_logits(reference: np.ndarray, other: np.ndarray) -> dict[str, float]:
    diff = np.abs(reference - other)
    spread = float(reference.std())
    return {
        "mean_abs_diff": float(diff.mean()),
        "max_abs_diff": float(diff.max()),
        "relative_mean_diff": float(diff.mean()) / spread,
        "top1_agreement": float((reference.argmax(-1) == other.argmax(-1)).mean()),
        "logit_std": spread,
    }


def _parity(cpu: LlamaRuntime, gpu: LlamaRuntime) -> dict[str, Any]:
    tokens = prompt_tokens(cpu, PARITY_TOKENS)
    cpu.truncate(0)
    reference = cpu.evaluate(tokens)
    cpu.truncate(0, seq=1)
    one_by_one = np.stack([cpu.evaluate([t], seq=1)[0] for t in tokens])
    gpu.truncate(0)
    on_gpu = gpu.evaluate(tokens)
    floor = compare_logits(reference, one_by_one)
    against = compare_logits(reference, on_gpu)
    tolerance = max(PARITY_FACTOR * floor["relative_mean_diff"], PARITY_FLOOR)
    finite = bool(np.isfinite(on_gpu).all())
    return {
        "tokens": len(tokens),
        "gpu_vs_cpu": against,
        "cpu_vs_cpu_token_by_token": floor,
        "tolerance_relative_mean_diff": tolerance,
        "finite": finite,
        "passed": finite and against["relative_mean_diff"] <= tolerance,
    }


def _speed(
    runtime: LlamaRuntime, *, prompt: int, decode: int, sequences: int, repeats: int
) -> dict[str, Any]:
    """Median prefill and decode tokens/s; decode of ``sequences`` replies at once, one token each per step."""
    tokens = prompt_tokens(runtime, prompt)
    prefill, single, batched = [], [], []
    for _ in range(repeats):
        runtime.truncate(0)
        started = time.perf_counter()
        runtime.decode(tokens)
        runtime.prompt_tokens_evaluated()  # waits for the device
        prefill.append(prompt / (time.perf_counter() - started))
        single.append(_decode_rate(runtime, [0], decode))
        for seq in range(1, sequences):
            runtime.truncate(0, seq=seq)
            runtime.copy_sequence(0, seq)
        batched.append(_decode_rate(runtime, list(range(sequences)), decode))
    return {
        "prompt_tokens": prompt,
        "prefill_tok_s": statistics.median(prefill),
        "decode_tok_s": statistics.median(single),
        "decode_sequences": sequences,
        "decode_batched_tok_s": statistics.median(batched),
        "batched_vs_single": statistics.median(batched) / statistics.median(single),
        "repeats": repeats,
    }


def _decode_rate(runtime: LlamaRuntime, seqs: list[int], steps: int) -> float:
    """Tokens/s of ``steps`` greedy-free token steps (the token fed back is fixed: speed is all we want)."""
    positions = {seq: runtime.kv_length(seq) for seq in seqs}
    started = time.perf_counter()
    for step in range(steps):
        runtime.decode_step([(100 + seq, positions[seq] + step, seq) for seq in seqs])
    runtime.prompt_tokens_evaluated()
    elapsed = time.perf_counter() - started
    for seq in seqs:
        runtime.truncate(positions[seq], seq=seq)
    return steps * len(seqs) / elapsed


def _engine(path: Path, *, gpu_layers: int, threads: int) -> dict[str, Any]:
    from engines.llm.llamacpp import LlamaCppLlm
    from engines.llm.params import LlmParams

    params = LlmParams(
        gpu_layers=gpu_layers,
        context_tokens=1024,
        max_reply_tokens=24,
        temperature=1.0,  # greedy decoding of random weights can end every reply at its first token
        threads=threads,
        # With random weights a model whose output matrix is its embedding (Gemma) predicts the token it
        # was given: after the template's newline, newlines, which a "\n\n" stop would end at once.
        stop=(),
    )
    engine = LlamaCppLlm(
        path,
        params,
        system_prompt="You are the voice of the Northgate depot. The door code is 4719.",
        seed=0,
        slots=2,
    )
    engine.load()
    try:
        first = [Message("user", "Good morning, which trains leave soon?")]
        stats = GenerationStats()
        started = time.perf_counter()
        reply = "".join(engine.stream(first, stats=stats, conversation="a"))
        first_turn_s = time.perf_counter() - started
        second = [*first, Message("assistant", reply), Message("user", "And which platform is it?")]
        stats2 = GenerationStats()
        "".join(engine.stream(second, stats=stats2, conversation="a"))
        cancel_result = _cancel_check(engine)
        new_tokens = len(engine.prompt_tokens(second)) - len(engine.prompt_tokens(first))
        return {
            "template": engine.template_origin,
            "first_reply_tokens": stats.generated_tokens,
            "first_turn_s": first_turn_s,
            "second_turn_evaluated": stats2.evaluated_prompt_tokens,
            "second_turn_prompt": stats2.prompt_tokens,
            "second_turn_new_tokens": new_tokens,
            **cancel_result,
            "passed": stats.generated_tokens > 0
            and 0 < stats2.evaluated_prompt_tokens <= new_tokens
            and cancel_result["cancel_passed"],
        }
    finally:
        engine.close()


def _cancel_check(engine: Any) -> dict[str, Any]:
    """Cancel once the reply has 3 tokens (watched from another thread: a reply of whitespace yields no
    piece to react to): at most one more token comes after the cancel."""
    cancel, stats, at_cancel = threading.Event(), GenerationStats(), [-1]

    def watch() -> None:
        deadline = time.monotonic() + 60
        while stats.generated_tokens < 3 and time.monotonic() < deadline:
            time.sleep(0.0005)
        cancel.set()
        at_cancel[0] = stats.generated_tokens

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    question = [Message("user", "Tell me a long story about a dragon.")]
    "".join(engine.stream(question, cancel=cancel, stats=stats, conversation="b"))
    watcher.join()
    after = stats.generated_tokens - at_cancel[0]
    return {
        "cancelled_at_token": at_cancel[0],
        "generated_after_cancel": after,
        "cancel_passed": stats.cancelled and after <= 1,
    }


def check_model(layout_path: Path, work: Path, *, on_gpu: bool, quick: bool) -> dict[str, Any]:
    """All checks for one layout; ``on_gpu`` False (the dry run) runs the same code on the CPU twice."""
    name = layout_path.name.split(".layout")[0]
    started = time.perf_counter()
    path = write_random_gguf(
        load_layout(layout_path), work / f"{name}-random.gguf", layers=4 if quick else None
    )
    result: dict[str, Any] = {"model": name, "file_bytes": path.stat().st_size}
    result["generate_s"] = time.perf_counter() - started
    threads = os.cpu_count() or 2
    gpu_layers = -1 if on_gpu else 0
    sizes = (
        {"prompt": 64, "decode": 8, "repeats": 1} if quick else {"prompt": 512, "decode": 64, "repeats": 3}
    )
    cpu = LlamaRuntime(path, gpu_layers=0, context_tokens=1024, threads=threads, sequences=4)
    try:
        with llama_log() as lines:
            gpu = LlamaRuntime(path, gpu_layers=gpu_layers, context_tokens=1024, threads=threads, sequences=4)
        try:
            offloaded = offload_line(lines)
            result["llama_log"] = [
                line for line in lines if any(k in line for k in ("CUDA", "GPU", "offload"))
            ][:20]
            result["offloaded"] = {
                "layers": offloaded,
                "all": bool(offloaded and offloaded[0] == offloaded[1]),
            }
            result["parity"] = _parity(cpu, gpu)
            result["speed_gpu" if on_gpu else "speed_second_cpu"] = _speed(gpu, sequences=4, **sizes)
        finally:
            gpu.close()
        cpu_sizes = dict(sizes, decode=min(sizes["decode"], 16), repeats=1)
        result["speed_cpu"] = _speed(cpu, sequences=4, **cpu_sizes)
    finally:
        cpu.close()
    result["engine"] = _engine(path, gpu_layers=gpu_layers, threads=threads)
    result["passed"] = bool(result["parity"]["passed"] and result["engine"]["passed"])
    if on_gpu:
        result["passed"] = result["passed"] and result["offloaded"]["all"]
    path.unlink()
    return result
