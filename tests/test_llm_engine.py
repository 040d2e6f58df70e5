"""The llama.cpp engine on the real Gemma 3 270M and Qwen2.5-Coder-1.5B GGUFs: streaming,
the cached system prompt, cancellation and history trimming."""

from __future__ import annotations

import threading
import time

import pytest

from engines.llm import GenerationStats, Message
from engines.llm.llamacpp import LlamaCppLlm


def _turn(engine: LlamaCppLlm, history: list[Message], **kwargs: object) -> tuple[str, GenerationStats]:
    stats = GenerationStats()
    text = "".join(engine.stream(history, stats=stats, **kwargs))  # type: ignore[arg-type]
    return text, stats


def _llama_prompt_counter(engine: LlamaCppLlm) -> int:
    """llama.cpp's own count of prompt tokens evaluated by this context so far."""
    return int(engine._runtime.prompt_tokens_evaluated())


def test_streams_the_reply_in_pieces_as_it_is_generated(any_llm: LlamaCppLlm) -> None:
    stats = GenerationStats()
    pieces = []
    tokens_at_first_piece = None
    for piece in any_llm.stream([Message("user", "Say something about the weather today.")], stats=stats):
        if tokens_at_first_piece is None:
            tokens_at_first_piece = stats.generated_tokens
        pieces.append(piece)
    assert len(pieces) >= 3
    assert "".join(pieces).strip()
    assert tokens_at_first_piece is not None and tokens_at_first_piece < stats.generated_tokens
    assert stats.first_token_s is not None and 0 < stats.first_token_s <= stats.total_s
    assert stats.stop_reason in ("end_of_turn", "stop_string", "max_tokens")


def test_second_turn_evaluates_only_the_new_tokens(any_llm: LlamaCppLlm) -> None:
    first = [Message("user", "Good morning, which trains leave soon?")]
    reply, stats1 = _turn(any_llm, first)
    assert stats1.evaluated_prompt_tokens <= stats1.prompt_tokens - any_llm.system_prompt_tokens

    second = [*first, Message("assistant", reply), Message("user", "And which platform is it?")]
    counter_before = _llama_prompt_counter(any_llm)
    _, stats2 = _turn(any_llm, second)
    counter_after = _llama_prompt_counter(any_llm)

    previous_prompt = len(any_llm.prompt_tokens(first))
    new_tokens = stats2.prompt_tokens - previous_prompt
    # Everything of the first turn's prompt came from the cache: only what follows it was run.
    assert 0 < stats2.evaluated_prompt_tokens <= new_tokens
    assert stats2.cached_prompt_tokens >= previous_prompt
    # llama.cpp's own prompt counter agrees (the generated tokens are counted apart from it).
    assert counter_after - counter_before == stats2.evaluated_prompt_tokens


def test_another_conversation_pays_only_for_tokens_after_the_system_prompt(any_llm: LlamaCppLlm) -> None:
    _turn(any_llm, [Message("user", "Hello, is the canteen open?")])
    other = [Message("user", "What time does the depot close tonight?")]
    counter_before = _llama_prompt_counter(any_llm)
    _, stats = _turn(any_llm, other)
    assert stats.prompt_tokens == len(any_llm.prompt_tokens(other))
    assert stats.evaluated_prompt_tokens == stats.prompt_tokens - any_llm.system_prompt_tokens
    assert _llama_prompt_counter(any_llm) - counter_before == stats.evaluated_prompt_tokens


def test_cancel_stops_within_one_token(any_llm: LlamaCppLlm) -> None:
    cancel = threading.Event()
    stats = GenerationStats()
    pieces_after_cancel = []
    tokens_at_cancel = None
    history = [Message("user", "Tell me a long story about a dragon and a knight.")]
    for index, piece in enumerate(any_llm.stream(history, cancel=cancel, stats=stats)):
        if tokens_at_cancel is not None:
            pieces_after_cancel.append(piece)
        if index == 2:
            cancel.set()
            tokens_at_cancel = stats.generated_tokens
    assert tokens_at_cancel is not None
    assert stats.cancelled and stats.stop_reason == "cancelled"
    assert pieces_after_cancel == []
    assert stats.generated_tokens <= tokens_at_cancel + 1


def test_cancel_from_another_thread_stops_within_one_token(gemma_llm: LlamaCppLlm) -> None:
    cancel = threading.Event()
    first_piece = threading.Event()
    stats = GenerationStats()
    history = [Message("user", "Describe every room of a very large house, one by one.")]

    def consume() -> None:
        for _ in gemma_llm.stream(history, cancel=cancel, stats=stats):
            first_piece.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert first_piece.wait(timeout=60)
    cancel.set()
    tokens_at_cancel = stats.generated_tokens
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert stats.cancelled
    assert stats.generated_tokens <= tokens_at_cancel + 1


def test_history_is_trimmed_oldest_first_and_keeps_the_system_prompt(any_llm: LlamaCppLlm) -> None:
    filler = "The shipment of spare parts for the conveyor belts arrived late again this week. " * 3
    history: list[Message] = []
    for day in range(12):
        history += [Message("user", f"Day {day}: {filler}"), Message("assistant", "Noted, thank you.")]
    history.append(Message("user", "What is the door code of the depot?"))
    assert len(any_llm.prompt_tokens(history)) > any_llm.context_tokens  # would not fit untrimmed

    counter_before = _llama_prompt_counter(any_llm)
    reply, stats = _turn(any_llm, history)
    assert stats.dropped_messages > 0 and stats.dropped_messages % 2 == 0  # whole turns, oldest first
    kept = history[stats.dropped_messages :]
    assert kept[-1] == history[-1]
    assert stats.prompt_tokens == len(any_llm.prompt_tokens(kept))
    assert stats.prompt_tokens + any_llm.max_reply_tokens <= any_llm.context_tokens
    # The system prompt was not re-evaluated: it is still the cached start of the prompt.
    assert stats.evaluated_prompt_tokens <= stats.prompt_tokens - any_llm.system_prompt_tokens
    assert _llama_prompt_counter(any_llm) - counter_before == stats.evaluated_prompt_tokens
    if any_llm.template_origin == "gguf":  # the instruct model can answer from the system prompt
        assert "4719" in reply.replace(" ", "").replace(",", "")


def test_the_next_token_waits_for_the_reader_to_be_done_with_the_last_piece(
    any_llm: LlamaCppLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a reader starts with a piece (the turn: Piper on a finished clause) is announced before the
    loop's next step, not run beside it: no step runs while the reader handles a piece (the wait is
    bounded, READER_WAIT_S; raised here so that a slow machine cannot end it first)."""
    from engines.llm import scheduler

    monkeypatch.setattr(scheduler, "READER_WAIT_S", 30.0)
    loop = any_llm._loop
    assert loop is not None
    stats = GenerationStats()
    steps_while_handling = []
    for _piece in any_llm.stream([Message("user", "Say something about the weather today.")], stats=stats):
        before = loop.decode_steps
        time.sleep(0.03)  # the reader's work on the piece
        steps_while_handling.append(loop.decode_steps - before)
    assert len(steps_while_handling) >= 3 and not any(steps_while_handling), steps_while_handling
