"""The site server's LLM first, the device's own when the server cannot answer.

A turn whose reply has not begun when the server fails (down, refusing, no first token in time) is
answered by the local model at once. A reply the server breaks off mid-way ends there (what was said
cannot be taken back) and the failure is the turn's. After any failure the server is left alone for
``retry_s`` and the local model answers; then the server is tried again.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from engines.llm import GenerationStats, LlmEngine, LlmOccupancy, Message, PrefillStats
from engines.llm.openai_server import LlmServerError, OpenAiLlm

log = logging.getLogger(__name__)

SERVER = "site server"
LOCAL = "local model"


class ServerWithFallback:
    """Implements ``engines.llm.LlmEngine``; ``GenerationStats.backend`` says who answered."""

    def __init__(self, server: OpenAiLlm, local: LlmEngine | None, *, retry_s: float) -> None:
        self.server = server
        self.local = local
        self.retry_s = retry_s
        self._server_down_until = 0.0
        self._lock = threading.Lock()

    def load(self) -> None:
        self.server.load()
        if self.local is not None:
            self.local.load()

    def close(self) -> None:
        self.server.close()
        if self.local is not None:
            self.local.close()

    @property
    def offers_tools(self) -> bool:
        return False

    @property
    def system_prompt(self) -> str:
        return self.server.system_prompt

    @property
    def judges_turns(self) -> bool:
        return False  # the audio alone decides when a turn ends (the server's logits are not read)

    def occupancy(self) -> LlmOccupancy:
        return self.local.occupancy() if self.local is not None else self.server.occupancy()

    def end_conversation(self, conversation: str) -> None:
        if self.local is not None:
            self.local.end_conversation(conversation)

    def prefill(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        conversation: str | None = None,
    ) -> PrefillStats:
        if self.local is not None and self._server_down():
            return self.local.prefill(history, cancel=cancel, conversation=conversation)
        return PrefillStats()  # the server keeps its own cache

    def _server_down(self) -> bool:
        with self._lock:
            return time.monotonic() < self._server_down_until

    def _mark_down(self, err: LlmServerError) -> None:
        with self._lock:
            self._server_down_until = time.monotonic() + self.retry_s
        log.warning(
            "LLM server failed (%s); the %s answers for the next %.0f s", err.reason, LOCAL, self.retry_s
        )

    def stream(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        stats: GenerationStats | None = None,
        conversation: str | None = None,
        on_end_of_message: Callable[[float], None] | None = None,
    ) -> Iterator[str]:
        stats = stats if stats is not None else GenerationStats()
        if self.local is not None and self._server_down():
            stats.backend = f"{LOCAL} (the site server failed less than {self.retry_s:.0f} s ago)"
            yield from self.local.stream(history, cancel=cancel, stats=stats, conversation=conversation)
            return
        stats.backend = SERVER
        try:
            yield from self.server.stream(history, cancel=cancel, stats=stats, conversation=conversation)
        except LlmServerError as err:
            self._mark_down(err)
            if err.started or self.local is None:
                raise
            for field in dataclasses.fields(stats):  # what the server's attempt counted is not the reply's
                setattr(stats, field.name, getattr(GenerationStats(), field.name))
            stats.backend = f"{LOCAL} (the site server failed: {err.reason})"
            yield from self.local.stream(history, cancel=cancel, stats=stats, conversation=conversation)
