"""The language model reading a number while it is typed on a caller's keypad. Each key starts a
prefill of the prompt the turn will have (when none is running), so that after ``#`` or the pause only the last digits and the reply are left to evaluate, as
the stable words of an utterance are prefilled while it goes on (appliance/pipeline/partials.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

from engines.cancel import CancelEvent
from engines.llm import LlmEngine, Message, PrefillStats

from .workers import EngineWorker

log = logging.getLogger(__name__)


def typed_text(keys: str) -> str:
    """What the model reads for keys typed on the phone's keypad."""
    return f"Typed on the phone's keypad: {keys}"


class TypedNumber:
    """The language model reading the number typed so far (appliance/pipeline/call_policy.py decides
    which keys make it and when it is answered)."""

    def __init__(
        self, messages_for: Callable[[str], list[Message]], *, conversation: str, prefill: bool
    ) -> None:
        self._messages_for = messages_for
        self._conversation = conversation
        self._prefill = prefill
        self._reading: tuple[asyncio.Task[None], CancelEvent] | None = None
        self.prefill_tokens = 0

    def read(self, keys: str, llm: LlmEngine, worker: EngineWorker) -> None:
        """Prefill the prompt for ``keys`` unless a prefill is still running (it covers most of them)."""
        if self._prefill and (self._reading is None or self._reading[0].done()):
            cancel = CancelEvent()
            job = functools.partial(
                llm.prefill,
                self._messages_for(typed_text(keys)),
                cancel=cancel,
                conversation=self._conversation,
            )
            self._reading = (asyncio.create_task(self._read(job, worker, cancel)), cancel)

    def take(self) -> int:
        """The prompt tokens prefilled while the number was typed, forgotten here; a prefill still
        running gives way to the turn's own work."""
        tokens, self.prefill_tokens = self.prefill_tokens, 0
        if self._reading is not None:
            self._reading[1].set()
        return tokens

    async def close(self) -> None:
        if self._reading is not None:
            task, cancel = self._reading
            cancel.set()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _read(self, job: Callable[[], PrefillStats], worker: EngineWorker, cancel: CancelEvent) -> None:
        try:
            stats = await worker.background(job, cancel=cancel)
        except Exception:
            log.exception("prefilling the typed keys failed; the turn goes on without it")
            return
        if stats is not None:
            self.prefill_tokens += stats.evaluated_tokens
