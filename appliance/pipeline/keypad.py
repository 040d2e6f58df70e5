"""A number being typed on a caller's keypad: its keys, when the last one came, and the language model
reading what is typed so far. Each key starts a prefill of the prompt the turn will have (when none is
running), so that after ``#`` or the pause only the last digits and the reply are left to evaluate, as
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

MAX_TYPED_KEYS = 32  # longer than any phone, account or order number; more keys are ignored


def typed_text(keys: str) -> str:
    """What the model reads for keys typed on the phone's keypad."""
    return f"Typed on the phone's keypad: {keys}"


class TypedNumber:
    def __init__(
        self, messages_for: Callable[[str], list[Message]], *, conversation: str, prefill: bool
    ) -> None:
        self._messages_for = messages_for
        self._conversation = conversation
        self._prefill = prefill
        self._keys: list[str] = []
        self.last_key_at = 0.0
        self._reading: tuple[asyncio.Task[None], CancelEvent] | None = None
        self.prefill_tokens = 0
        self.ignored = 0  # keys past MAX_TYPED_KEYS in the number being typed

    def __bool__(self) -> bool:
        return bool(self._keys)

    def add(self, key: str, now: float, llm: LlmEngine, worker: EngineWorker) -> None:
        self.last_key_at = now
        if len(self._keys) >= MAX_TYPED_KEYS:
            self.ignored += 1
            return
        self._keys.append(key)
        if self._prefill and (self._reading is None or self._reading[0].done()):
            cancel = CancelEvent()
            job = functools.partial(
                llm.prefill,
                self._messages_for(typed_text("".join(self._keys))),
                cancel=cancel,
                conversation=self._conversation,
            )
            self._reading = (asyncio.create_task(self._read(job, worker, cancel)), cancel)

    def paused(self, now: float, timeout_s: float) -> bool:
        return bool(self._keys) and now - self.last_key_at >= timeout_s

    def take(self) -> tuple[str, int]:
        """The keys typed and the prompt tokens prefilled while they were, both forgotten here; a
        prefill still running gives way to the turn's own work."""
        keys, self._keys = "".join(self._keys), []
        if self.ignored:
            log.warning("a typed number was cut at %d keys (%d more ignored)", MAX_TYPED_KEYS, self.ignored)
            self.ignored = 0
        tokens, self.prefill_tokens = self.prefill_tokens, 0
        if self._reading is not None:
            self._reading[1].set()
        return keys, tokens

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
