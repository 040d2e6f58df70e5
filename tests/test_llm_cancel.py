"""After a cancelled or abandoned turn the KV cache is consistent: the next reply is the one a
freshly loaded engine gives (greedy decoding on the real Gemma 270M)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from engines.bundle import Bundle
from engines.llm import GenerationStats, Message
from engines.llm.llamacpp import LlamaCppLlm
from tests.fixtures.llm import GEMMA_CONTEXT_TOKENS, load_llm

FIRST = [Message("user", "Tell me about the history of the railway station in three sentences.")]


@pytest.fixture(scope="module")
def fresh_gemma(bundle: Bundle) -> Iterator[LlamaCppLlm]:
    """A second engine, used only for reference replies from a clean cache."""
    engine = load_llm(bundle, "gemma-270m", context_tokens=GEMMA_CONTEXT_TOKENS)
    yield engine
    engine.close()


def _reply(engine: LlamaCppLlm, history: list[Message], conversation: str | None = None) -> str:
    return "".join(engine.stream(history, conversation=conversation))


def _partial_reply(engine: LlamaCppLlm, pieces_wanted: int) -> str:
    cancel = threading.Event()
    stats = GenerationStats()
    pieces = []
    for piece in engine.stream(FIRST, cancel=cancel, stats=stats):
        pieces.append(piece)
        if len(pieces) == pieces_wanted:
            cancel.set()
    assert stats.cancelled
    return "".join(pieces)


def test_reply_after_a_cancelled_turn_equals_a_fresh_engines_reply(
    gemma_llm: LlamaCppLlm, fresh_gemma: LlamaCppLlm
) -> None:
    partial = _partial_reply(gemma_llm, pieces_wanted=4)
    # What the person heard before the barge-in is what the history keeps.
    history = [*FIRST, Message("assistant", partial), Message("user", "Stop. Where is the ticket office?")]
    stats = GenerationStats()
    after_cancel = "".join(gemma_llm.stream(history, stats=stats))
    assert stats.cached_prompt_tokens > gemma_llm.system_prompt_tokens  # the first turn was reused
    assert after_cancel == _reply(fresh_gemma, history)
    assert after_cancel


def test_a_turn_abandoned_without_draining_does_not_block_or_corrupt_the_next(
    gemma_llm: LlamaCppLlm, fresh_gemma: LlamaCppLlm
) -> None:
    abandoned = gemma_llm.stream(FIRST)
    first_piece = next(abandoned)  # the caller stops reading (barge-in) but keeps the generator alive
    history = [Message("user", "Where can I park my bicycle?")]
    assert _reply(gemma_llm, history) == _reply(fresh_gemma, history)
    # The abandoned reply was generated to its end meanwhile, undisturbed by the other turn.
    assert first_piece + "".join(abandoned) == _reply(fresh_gemma, FIRST)


def test_a_new_turn_of_the_same_conversation_cancels_its_unfinished_one(gemma_llm: LlamaCppLlm) -> None:
    stats = GenerationStats()
    abandoned = gemma_llm.stream(FIRST, stats=stats, conversation="kiosk")
    next(abandoned)
    history = [*FIRST, Message("assistant", "The station"), Message("user", "Where can I park?")]
    assert _reply(gemma_llm, history, conversation="kiosk")
    assert stats.cancelled and stats.stop_reason == "cancelled"
    assert stats.generated_tokens < gemma_llm.max_reply_tokens


def test_turns_from_two_threads_are_serialized_and_each_gets_its_own_reply(
    gemma_llm: LlamaCppLlm, fresh_gemma: LlamaCppLlm
) -> None:
    histories = {
        "a": [Message("user", "Which bus goes to the airport?")],
        "b": [Message("user", "How much does a day ticket cost?")],
    }
    replies: dict[str, str] = {}
    start = threading.Barrier(2)

    def run(key: str) -> None:
        start.wait()
        replies[key] = _reply(gemma_llm, histories[key])

    workers = [threading.Thread(target=run, args=(key,)) for key in histories]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert replies == {key: _reply(fresh_gemma, history) for key, history in histories.items()}
