"""Language model: streaming chat completion on llama.cpp with a cached system prompt."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    evaluated_prompt_tokens: int = 0  # tokens actually run through the model (cache misses)
    generated_tokens: int = 0
    cancelled: bool = False
    first_token_s: float | None = None
    total_s: float = 0.0


class LlmEngine(Protocol):
    def load(self) -> None: ...

    def stream(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        stats: GenerationStats | None = None,
    ) -> Iterator[str]:
        """Yield text pieces of the assistant's reply to ``history`` (without the system prompt,
        which the engine owns); stop within one token once ``cancel`` is set."""
        ...

    def close(self) -> None: ...
