"""One turn: ASR -> LLM -> clauses -> TTS -> playback, as one task tree.

The stages overlap through bounded queues: TTS speaks clause 1 while the LLM writes clause 2, and
playback starts with the first audio chunk. A turn may start before the endpoint is confirmed
(speculative start): everything runs, only playback waits for ``confirm()``. Cancelling the task that
runs ``Turn.run`` (barge-in, or the person resumed speaking) stops the LLM within one token, TTS
between chunks and playback within one frame; what was heard stays in ``played_text``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from appliance.pipeline.playback import Player
from appliance.pipeline.played import played_text
from appliance.pipeline.workers import EngineWorker
from appliance.trace.record import TurnTrace
from engines.asr import AsrEngine
from engines.llm import GenerationStats, LlmEngine, Message
from engines.tts import TtsEngine

log = logging.getLogger(__name__)


class Stage(str, Enum):
    ASR = "asr"
    LLM = "llm"
    TTS = "tts"
    PLAYBACK = "playback"


class TurnFailed(Exception):
    """An engine failed inside a turn; ``code`` is stable (``llm-failed``), the cause is chained."""

    def __init__(self, stage: Stage, err: BaseException) -> None:
        self.stage = stage
        self.code = f"{stage.value}-failed"
        super().__init__(f"{self.code}: {type(err).__name__}: {err}")


@dataclass(frozen=True)
class TurnConfig:
    first_clause_words: int = 4
    fallback_reply: str = "Sorry, something went wrong. Please say that again."
    busy_reply: str = "One moment, please."
    max_pending_clauses: int = 4
    max_pending_chunks: int = 8


@dataclass
class TurnEngines:
    """The engines a turn uses, each with the worker thread that owns it."""

    asr: AsrEngine
    asr_worker: EngineWorker
    llm: LlmEngine
    llm_worker: EngineWorker
    tts: TtsEngine
    tts_worker: EngineWorker


class Turn:
    def __init__(
        self,
        *,
        engines: TurnEngines,
        player: Player,
        messages_for: Callable[[str], list[Message]],
        audio_16k: np.ndarray,
        trace: TurnTrace,
        config: TurnConfig,
    ) -> None:
        self.engines = engines
        self.player = player
        self.messages_for = messages_for  # the history with a new user message appended
        self.audio_16k = audio_16k
        self.trace = trace
        self.config = config
        self.transcript = ""
        self.clauses: list[str] = []
        self.clause_samples: list[int] = []  # audio synthesized per clause, at the player's rate
        self.stats = GenerationStats()
        self.dropped = False  # a speculative turn abandoned because the person kept talking
        self._confirmed = asyncio.Event()
        self._llm_cancel = threading.Event()
        self._reply_parts: list[str] = []
        self._speaking_fallback = False

    @property
    def confirmed(self) -> bool:
        return self._confirmed.is_set()

    def confirm(self) -> None:
        """The endpoint is confirmed: playback may start."""
        self._confirmed.set()

    @property
    def played_text(self) -> str:
        if self._speaking_fallback:
            return ""
        return played_text(self.clauses, self.clause_samples, self.player.played_samples)

    async def run(self) -> None:
        self.trace.audio_s = len(self.audio_16k) / 16000
        try:
            await self._respond()
        except asyncio.CancelledError:
            self.trace.cancelled = True
            self._llm_cancel.set()
            await self.player.stop()
            raise
        except TurnFailed as err:
            log.error("turn %s: %s", self.trace.turn_id, err, exc_info=err.__cause__)
            self.trace.error = str(err)
            self._llm_cancel.set()
            await self._speak_fallback()
        finally:
            self._llm_cancel.set()
            self.trace.reply = "".join(self._reply_parts).strip()
            self.trace.played_reply = self.played_text
            self.trace.reply_audio_s = self.player.played_samples / self.player.rate
            self.trace.llm_tokens = self.stats.generated_tokens
            self.trace.llm_prompt_tokens = self.stats.prompt_tokens
            self.trace.llm_evaluated_tokens = self.stats.evaluated_prompt_tokens
            self.trace.llm_queued_ms = round(self.stats.queued_s * 1000.0, 1)
            self.trace.prefill_reused = self.stats.prefilled_tokens
            self.trace.mark("turn_done")

    async def _respond(self) -> None:
        self.trace.mark("asr_start")
        try:
            result = await self.engines.asr_worker.call(self.engines.asr.transcribe, self.audio_16k)
        except Exception as err:
            raise TurnFailed(Stage.ASR, err) from err
        self.trace.mark("asr_done")
        self.transcript = self.trace.transcript = result.text.strip()
        if not self.transcript:
            log.info("turn %s: no words recognised; no reply", self.trace.turn_id)
            return
        clauses: asyncio.Queue[str | None] = asyncio.Queue(self.config.max_pending_clauses)
        chunks: asyncio.Queue[tuple[int, np.ndarray] | None] = asyncio.Queue(self.config.max_pending_chunks)
        messages = self.messages_for(self.transcript)
        await _run_together(
            self._generate(messages, clauses),
            self._synthesize(clauses, chunks),
            self._play(chunks),
        )

    async def _generate(self, messages: list[Message], clauses: asyncio.Queue[str | None]) -> None:
        from engines.tts.clauses import ClauseSplitter  # the TTS package's splitter (pure, cheap)

        splitter = ClauseSplitter(first_clause_words=self.config.first_clause_words)
        engines = self.engines
        conversation = self.trace.session_id
        if engines.llm.occupancy().full:
            # Every slot is answering another call: say so rather than stay silent for a whole reply.
            self.trace.busy_reply = True
            await self._put_clause(self.config.busy_reply, clauses)
        try:
            pieces = engines.llm_worker.stream(
                lambda: engines.llm.stream(
                    messages, cancel=self._llm_cancel, stats=self.stats, conversation=conversation
                ),
                cancel=self._llm_cancel,
            )
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    self.trace.mark("llm_first_token")
                    self._reply_parts.append(piece)
                    for clause in splitter.push(piece):
                        await self._put_clause(clause, clauses)
        except Exception as err:
            raise TurnFailed(Stage.LLM, err) from err
        for clause in splitter.flush():
            await self._put_clause(clause, clauses)
        await clauses.put(None)

    async def _put_clause(self, clause: str, clauses: asyncio.Queue[str | None]) -> None:
        if not clause.strip():
            return
        self.trace.mark("first_clause")
        self.clauses.append(clause)
        self.clause_samples.append(0)
        await clauses.put(clause)

    async def _synthesize(
        self, clauses: asyncio.Queue[str | None], chunks: asyncio.Queue[tuple[int, np.ndarray] | None]
    ) -> None:
        index = 0
        while (clause := await clauses.get()) is not None:
            await self._synthesize_clause(clause, index, chunks)
            index += 1
        await chunks.put(None)

    async def _synthesize_clause(
        self, clause: str, index: int, chunks: asyncio.Queue[tuple[int, np.ndarray] | None]
    ) -> None:
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

    async def _play(self, chunks: asyncio.Queue[tuple[int, np.ndarray] | None]) -> None:
        while (item := await chunks.get()) is not None:
            index, chunk = item
            await self._confirmed.wait()
            self.trace.mark("playback_start")
            try:
                await self.player.play(chunk, index)
            except Exception as err:
                raise TurnFailed(Stage.PLAYBACK, err) from err
        await self.player.drain()

    async def _speak_fallback(self) -> None:
        """Say ``fallback_reply`` after a failure (itself cancellable by a barge-in)."""
        self._speaking_fallback = True
        text = self.config.fallback_reply
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


async def _run_together(*steps: Awaitable[None]) -> None:
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
