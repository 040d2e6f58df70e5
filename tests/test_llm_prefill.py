"""LLM prefill on the real Gemma 3 270M and Qwen2.5-Coder-1.5B GGUFs: the words of an unfinished
user message are evaluated before the turn, and the turn evaluates only what follows them (counted
by llama.cpp's own prompt counter)."""

from __future__ import annotations

import threading

from engines.llm import GenerationStats, Message
from engines.llm.llamacpp import PREFILL_BATCH_TOKENS, LlamaCppLlm
from engines.llm.slots import common_prefix_length

FINAL = "What time does the canteen at the Northgate depot open on Saturday?"


def _turn(engine: LlamaCppLlm, history: list[Message]) -> tuple[str, GenerationStats]:
    stats = GenerationStats()
    return "".join(engine.stream(history, stats=stats)), stats


def _counter(engine: LlamaCppLlm) -> int:
    return int(engine._runtime.prompt_tokens_evaluated())


def _evict(engine: LlamaCppLlm) -> None:
    """Another conversation's turn, so the cache holds nothing of the test's message."""
    _turn(engine, [Message("user", "Hello.")])


class _TripOncePrefilling(threading.Event):
    """A cancel event that reads as set once the engine's cache holds the first token the prefill of
    ``history`` adds (looked at by the engine between two batches)."""

    def __init__(self, engine: LlamaCppLlm, history: list[Message]) -> None:
        super().__init__()
        self.engine = engine
        self.prompt = engine.prompt_tokens(history)
        self.start = common_prefix_length(engine.cached_tokens(), self.prompt)

    def is_set(self) -> bool:
        cached = self.engine.cached_tokens()
        return (
            cached[self.start : self.start + 1] == self.prompt[self.start : self.start + 1]
            or super().is_set()
        )


def test_the_turn_evaluates_only_the_tokens_after_the_prefilled_words(any_llm: LlamaCppLlm) -> None:
    _evict(any_llm)
    prefill = any_llm.prefill([Message("user", "What time does the canteen at the Northgate")])
    assert not prefill.cancelled and prefill.evaluated_tokens > 0
    assert prefill.cached_tokens + prefill.evaluated_tokens == prefill.target_tokens
    final_prompt = any_llm.prompt_tokens([Message("user", FINAL)])
    # What was prefilled is exactly how the final prompt begins (the template's end of message and
    # reply header were left out).
    assert any_llm.cached_tokens()[: prefill.target_tokens] == final_prompt[: prefill.target_tokens]

    before = _counter(any_llm)
    reply, stats = _turn(any_llm, [Message("user", FINAL)])
    assert reply.strip()
    assert stats.prefilled_tokens == prefill.evaluated_tokens
    assert stats.discarded_prefill_tokens == 0
    assert stats.evaluated_prompt_tokens == stats.prompt_tokens - prefill.target_tokens
    assert _counter(any_llm) - before == stats.evaluated_prompt_tokens


def test_a_second_prefill_extends_the_first_and_counts_what_it_throws_away(any_llm: LlamaCppLlm) -> None:
    _evict(any_llm)
    first = any_llm.prefill([Message("user", "What time does the canteen close")])
    second = any_llm.prefill([Message("user", "What time does the canteen at the Northgate depot")])
    # "close" was a wrong guess: the second keeps the common words and evaluates only the rest.
    assert second.cached_tokens < first.target_tokens
    assert second.discarded_tokens == first.target_tokens - second.cached_tokens > 0
    assert second.evaluated_tokens == second.target_tokens - second.cached_tokens
    _, stats = _turn(any_llm, [Message("user", FINAL)])
    assert stats.prefilled_tokens == second.target_tokens - first.cached_tokens
    assert stats.evaluated_prompt_tokens == stats.prompt_tokens - second.target_tokens


def test_a_prefill_that_guessed_wrong_still_gives_the_answer_to_what_was_said(qwen_llm: LlamaCppLlm) -> None:
    _evict(qwen_llm)
    qwen_llm.prefill([Message("user", "What is the capital city of Germany")])
    reply, stats = _turn(qwen_llm, [Message("user", "What is the capital city of France?")])
    assert "paris" in reply.lower() and "berlin" not in reply.lower(), reply
    assert stats.prefilled_tokens > 0  # "What is the capital city of" was reused
    assert stats.discarded_prefill_tokens >= 1  # " Germany" was not


def test_a_prefill_stops_between_batches_when_cancelled(gemma_llm: LlamaCppLlm) -> None:
    _evict(gemma_llm)
    already = threading.Event()
    already.set()
    assert gemma_llm.prefill([Message("user", FINAL)], cancel=already).evaluated_tokens == 0

    stopped = gemma_llm.prefill(
        [Message("user", FINAL)], cancel=_TripOncePrefilling(gemma_llm, [Message("user", FINAL)])
    )
    assert stopped.cancelled and stopped.evaluated_tokens == PREFILL_BATCH_TOKENS
    assert stopped.evaluated_tokens < stopped.target_tokens - stopped.cached_tokens
    # The turn after a cut prefill reuses the part that was evaluated and answers normally.
    reply, stats = _turn(gemma_llm, [Message("user", FINAL)])
    assert reply.strip() and stats.prefilled_tokens == PREFILL_BATCH_TOKENS
