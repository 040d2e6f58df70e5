"""A turn's voice: the clauses it says, synthesized one after another on the TTS worker and played
once the turn is confirmed, and what of them was heard. The LLM side of the turn (turn.py) puts
clauses in; a barge-in cancels the task and playback stops within one frame."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable

import numpy as np

from appliance.pipeline.engines import TurnEngines
from appliance.pipeline.playback import Player
from appliance.pipeline.played import played_text
from appliance.trace.labels import Stage
from appliance.trace.record import TurnTrace

log = logging.getLogger(__name__)

Clauses = asyncio.Queue[str | None]  # None: the reply is over
Chunks = asyncio.Queue[tuple[int, np.ndarray] | None]  # (clause index, audio)


class TurnFailed(Exception):
    """An engine failed inside a turn; ``code`` is stable (``llm-failed``), the cause is chained."""

    def __init__(self, stage: Stage, err: BaseException) -> None:
        self.stage = stage
        self.code = f"{stage.value}-failed"
        super().__init__(f"{self.code}: {type(err).__name__}: {err}")


class TurnVoice:
    def __init__(
        self, engines: TurnEngines, player: Player, trace: TurnTrace, *, max_pending_chunks: int
    ) -> None:
        self.engines, self.player, self.trace = engines, player, trace
        self.clauses: list[str] = []
        self.clause_samples: list[int] = []  # audio synthesized per clause, at the player's rate
        self.speaking_fallback = False
        self._max_pending_chunks = max_pending_chunks
        self._confirmed = asyncio.Event()

    @property
    def confirmed(self) -> bool:
        return self._confirmed.is_set()

    def confirm(self) -> None:
        self._confirmed.set()

    @property
    def played_text(self) -> str:
        if self.speaking_fallback:
            return ""
        return played_text(self.clauses, self.clause_samples, self.player.played_samples)

    async def put(self, clause: str, clauses: Clauses) -> None:
        """``clause`` is said next (nothing for an empty one)."""
        if not clause.strip():
            return
        self.trace.mark("first_clause")
        self.clauses.append(clause)
        self.clause_samples.append(0)
        self.engines.tts_worker.expect()  # Piper takes it in a moment: the LLM's next step waits
        await clauses.put(clause)

    async def speak(self, clauses: Clauses) -> None:
        """Synthesize and play ``clauses`` until the None that ends them, then let playback drain."""
        chunks: Chunks = asyncio.Queue(self._max_pending_chunks)
        await run_together(self._synthesize(clauses, chunks), self._play(chunks))

    async def _synthesize(self, clauses: Clauses, chunks: Chunks) -> None:
        index = 0
        while (clause := await clauses.get()) is not None:
            await self._synthesize_clause(clause, index, chunks)
            index += 1
        await chunks.put(None)

    async def _synthesize_clause(self, clause: str, index: int, chunks: Chunks) -> None:
        tts = self.engines.tts
        rate = self.player.rate
        try:
            audio = self.engines.tts_worker.stream(
                lambda: tts.synthesize(clause, sample_rate_hz=rate), cancel=threading.Event()
            )
            async with contextlib.aclosing(audio):
                async for chunk in audio:
                    self.trace.mark("tts_first_audio")
                    self.clause_samples[index] += len(chunk)
                    await chunks.put((index, chunk))
        except Exception as err:
            raise TurnFailed(Stage.TTS, err) from err

    async def _play(self, chunks: Chunks) -> None:
        while (item := await chunks.get()) is not None:
            index, chunk = item
            await self._confirmed.wait()
            self.trace.mark("playback_start")
            try:
                await self.player.play(chunk, index)
            except Exception as err:
                raise TurnFailed(Stage.PLAYBACK, err) from err
        await self.player.drain()

    async def speak_fallback(self, text: str) -> None:
        """Say ``text`` after a failure (itself cancellable by a barge-in); what was heard of the
        reply before it no longer counts as played."""
        self.speaking_fallback = True
        try:
            chunks = self.engines.tts_worker.stream(
                lambda: self.engines.tts.synthesize(text, sample_rate_hz=self.player.rate),
                cancel=threading.Event(),
            )
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    await self._confirmed.wait()
                    await self.player.play(chunk, len(self.clauses))
            await self.player.drain()
        except Exception:
            log.exception("turn %s: the fallback reply could not be spoken either", self.trace.turn_id)


async def run_together(*steps: Awaitable[None]) -> None:
    """Run the stages concurrently; the first failure cancels the others and is raised."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
