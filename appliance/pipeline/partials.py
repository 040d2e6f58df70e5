"""Thinking while the person speaks: partial transcripts during an utterance, and the LLM prefill of
their words.

Every ``partials.partial_interval_ms`` of speech the audio so far is transcribed on the ASR worker; the LLM then
evaluates the conversation plus the words the partials make likely into its KV cache: the words the
last two partials agree on (the stable prefix), or the latest partial without its last word (often
cut mid-word) when that is longer. The turn that answers the utterance then evaluates only the tokens
after the longest prefix its prompt shares with them: a wrong guess costs only the tokens after the
divergence.

Both run as background work on the shared workers (``EngineWorker.background``): only on an idle
worker, and reply work of any session arriving behind them stops them: a partial transcription within
its current graph run (ONNX Runtime's terminate flag), a prefill after its current small batch.
Nothing runs while a turn is in progress; a turn's start stops what is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from appliance.pipeline.engines import SessionEngines, TurnEngines
from appliance.pipeline.params import PartialsParams
from engines.asr import AsrEngine
from engines.cancel import CancelEvent, Cancelled
from engines.llm import Message

if TYPE_CHECKING:
    from appliance.tools import ToolBox

log = logging.getLogger(__name__)


@dataclass
class PartialsRecord:
    """What happened during one utterance, for the trace of the turn that answers it."""

    partials: int = 0  # partial transcripts made
    asr_ms: float = 0.0  # their ASR time, summed
    latest: str = ""  # the last partial transcript
    prefill_tokens: int = 0  # tokens the LLM evaluated during the utterance
    prefill_discarded: int = 0  # of earlier prefills, thrown away by a later one that disagreed


def prefill_words(stable: str, latest: str) -> str:
    """What to prefill: the stable prefix, or the latest partial without its last word if longer."""
    trimmed = " ".join(latest.split()[:-1])
    return trimmed if len(trimmed.split()) > len(stable.split()) else stable


def stable_prefix(previous: str, latest: str) -> str:
    """The words (as written, punctuation included) both transcripts begin with."""
    agreed: list[str] = []
    for old, new in zip(previous.split(), latest.split(), strict=False):
        if old != new:
            break
        agreed.append(new)
    return " ".join(agreed)


class Partials:
    """One session's partial transcripts; ``messages_for(text)`` is the conversation with ``text`` as
    the user's next message. ``asr``: the Whisper for partials (on the ASR worker; default the
    turn's own). ``wait``: await each step before the next frame (a file fed faster than real time,
    where there is no clock to overlap with)."""

    @classmethod
    def of_session(
        cls,
        engines: SessionEngines,
        config: PartialsParams,
        messages_for: Callable[[str], list[Message]],
        *,
        realtime: bool,
        session_id: str,
    ) -> Partials:
        """A session's partials on ``engines`` (a file fed faster than real time waits for each)."""
        return cls(
            engines,
            config,
            messages_for,
            asr=engines.partial_asr,
            wait=not realtime,
            conversation=session_id,
            tools=engines.tools,
        )

    def __init__(
        self,
        engines: TurnEngines,
        config: PartialsParams,
        messages_for: Callable[[str], list[Message]],
        *,
        asr: AsrEngine | None = None,
        wait: bool = False,
        conversation: str | None = None,
        tools: ToolBox | None = None,
    ) -> None:
        self.engines = engines
        self.conversation = conversation  # the session's id: its LLM cache slot
        self.tools = tools  # the site's facts a question is given (ToolBox.for_question)
        self.asr = asr or engines.asr
        self.config = config
        self.messages_for = messages_for
        self.wait = wait
        self.record = PartialsRecord()
        self._utterance_start_s = 0.0
        self._next_due_s = float("inf")
        self._prefilled = ""
        self._task: asyncio.Task[None] | None = None
        self._paused = True  # no utterance, or a turn is running
        self._cancel = CancelEvent()  # the step under way (set by stop(), or by reply work behind it)

    def begin(self, utterance_start_s: float, speech_start_s: float) -> None:
        """A new utterance (SPEECH_START)."""
        self.stop()
        self.record = PartialsRecord()
        self._utterance_start_s = utterance_start_s
        self._next_due_s = speech_start_s + self.config.partial_interval_s
        self._prefilled = ""
        self._paused = False

    def resume(self) -> None:
        """The person went on speaking after a turn was started (RESUMED): partials go on."""
        self._paused = False

    def stop(self) -> None:
        """A turn starts (or the session ends): stop the step under way."""
        self._paused = True
        self._cancel.set()

    async def on_frame(self, now_s: float, audio_between: Callable[[float, float], np.ndarray]) -> None:
        """A frame of the utterance arrived (stream time ``now_s``) and no turn is running."""
        if not self.config.enabled or self._paused or now_s < self._next_due_s:
            return
        if self._task is not None and not self._task.done():
            return
        self._next_due_s = now_s + self.config.partial_interval_s
        audio = audio_between(self._utterance_start_s, now_s)
        self._cancel = CancelEvent()
        self._task = asyncio.create_task(self._step(audio, self._cancel), name="partial-transcript")
        if self.wait:
            await self._task

    async def close(self) -> None:
        self.stop()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _step(self, audio: np.ndarray, cancel: CancelEvent) -> None:
        try:
            await self._transcribe(audio, cancel)
        except asyncio.CancelledError:
            raise
        except Cancelled:
            pass  # reply work needed the ASR worker: this partial is given up
        except Exception:
            log.exception("a partial transcript or prefill failed; the turn goes on without it")

    async def _transcribe(self, audio: np.ndarray, cancel: CancelEvent) -> None:
        engines, record = self.engines, self.record
        started = time.monotonic()
        job = functools.partial(self.asr.transcribe, audio, cancel=cancel)
        result = await engines.asr_worker.background(job, cancel=cancel)
        if result is None:
            return  # the worker was busy with reply work: tried again one interval later
        record.partials += 1
        record.asr_ms += (time.monotonic() - started) * 1000.0
        previous, record.latest = record.latest, result.text.strip()
        stable = stable_prefix(previous, record.latest) if previous else ""
        words = prefill_words(stable, record.latest)
        if cancel.is_set() or not self.config.prefill or not words or words == self._prefilled:
            return
        await self._prefill(words, cancel)

    async def _prefill(self, words: str, cancel: CancelEvent) -> None:
        engines = self.engines
        messages = self.messages_for(words)
        if self.tools is not None:
            messages, _ = self.tools.for_question(messages, words)  # the facts its final words will be given
        job = functools.partial(engines.llm.prefill, messages, cancel=cancel, conversation=self.conversation)
        stats = await engines.llm_worker.background(job, cancel=cancel)
        if stats is None:
            return
        self.record.prefill_tokens += stats.evaluated_tokens
        self.record.prefill_discarded += stats.discarded_tokens
        if not stats.cancelled:
            self._prefilled = words
