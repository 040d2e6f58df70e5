"""Keep a conversation within the context window: oldest turns go first, the system prompt never."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engines.errors import InputError
from engines.llm import Message


def trim_history(
    history: Sequence[Message], fits: Callable[[Sequence[Message]], bool]
) -> tuple[list[Message], int]:
    """The longest tail of ``history`` that starts with a user message and ``fits``, and how many
    messages were dropped. The last user message is never dropped: if it alone does not fit,
    that is the caller's input error."""
    kept = list(history)
    dropped = 0
    while not fits(kept):
        starts = [i for i, m in enumerate(kept) if m.role == "user" and i > 0]
        if not starts:
            raise InputError(
                "the last user message does not fit in the context window with the system prompt "
                "and the reply budget",
                fix="shorten the message, or raise llm.context_tokens / lower llm.max_reply_tokens",
            )
        dropped += starts[0]
        kept = kept[starts[0] :]
    return kept, dropped
