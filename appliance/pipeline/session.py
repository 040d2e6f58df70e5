"""A session: one audio endpoint (microphone and speaker, a call, a file) with its own VAD state,
endpointer and conversation; the engines are shared with every other session.

It routes between parts that know nothing of each other: the speech loop (speech_loop.py: frames ->
echo gate -> VAD -> endpointer, the verdicts on each pause), the turns (turn_keeper.py: the one in
progress, turn.py, and those done), the partials (partials.py: partial transcripts and the LLM's
prefill while someone speaks) and, on a call, the call policy (call_policy.py, carried out by
call_driver.py: keypad, silence prompt, goodbye, transfer). The endpointer's events drive the turns:

    SPEECH_START    while a turn is running: barge-in, cancel it; over a reply being heard, the
                    reply was paused at the first voiced frame and the overlap decides (overlap.py)
    PROBABLY_ENDED  start a turn at once (ASR, LLM, TTS run; playback waits); when the reply's
                    language model judges turns and no other reply is running, its P(the words end
                    the message), read while it evaluates them, goes back to the endpointer too
    RESUMED         the person kept talking: drop that turn
    ENDPOINT        confirm it (or start one now if none is running): playback may begin
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import numpy as np

from appliance.audio.base import AudioSink, AudioSource, HeardFrame
from appliance.pipeline.call_driver import CallDriver
from appliance.pipeline.call_policy import CallLine
from appliance.pipeline.conversation import Conversation
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.partials import Partials
from appliance.pipeline.session_config import SessionConfig
from appliance.pipeline.speech_loop import SpeechLoop
from appliance.pipeline.speech_over_reply import SessionParts, SpeechOverReply
from appliance.pipeline.turn_keeper import TurnKeeper
from appliance.trace.labels import TurnOutcome, WordsNotExpected
from appliance.trace.record import TurnTrace, new_turn_id
from appliance.trace.store import TraceStore
from engines.vad.endpointer import Endpointer, EndpointEvent, EventKind

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        *,
        engines: SessionEngines,
        source: AudioSource,
        sink: AudioSink,
        config: SessionConfig | None = None,
        store: TraceStore | None = None,
        session_id: str | None = None,
        on_turn: Callable[[TurnTrace], None] | None = None,
        engines_offered: Callable[[], SessionEngines] | None = None,
        call: CallLine | None = None,
    ) -> None:
        """``engines_offered``: the engines new turns should run on (the daemon's, which a bundle
        activation replaces); the session moves to them between turns, when nobody is speaking.
        ``call``: the phone call the audio belongs to (its keypad and transfers); None elsewhere."""
        self.engines = engines
        self._engines_offered = engines_offered
        self.source, self.sink = source, sink
        self.config = config or SessionConfig()
        self.session_id = session_id or f"s-{new_turn_id()[:8]}"
        self.conversation = Conversation(self.config.conversation.max_history_messages)
        self.turns = TurnKeeper(
            self.conversation,
            engines,
            sink,
            self.config,
            self.session_id,
            store=store,
            on_turn=on_turn,
        )
        self.hearing = SpeechLoop(
            self.config, realtime=source.realtime, on_event=self._on_event, label=self.session_id
        )
        self.call = CallDriver(call, self.turns, self.config, self.session_id) if call is not None else None
        self._speech_start_mono: float | None = None
        self._source_ended = False
        self.partials = self._partials_on(engines)
        self.over_reply = SpeechOverReply(
            self.config.overlap,
            SessionParts(
                self.session_id,
                endpointer=lambda: self.endpointer,
                engines=lambda: self.engines,
                partials=lambda: self.partials,
                turns=self.turns,
                start_turn=lambda event, now, confirmed: self._start_turn(event, now, confirmed=confirmed),
            ),
        )

    def _partials_on(self, engines: SessionEngines) -> Partials:
        config, with_user, realtime = self.config.partials, self.conversation.with_user, self.source.realtime
        return Partials.of_session(engines, config, with_user, realtime=realtime, session_id=self.session_id)

    @property
    def endpointer(self) -> Endpointer:
        return self.hearing.endpointer

    @property
    def idle(self) -> bool:
        """No turn running and nobody speaking."""
        return self.turns.active is None and not self.endpointer.in_speech

    @property
    def in_use(self) -> bool:
        """On a call, or a turn running, or someone speaking: not to be interrupted by a restart."""
        return self.call is not None or not self.idle

    async def run(self, *, stop: asyncio.Event | None = None, max_turns: int | None = None) -> None:
        """Listen until the source ends, ``stop`` is set, or ``max_turns`` turns have finished."""
        await self.hearing.listen_with(self.engines)
        stopped_early = False
        try:
            async for frame in self.hearing.frames(self.source.frames()):
                if frame is not None:
                    await self._on_frame(frame)
                elif self.over_reply.pending:
                    await self.over_reply.step(time.monotonic(), voiced=False, reply=self.turns.heard_reply())
                if self.call is not None:
                    await self.call.keys(time.monotonic())
                if not self.source.realtime:
                    # A file fed faster than real time: answer each turn before listening on, as a
                    # person would wait for the answer (no barge-in without a clock).
                    await self.hearing.wait_for_words()
                    await self.turns.wait_confirmed()
                await self.turns.reap()
                if self.call is not None and await self.call.tick_ends_call(
                    time.monotonic(), busy=not self.idle
                ):
                    log.info("session %s: ending the call: %s", self.session_id, self.call.hang_up)
                    break
                await self._move_to_offered_engines()
                if stop is not None and stop.is_set():
                    stopped_early = True
                    break
                if max_turns is not None and self.turns.done >= max_turns and self.turns.active is None:
                    break
            else:
                self._source_ended = True
                if not self.source.ends_with_listener:
                    await self.hearing.finish()
        except asyncio.CancelledError:
            stopped_early = True  # the session itself was stopped (the daemon shutting down, a call gone)
            raise
        finally:
            self.hearing.close()
            if self.call is not None:
                await self.call.close()
            await self.partials.close()
            ended = TurnOutcome.HANGUP if self._source_ended else TurnOutcome.STOPPED
            hung_up = self._source_ended and self.source.ends_with_listener
            await self.turns.close(cancel=stopped_early or hung_up, outcome=ended, if_stopped=ended)
            self.engines.llm.end_conversation(self.session_id)

    async def _move_to_offered_engines(self) -> None:
        """Between turns, with nobody speaking and nothing being judged: go on with the engines
        offered (a new bundle version's). The conversation's history is text and stays; the VAD
        stream starts afresh in silence; the old LLM forgets this conversation."""
        offered = self._engines_offered() if self._engines_offered is not None else self.engines
        typing = self.call is not None and self.call.typing
        if offered is self.engines or not self.idle or self.hearing.judging or typing:
            return
        old = self.engines
        await self.partials.close()
        old.llm.end_conversation(self.session_id)
        await self.hearing.listen_with(offered)
        self.engines = self.turns.engines = offered
        self.partials = self._partials_on(offered)
        versions = [engines.bundle_version or "unversioned" for engines in (offered, old)]
        log.info("session %s: now on the engines of bundle version %s (was %s)", self.session_id, *versions)

    async def _on_frame(self, heard: np.ndarray | HeardFrame) -> None:
        await self.hearing.feed(
            heard,
            playing=self.turns.playing,
            echo_converged=self.source.echo_converged,
            answering=self.turns.active is not None,
        )
        if self.over_reply.deciding:
            await self.over_reply.step(
                self.hearing.heard_at,
                voiced=self.hearing.voiced,
                reply=self.turns.heard_reply(),
                by_linear_ear=self.hearing.by_linear_ear,
            )
        if self.endpointer.in_speech and self.turns.active is None:
            await self.partials.on_frame(self.endpointer.time_s, self.hearing.audio_between)

    async def _on_event(self, event: EndpointEvent, now: float) -> None:
        if event.kind is EventKind.SPEECH_START:
            self._speech_start_mono = (
                self.hearing.monotonic_at(event.speech_start_s, now) - self.source.heard_late_s
            )
            if self.call is not None:
                self.call.heard(now)
            if not self.over_reply.began_speaking():  # over a paused reply, the overlap decides
                await self.turns.barge_in("barge-in")
            self.partials.begin(event.utterance_start_s, event.speech_start_s)
        elif event.kind is EventKind.PROBABLY_ENDED:
            if self.over_reply.speaking:
                self.over_reply.paused_speaking(
                    event, self.hearing.audio_between(event.utterance_start_s, event.time_s)
                )
            else:
                await self._start_turn(event, now, confirmed=False)
        elif event.kind is EventKind.RESUMED:
            if self.over_reply.speaking:
                self.over_reply.spoke_again()
            else:
                await self.turns.drop()
            self.partials.resume()
        elif event.kind is EventKind.ENDPOINT and self.over_reply.speaking:
            await self.over_reply.at_endpoint(event, self.config.overlap.backchannel_max_s)
        elif event.kind is EventKind.ENDPOINT:
            waiting = self.turns.unconfirmed
            if waiting is not None:
                self.hearing.stamp_endpoint(waiting.trace, event, now)
                waiting.confirm()
            else:
                await self._start_turn(event, now, confirmed=True)

    async def _start_turn(self, event: EndpointEvent, now: float, *, confirmed: bool) -> None:
        await self.turns.close(cancel=True)
        # A turn started at the endpoint (after our own earlier reply was cut) has no pause to judge.
        words_missing = WordsNotExpected.NO_PAUSE if confirmed else self.hearing.words_unavailable()
        self.partials.stop()
        end_s = event.speech_end_s if event.speech_end_s is not None else event.time_s
        trace = self.turns.new_trace(speculative=not confirmed)
        trace.words_not_expected = "" if words_missing is None else words_missing
        trace.speech_start = self._speech_start_mono
        trace.opened_by = self.hearing.opened_by
        trace.speech_end = self.hearing.monotonic_at(end_s, now) - self.source.heard_late_s
        turn = self.turns.new_turn(
            trace,
            self.hearing.audio_between(event.utterance_start_s, event.time_s),
            on_words=self.hearing.expect_words(event.pause_id) if words_missing is None else None,
            unanswered=self.over_reply.after_a_stop(self._speech_start_mono),
        )
        if confirmed:
            self.hearing.stamp_endpoint(trace, event, now)
            turn.confirm()
        self.turns.start(turn, self.partials.record)
