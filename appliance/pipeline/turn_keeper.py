"""The turn in progress and the record of those done: one session's turns, one at a time.

A turn started at a pause stays until the endpointer confirms or drops it (``Turn.confirmed``); a
confirmed one is reaped when done; any is cancelled by a barge-in, a new turn or the session's end.
Each closed turn (except a dropped speculative one) is committed to the conversation, kept, logged,
stored and handed to ``on_turn``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from appliance.audio.base import AudioSink
from appliance.pipeline.conversation import Conversation
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.partials import PartialsRecord
from appliance.pipeline.playback import Player
from appliance.pipeline.session_config import SessionConfig
from appliance.pipeline.turn import Turn
from appliance.quality import said_again
from appliance.trace.labels import EndedBy, TurnOutcome
from appliance.trace.record import TurnTrace, new_turn_id
from appliance.trace.store import TraceStore

log = logging.getLogger(__name__)


@dataclass
class ActiveTurn:
    turn: Turn
    task: asyncio.Task[None]
    heard: PartialsRecord  # the utterance's partials (a prefill under way may still add to it)


class TurnKeeper:
    def __init__(
        self,
        conversation: Conversation,
        engines: SessionEngines,
        sink: AudioSink,
        config: SessionConfig,
        session_id: str,
        *,
        store: TraceStore | None,
        on_turn: Callable[[TurnTrace], None] | None,
    ) -> None:
        """``engines``: those new turns run on (the session moves them between turns). ``on_turn``: a
        turn is recorded; ``on_finished`` (set by whoever wants it): a turn that was answered is over,
        before it is recorded."""
        self.conversation = conversation
        self.engines = engines
        self._sink = sink
        self._config = config.turn
        self._session_id = session_id
        self.traces: deque[TurnTrace] = deque(maxlen=config.keep_traces)
        self.done = 0
        self.dropped_speculative = 0
        self.barge_ins = 0
        self._drain_timeout_s = config.drain_timeout_s
        self._store = store
        self.on_turn = on_turn
        self.on_finished: Callable[[Turn], None] | None = None
        self._last_transcript = ""
        self.active: ActiveTurn | None = None

    def new_trace(self, *, speculative: bool) -> TurnTrace:
        return TurnTrace(
            turn_id=new_turn_id(),
            session_id=self._session_id,
            speculative=speculative,
            bundle_version=self.engines.bundle_version,
        )

    def new_turn(self, trace: TurnTrace, audio: np.ndarray, **kwargs: object) -> Turn:
        return Turn(
            engines=self.engines,
            player=Player(self._sink),
            messages_for=self.conversation.with_user,
            audio_16k=audio,
            trace=trace,
            config=self._config,
            tools=self.engines.tools,
            **kwargs,  # type: ignore[arg-type]
        )

    async def start_without_speech(
        self,
        now: float,
        by: EndedBy,
        *,
        typed: str | None = None,
        typed_at: float = 0.0,
        say: str | None = None,
        record: PartialsRecord | None = None,
    ) -> None:
        """A turn without speech: keys typed (answered by the model), or a sentence only said."""
        await self.close(cancel=True)
        trace = self.new_trace(speculative=False)
        trace.endpoint_by = by
        trace.speech_start = trace.speech_end = typed_at if typed is not None else now
        trace.mark("endpoint", now)
        turn = self.new_turn(trace, np.zeros(0, dtype=np.float32), typed=typed, say=say)
        turn.confirm()
        self.start(turn, record or PartialsRecord())

    async def barge_in(self, what: str) -> None:
        """The person spoke (or typed) over the turn in progress: cut it."""
        if self.active is None:
            return
        self.barge_ins += 1
        log.info("session %s: %s on turn %s", self._session_id, what, self.active.turn.trace.turn_id)
        await self.close(cancel=True)

    def start(self, turn: Turn, heard: PartialsRecord) -> None:
        assert self.active is None, "close the active turn first"
        task = asyncio.create_task(turn.run(), name=f"turn-{turn.trace.turn_id}")
        self.active = ActiveTurn(turn, task, heard)

    @property
    def running(self) -> bool:
        return self.active is not None and not self.active.task.done()

    @property
    def playing(self) -> bool:
        """A reply is playing."""
        return self.active is not None and self.active.turn.player.playing

    def heard_reply(self) -> Turn | None:
        """The turn whose reply may be heard now (confirmed and not over)."""
        active = self.active
        return (
            active.turn if active is not None and active.turn.confirmed and not active.task.done() else None
        )

    @property
    def unconfirmed(self) -> Turn | None:
        active = self.active
        return active.turn if active is not None and not active.turn.confirmed else None

    async def drop(self) -> None:
        """The person kept talking: the speculative turn is dropped, not recorded."""
        if self.active is not None and not self.active.turn.confirmed:
            self.active.turn.dropped = True
            self.dropped_speculative += 1
            await self.close(cancel=True)

    async def wait_confirmed(self) -> None:
        active = self.active
        if active is not None and active.turn.confirmed and not active.task.done():
            await asyncio.wait({active.task}, timeout=self._drain_timeout_s)

    async def reap(self) -> None:
        # An unconfirmed turn stays until ENDPOINT or RESUMED decides about it, even when done.
        if self.active is not None and self.active.turn.confirmed and self.active.task.done():
            await self.close(cancel=False)

    async def close(
        self,
        *,
        cancel: bool,
        outcome: TurnOutcome | Literal[""] = "",
        if_stopped: TurnOutcome = TurnOutcome.STOPPED,
    ) -> None:
        """Close the active turn: cancel it (``outcome``: why it was cut, when the session ends) or
        let it finish; record it either way. ``if_stopped``: the outcome when the session itself is
        cancelled meanwhile."""
        active, self.active = self.active, None
        if active is None:
            return
        try:
            if not active.task.done():
                if cancel:
                    active.turn.trace.outcome = outcome
                    active.task.cancel()
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(active.task), self._drain_timeout_s)
                    if not active.task.done():
                        log.error("turn %s did not finish in time; cancelling it", active.turn.trace.turn_id)
                        active.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await active.task
        except asyncio.CancelledError:
            # The session itself is being stopped with the reply still playing (a call that hung up, or
            # the daemon shutting down): stop the turn, and keep its record with what was played.
            active.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await active.task
            active.turn.trace.outcome = if_stopped
            await self._finish(active.turn, active.heard)
            raise
        await self._finish(active.turn, active.heard)

    async def _finish(self, turn: Turn, heard: PartialsRecord) -> None:
        trace = turn.trace
        trace.partials, trace.partial_asr_ms = heard.partials, round(heard.asr_ms, 1)
        trace.prefill_tokens = heard.prefill_tokens
        trace.prefill_discarded = heard.prefill_discarded + turn.stats.discarded_prefill_tokens
        if turn.dropped:
            log.debug("speculative turn %s dropped", trace.turn_id)
            return
        if self.on_finished is not None:
            self.on_finished(turn)
        if turn.transcript:
            try:
                trace.repeated = said_again(turn.transcript, self._last_transcript)
            except Exception:  # a quality signal must never cost the call or the turn's record
                log.exception("turn %s: could not compare the transcript with the last one", trace.turn_id)
            self._last_transcript = turn.transcript
        if trace.error is None and turn.transcript:
            self.conversation.commit(turn.transcript, turn.played_text)
        self.done += 1
        self.traces.append(trace)
        log.info("turn %s", trace.log_line())
        if self._store is not None:
            try:
                await self._store.add_async(trace)
            except Exception:
                log.exception("turn %s: could not store the trace", trace.turn_id)
        if self.on_turn is not None:
            self.on_turn(trace)
