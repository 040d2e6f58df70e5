"""The reply LLM judges whether the person has finished, from the logits it computes anyway: P(the
words end the message) read at their last token (trailing punctuation left out), on the real Qwen
1.5B; Gemma 270M, whose GGUF has no chat template of its own, does not judge."""

from __future__ import annotations

import numpy as np

from engines.llm import GenerationStats, Message
from engines.llm.llamacpp import LlamaCppLlm
from engines.llm.scheduler import tokens_probability

FINISHED = ("How old is the Brooklyn Bridge?", "We must find a new home in the stars.")
UNFINISHED = ("How old is the", "Mr. Quilter is the apostle of the", "I would like to")


def _judged(
    llm: LlamaCppLlm, text: str, conversation: str
) -> tuple[float | None, list[float], GenerationStats]:
    prefilled = llm.prefill([Message("user", text.rstrip("?.!"))], conversation=f"{conversation}-p")
    said: list[float] = []
    stats = GenerationStats()
    pieces = llm.stream(
        [Message("user", text)], conversation=conversation, stats=stats, on_end_of_message=said.append
    )
    first = next(iter(pieces))
    assert said, "the verdict comes before the first token"
    assert first
    list(pieces)
    return prefilled.end_of_message_p, said, stats


def test_finished_words_score_high_and_unfinished_ones_low(qwen_llm: LlamaCppLlm) -> None:
    assert qwen_llm.judges_turns
    finished = [_judged(qwen_llm, text, f"f{i}") for i, text in enumerate(FINISHED)]
    unfinished = [_judged(qwen_llm, text, f"u{i}") for i, text in enumerate(UNFINISHED)]
    for prefilled, (streamed,), _stats in finished:
        assert prefilled is not None and prefilled > 0.2 and streamed > 0.2, (prefilled, streamed)
        assert abs(prefilled - streamed) < 0.1  # the prefill's number and the reply's agree
    for prefilled, (streamed,), _stats in unfinished:
        assert prefilled is not None and prefilled < 0.01 and streamed < 0.01, (prefilled, streamed)


def test_the_verdict_costs_no_extra_evaluation(qwen_llm: LlamaCppLlm) -> None:
    """The same question from the same cache state (the one slot holding the same other conversation),
    with and without the verdict asked for: the model evaluates the same number of prompt tokens (the
    verdict is one more output row of a pass that runs anyway), and the reply is the same."""
    history = [Message("user", "What is the door code of the depot?")]

    def answer(judge: bool) -> tuple[str, GenerationStats, list[float]]:
        "".join(qwen_llm.stream([Message("user", "Good morning.")], conversation="cost-reset"))
        stats = GenerationStats()
        said: list[float] = []
        hook = said.append if judge else None
        reply = "".join(
            qwen_llm.stream(history, conversation=f"cost-{judge}", stats=stats, on_end_of_message=hook)
        )
        return reply, stats, said

    without, plain, _ = answer(False)
    with_it, judged, said = answer(True)
    assert len(said) == 1 and said[0] > 0.2
    assert judged.evaluated_prompt_tokens == plain.evaluated_prompt_tokens
    assert with_it == without and judged.end_of_message_p == said[0]


def test_a_model_without_its_own_template_does_not_judge(gemma_llm: LlamaCppLlm) -> None:
    assert gemma_llm.template_origin.startswith("fallback") and not gemma_llm.judges_turns
    said: list[float] = []
    stats = GenerationStats()
    reply = "".join(
        gemma_llm.stream([Message("user", "Hello there.")], stats=stats, on_end_of_message=said.append)
    )
    assert reply and said == [] and stats.end_of_message_p is None
    assert gemma_llm.prefill([Message("user", "How old is the")]).end_of_message_p is None


def test_the_probability_is_summed_over_the_tokens_that_end_the_words() -> None:
    logits = np.log(np.asarray([0.5, 0.3, 0.2], dtype=np.float32))
    assert abs(tokens_probability(logits, (1, 2)) - 0.5) < 1e-6
    assert abs(tokens_probability(logits + 1000.0, (0,)) - 0.5) < 1e-4  # stable for large logits
