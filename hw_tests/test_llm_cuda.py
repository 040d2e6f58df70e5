"""The LLM engine on CUDA (all layers offloaded): streaming, the cached system prompt, cancellation
within one token and trimming, on both bundle models; then the first-token figures, printed.

    .venv/bin/python -m pytest hw_tests/test_llm_cuda.py -s

Skipped without an NVIDIA GPU, or when llama-cpp-python was built without CUDA
(CMAKE_ARGS="-DGGML_CUDA=on" pip install llama-cpp-python==0.3.36 --no-binary llama-cpp-python).
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterator

import pytest

from appliance.config import load_settings
from engines.bundle import Bundle
from engines.llm import GenerationStats, Message, create_llm
from engines.llm.llamacpp import LlamaCppLlm
from engines.llm.params import LlmParams

pytestmark = pytest.mark.gpu

SYSTEM_PROMPT = (
    "You are a helpful voice assistant on a device at the Northgate depot. The door code of the "
    "depot is 4719. Answer in one or two short spoken sentences, without lists or markdown."
)
CONTEXT_TOKENS = 512
REPLY_TOKENS = 24


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return Bundle.open(load_settings(None).bundle.dir)


@pytest.fixture(scope="module", params=["gemma-270m", "qwen-1.5b"])
def cuda_llm(
    request: pytest.FixtureRequest, bundle: Bundle, caplog_module: list[str]
) -> Iterator[LlamaCppLlm]:
    import llama_cpp

    if not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("llama-cpp-python here was built without CUDA (CMAKE_ARGS=-DGGML_CUDA=on)")
    params = LlmParams(
        model=request.param,
        gpu_layers=-1,
        context_tokens=CONTEXT_TOKENS,
        max_reply_tokens=REPLY_TOKENS,
        temperature=0.0,
    )
    engine = create_llm(bundle, params, system_prompt=SYSTEM_PROMPT, slots=2)
    assert isinstance(engine, LlamaCppLlm)
    caplog_module.clear()
    engine.load()
    offload = [line for line in caplog_module if "offloaded" in line and "layers to GPU" in line]
    assert offload, "llama.cpp did not report offloading layers"
    done, total = offload[-1].split("offloaded", 1)[1].split("layers")[0].strip().split("/")
    assert done == total, offload[-1]  # every layer on the GPU
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def caplog_module() -> Iterator[list[str]]:
    """llama.cpp's log lines (routed to logging at DEBUG) during the module."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("engines.llm.llama_cpp")
    handler, level = Collect(level=logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def _turn(engine: LlamaCppLlm, history: list[Message]) -> tuple[str, GenerationStats]:
    stats = GenerationStats()
    return "".join(engine.stream(history, stats=stats)), stats


def test_streams_on_the_gpu(cuda_llm: LlamaCppLlm) -> None:
    pieces = list(cuda_llm.stream([Message("user", "Say something about the weather today.")]))
    assert len(pieces) >= 3 and "".join(pieces).strip()


def test_second_turn_evaluates_only_the_new_tokens_on_the_gpu(cuda_llm: LlamaCppLlm) -> None:
    first = [Message("user", "Good morning, which trains leave soon?")]
    reply, _ = _turn(cuda_llm, first)
    second = [*first, Message("assistant", reply), Message("user", "And which platform is it?")]
    _, stats = _turn(cuda_llm, second)
    assert 0 < stats.evaluated_prompt_tokens <= stats.prompt_tokens - len(cuda_llm.prompt_tokens(first))


def test_cancel_stops_within_one_token_on_the_gpu(cuda_llm: LlamaCppLlm) -> None:
    cancel, stats, at_cancel = threading.Event(), GenerationStats(), None
    history = [Message("user", "Tell me a long story about a dragon and a knight.")]
    for index, _ in enumerate(cuda_llm.stream(history, cancel=cancel, stats=stats)):
        assert at_cancel is None, "a piece arrived after the cancel"
        if index == 2:
            cancel.set()
            at_cancel = stats.generated_tokens
    assert at_cancel is not None and stats.cancelled
    assert stats.generated_tokens <= at_cancel + 1


def test_trimming_keeps_the_system_prompt_on_the_gpu(cuda_llm: LlamaCppLlm) -> None:
    filler = "The shipment of spare parts for the conveyor belts arrived late again this week. " * 3
    history: list[Message] = []
    for day in range(16):
        history += [Message("user", f"Day {day}: {filler}"), Message("assistant", "Noted, thank you.")]
    history.append(Message("user", "What is the door code of the depot?"))
    reply, stats = _turn(cuda_llm, history)
    assert stats.dropped_messages > 0
    assert stats.evaluated_prompt_tokens <= stats.prompt_tokens - cuda_llm.system_prompt_tokens
    if cuda_llm.template_origin == "gguf":
        assert "4719" in reply.replace(" ", "")


def test_first_token_figures_on_the_gpu(cuda_llm: LlamaCppLlm, bundle: Bundle) -> None:
    """The benchmark's figures on CUDA, printed (run with -s); a figure, not an assertion on time."""
    from bench.llm import bench_model, print_summary

    model = "qwen-1.5b" if cuda_llm.template_origin == "gguf" else "gemma-270m"
    args = argparse.Namespace(gpu_layers=-1, context_tokens=2048, reply_tokens=32, threads=2, repeats=3)
    result = bench_model(bundle, model, SYSTEM_PROMPT, args)
    print_summary(result)
    assert result["first_token_s"]["cached"]["runs"]
