"""Conversation history, and what of a reply was actually heard."""

from __future__ import annotations

from collections.abc import Sequence

from engines.llm import Message


class Conversation:
    """The messages of one session (without the system prompt), bounded to ``max_messages``."""

    def __init__(self, max_messages: int = 16) -> None:
        if max_messages < 2:
            raise ValueError(f"max_messages must be at least 2, got {max_messages}")
        self.max_messages = max_messages
        self._messages: list[Message] = []

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def with_user(self, text: str) -> list[Message]:
        """The history as the LLM should see it with ``text`` as the next user message."""
        messages = list(self._messages)
        if messages and messages[-1].role == "user":
            # The previous question got no audible answer (barge-in before playback): one question.
            messages[-1] = Message("user", f"{messages[-1].content} {text}".strip())
        else:
            messages.append(Message("user", text))
        return messages

    def commit(self, user_text: str, assistant_text: str) -> None:
        """Record a finished turn: the question, and the part of the answer that was played."""
        self._messages = self.with_user(user_text)
        if assistant_text.strip():
            self._messages.append(Message("assistant", assistant_text.strip()))
        overflow = len(self._messages) - self.max_messages
        if overflow > 0:
            self._messages = self._messages[overflow:]
        while self._messages and self._messages[0].role != "user":
            self._messages.pop(0)


def played_text(clauses: Sequence[str], clause_samples: Sequence[int], played_samples: int) -> str:
    """The words heard: whole clauses fully played, then the played fraction of the next one,
    rounded down to whole words."""
    words: list[str] = []
    remaining = max(0, played_samples)
    for clause, samples in zip(clauses, clause_samples, strict=False):
        clause_words = clause.split()
        if samples <= 0:
            break
        if remaining >= samples:
            words.extend(clause_words)
            remaining -= samples
            continue
        heard = int(len(clause_words) * remaining / samples)
        words.extend(clause_words[:heard])
        break
    return " ".join(words)
