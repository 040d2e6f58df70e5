"""What a session remembers of a conversation: its messages, bounded to
``conversation.max_history_messages``."""

from __future__ import annotations

from appliance.pipeline.params import ConversationParams
from engines.llm import Message


class Conversation:
    """The messages of one session (without the system prompt), bounded to ``max_messages``."""

    def __init__(self, max_messages: int = ConversationParams().max_history_messages) -> None:
        if max_messages < 2:
            raise ValueError(f"max_messages must be at least 2, got {max_messages}")
        self.max_messages = max_messages
        self._messages: list[Message] = []

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def with_user(self, text: str) -> list[Message]:
        """The history as the LLM should see it with ``text`` as the next user message (its first
        letter capitalised: Whisper writes "the birch canoe" for part of an utterance and "The birch
        canoe slid." for all of it, and a prefilled prompt must begin as the final one does)."""
        messages = list(self._messages)
        if messages and messages[-1].role == "user":
            # The previous question got no audible answer (barge-in before playback): one question.
            messages[-1] = Message("user", f"{messages[-1].content} {text.strip()}".strip())
        else:
            messages.append(Message("user", capitalised(text.strip())))
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


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]
