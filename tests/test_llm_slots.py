"""Several conversations at once on the real Qwen2.5-Coder-1.5B and Gemma 3 270M: batched replies
are the same tokens as each alone, cancelling one leaves the others whole, each conversation keeps
its own cache, an evicted one is evaluated anew and still answers, a reply without a free slot waits
and is counted."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from engines.bundle import Bundle
from engines.errors import BackendUnavailable
from engines.llm import GenerationStats, Message
from engines.llm.llamacpp import LlamaCppLlm
from tests.fixtures.llm import GEMMA_CONTEXT_TOKENS, QWEN_CONTEXT_TOKENS, load_llm

QUESTIONS = {
    "north": "Which bus goes to the airport from the depot?",
    "south": "How much does a day ticket for the tram cost?",
    "east": "Where is the lost property office of the station?",
}


@pytest.fixture(scope="module")
def qwen_alone(bundle: Bundle) -> Iterator[LlamaCppLlm]:
    """A second three-slot Qwen for reference replies, one conversation at a time from fresh slots."""
    engine = load_llm(bundle, "qwen-1.5b", context_tokens=QWEN_CONTEXT_TOKENS, slots=3)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def gemma_slots(bundle: Bundle) -> Iterator[LlamaCppLlm]:
    engine = load_llm(bundle, "gemma-270m", context_tokens=GEMMA_CONTEXT_TOKENS, slots=3, max_reply_tokens=24)
    yield engine
    engine.close()


def _reply(engine: LlamaCppLlm, history: list[Message], conversation: str) -> tuple[str, GenerationStats]:
    stats = GenerationStats()
    return "".join(engine.stream(history, stats=stats, conversation=conversation)), stats


def _at_once(
    engine: LlamaCppLlm, histories: dict[str, list[Message]], *, cancel_after: dict[str, int] | None = None
) -> dict[str, tuple[str, GenerationStats]]:
    """Every conversation's reply, all started together on their own threads."""
    results: dict[str, tuple[str, GenerationStats]] = {}
    start = threading.Barrier(len(histories))

    def run(name: str) -> None:
        cancel = threading.Event()
        stats = GenerationStats()
        pieces: list[str] = []
        start.wait()
        for piece in engine.stream(histories[name], cancel=cancel, stats=stats, conversation=name):
            pieces.append(piece)
            if cancel_after and len(pieces) == cancel_after.get(name):
                cancel.set()
        results[name] = ("".join(pieces), stats)

    threads = [threading.Thread(target=run, args=(name,)) for name in histories]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    return results


def _batch_size(engine: LlamaCppLlm, before: tuple[int, int]) -> float:
    occupancy = engine.occupancy()
    steps = occupancy.decode_steps - before[0]
    return (occupancy.decode_step_tokens - before[1]) / max(steps, 1)


def _counters(engine: LlamaCppLlm) -> tuple[int, int]:
    occupancy = engine.occupancy()
    return occupancy.decode_steps, occupancy.decode_step_tokens


def test_three_conversations_at_once_give_the_same_tokens_as_each_alone(
    qwen_slots: LlamaCppLlm, qwen_alone: LlamaCppLlm
) -> None:
    histories = {name: [Message("user", text)] for name, text in QUESTIONS.items()}
    alone = {name: _reply(qwen_alone, history, name)[0] for name, history in histories.items()}
    before = _counters(qwen_slots)
    together = _at_once(qwen_slots, histories)
    assert {name: text for name, (text, _) in together.items()} == alone
    assert all(text.strip() for text in alone.values())
    assert _batch_size(qwen_slots, before) > 1.5  # the token steps really carried several replies
    for name, (_, stats) in together.items():
        assert stats.stop_reason in ("end_of_turn", "max_tokens", "stop_string")
        # Each conversation in a slot of its own, holding its prompt and its reply.
        prompt = qwen_slots.prompt_tokens(histories[name])
        cached = qwen_slots.cached_tokens(name)
        assert cached[: len(prompt)] == prompt and len(cached) >= len(prompt) + stats.generated_tokens - 1


def test_cancelling_one_reply_leaves_the_others_whole(gemma_slots: LlamaCppLlm) -> None:
    histories = {name: [Message("user", text)] for name, text in QUESTIONS.items()}
    whole = _at_once(gemma_slots, histories)
    for name in histories:
        gemma_slots.end_conversation(name)
    mixed = _at_once(gemma_slots, {f"{n}-2": h for n, h in histories.items()}, cancel_after={"south-2": 2})
    cut_text, cut = mixed["south-2"]
    assert cut.cancelled and cut.stop_reason == "cancelled"
    assert cut.generated_tokens < whole["south"][1].generated_tokens
    assert whole["south"][0].startswith(cut_text)
    for name in ("north", "east"):
        text, stats = mixed[f"{name}-2"]
        assert not stats.cancelled and text == whole[name][0], name


def test_each_conversation_keeps_its_cache_between_its_turns(qwen_slots: LlamaCppLlm) -> None:
    first = {f"{name}-keep": [Message("user", text)] for name, text in QUESTIONS.items()}
    replies = _at_once(qwen_slots, first)
    second = {
        name: [
            *history,
            Message("assistant", replies[name][0]),
            Message("user", "And how long does it take?"),
        ]
        for name, history in first.items()
    }
    for name in reversed(list(second)):  # interleaved with the other conversations' turns
        _, stats = _reply(qwen_slots, second[name], name)
        new_tokens = stats.prompt_tokens - len(qwen_slots.prompt_tokens(first[name]))
        assert 0 < stats.evaluated_prompt_tokens <= new_tokens, name
        assert stats.cached_prompt_tokens >= len(qwen_slots.prompt_tokens(first[name]))


def test_an_evicted_conversation_is_evaluated_anew_and_still_answers(qwen_slots: LlamaCppLlm) -> None:
    history = [Message("user", "Hello, I am Sam from the night shift.")]
    reply, _ = _reply(qwen_slots, history, "sam")
    evictions = qwen_slots.occupancy().evictions
    for name in ("x", "y", "z"):  # three other conversations take every slot, Sam's last
        _reply(qwen_slots, [Message("user", f"Good morning, this is caller {name}.")], f"evict-{name}")
    assert qwen_slots.occupancy().evictions > evictions
    resumed = [*history, Message("assistant", reply), Message("user", "What is the door code of the depot?")]
    answer, stats = _reply(qwen_slots, resumed, "sam")
    assert "4719" in answer.replace(" ", ""), answer
    assert stats.evaluated_prompt_tokens == stats.prompt_tokens - qwen_slots.system_prompt_tokens


def test_a_reply_without_a_free_slot_waits_and_the_engine_says_it_is_full(bundle: Bundle) -> None:
    """One slot: the second conversation's reply waits until the first one's ends (cancelled here)."""
    engine = load_llm(bundle, "gemma-270m", context_tokens=GEMMA_CONTEXT_TOKENS, max_reply_tokens=400)
    try:
        started, cancel = threading.Event(), threading.Event()
        first_stats = GenerationStats()
        long_history = [Message("user", "Describe every room of a very large house, one by one.")]

        def first() -> None:
            for _ in engine.stream(long_history, stats=first_stats, cancel=cancel, conversation="first"):
                started.set()

        thread = threading.Thread(target=first)
        thread.start()
        assert started.wait(timeout=60)
        assert engine.occupancy().full  # its only slot is answering, max_queue 0: a new reply would wait
        second: list[tuple[str, GenerationStats]] = []
        waiter = threading.Thread(
            target=lambda: second.append(_reply(engine, [Message("user", "Is the canteen open?")], "second"))
        )
        waiter.start()
        for _ in range(600):
            if engine.occupancy().waiting == 1:
                break
            threading.Event().wait(0.01)
        assert engine.occupancy().waiting == 1 and not first_stats.stop_reason
        cancel.set()
        thread.join(timeout=60)
        waiter.join(timeout=60)
        ((text, stats),) = second
        assert first_stats.cancelled and text.strip() and stats.queued_s > 0
        assert not engine.occupancy().full
    finally:
        engine.close()


def test_a_decode_failure_fails_the_replies_in_it_and_the_next_reply_is_whole(
    gemma_slots: LlamaCppLlm,
) -> None:
    runtime = gemma_slots._runtime
    real_step = runtime.decode_step
    failures = [BackendUnavailable("llama_decode failed with code -3 (injected)")]

    def failing_step(items: object) -> None:
        if failures:
            raise failures.pop()
        real_step(items)

    history = [Message("user", QUESTIONS["north"])]
    runtime.decode_step = failing_step
    try:
        with pytest.raises(BackendUnavailable, match="injected"):
            _reply(gemma_slots, history, "failing")
        # The failed conversation's cache holds exactly what the engine believes it holds ...
        slot = gemma_slots._table.owned_by("failing")  # type: ignore[union-attr]
        assert slot is not None and runtime.kv_length(slot.seq) == len(slot.tokens)
        # ... and its next turn, like any other conversation's, is answered in full.
        again, stats = _reply(gemma_slots, history, "failing")
    finally:
        runtime.decode_step = real_step
    assert again.strip() and stats.stop_reason in ("end_of_turn", "max_tokens", "stop_string")
