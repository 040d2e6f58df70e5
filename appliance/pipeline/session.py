"""A session: one audio endpoint (microphone and speaker, a call, a file) with its own VAD state,
endpointer and conversation; the engines are shared with every other session.

Frames flow source -> VAD (worker thread) -> endpointer; endpointer events start, confirm, drop or
interrupt turns:

    PROBABLY_ENDED  start a turn at once (ASR, LLM, TTS run; playback waits); when the reply's
                    language model judges turns and no other reply is running, its P(the words end
                    the message), read while it evaluates them, goes back to the endpointer too
    RESUMED         the person kept talking: drop that turn
    TURN_CHECK      ask the turn detector (its own worker) whether the utterance sounds finished;
                    its verdict goes back to the endpointer, which may then send ENDPOINT
    ENDPOINT        confirm it (or start one now if none is running): playback may begin
    SPEECH_START    while a turn is running or playing: barge-in, cancel it

While an utterance goes on, partial transcripts and the LLM's prefill of their stable words run in
the background (appliance/pipeline/partials.py, ``asr.partial_interval_ms``).

While the appliance is speaking the endpointer's threshold is raised (or the VAD gated entirely)
where no echo canceller takes the speaker out of the microphone (appliance/audio/echo.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.agent import Conversation
from appliance.audio.base import FRAME_S, FRAME_SAMPLES, AudioSink, AudioSource, HeardFrame, split_frame
from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.keypad import TypedNumber, typed_text
from appliance.pipeline.params import CallParams, HistoryParams
from appliance.pipeline.partials import Partials, PartialsConfig, PartialsRecord
from appliance.pipeline.playback import Player
from appliance.pipeline.ticks import frames_or_ticks
from appliance.pipeline.turn import Turn, TurnConfig
from appliance.quality import said_again
from appliance.trace.record import TurnTrace, WordsNotExpected, new_turn_id
from appliance.trace.store import TraceStore
from engines.vad.endpointer import Endpointer, EndpointerParams, EndpointEvent, EventKind

log = logging.getLogger(__name__)

TICK_S = 0.1  # how often the session looks up when a live source sends nothing


@dataclass(frozen=True)
class SessionConfig:
    endpointer: EndpointerParams = field(default_factory=EndpointerParams)
    echo: EchoGate = field(default_factory=EchoGate.of)
    turn: TurnConfig = field(default_factory=TurnConfig)
    partials: PartialsConfig = field(default_factory=PartialsConfig)
    history: HistoryParams = field(default_factory=HistoryParams)
    call: CallParams = field(default_factory=CallParams)
    keep_traces: int = 100  # recent turns kept in memory on the session (all go to the store)
    drain_timeout_s: float = 300.0  # how long a turn may still run after the source ended


@dataclass
class _UtteranceChecks:
    """What the turn detector said during one utterance, for the trace of the turn that answers it."""

    checks: int = 0
    incomplete: int = 0
    failed: int = 0
    last_ms: float | None = None
    last_probability: float | None = None
    words_p: float | None = None  # the words' verdict on the last pause that had one


class _ActiveTurn:
    def __init__(self, turn: Turn, task: asyncio.Task[None], heard: PartialsRecord) -> None:
        self.turn = turn
        self.task = task
        self.heard = heard  # the utterance's partials (a prefill under way may still add to it)


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
    ) -> None:
        """``engines_offered``: the engines new turns should run on (the daemon's, which a bundle
        activation replaces); the session moves to them between turns, when nobody is speaking."""
        self.engines = engines
        self._engines_offered = engines_offered
        self._vad_stream: Any = None
        self.source = source
        self.sink = sink
        self.config = config or SessionConfig()
        self.store = store
        self.session_id = session_id or f"s-{new_turn_id()[:8]}"
        self.on_turn = on_turn
        self.conversation = Conversation(self.config.history.max_history_messages)
        self.traces: deque[TurnTrace] = deque(maxlen=self.config.keep_traces)
        self.dropped_speculative = 0
        self.barge_ins = 0
        self._last_transcript = ""
        self._keys = TypedNumber(
            self.conversation.with_user, conversation=self.session_id, prefill=self.config.partials.prefill
        )
        self._quiet_since = time.monotonic()  # the caller's last sign of life, or our last reply's end
        self._prompted = False  # ... and they were asked whether they are still there
        self._hang_up: str | None = None  # why the session ends the call after the current turn
        self._transfer_to: str | None = None  # a transfer target, once the current turn is over
        self._transferring: asyncio.Task[tuple[str, str | None]] | None = None
        self.turns_done = 0
        self.endpointer = Endpointer(self.config.endpointer, threshold=self.config.echo.threshold)
        self._frames: deque[tuple[np.ndarray, float]] = deque(
            maxlen=math.ceil(
                (self.config.endpointer.max_utterance_s + self.config.endpointer.pre_roll_s + 2.0) / FRAME_S
            )
        )
        self._frame_count = 0
        self._active: _ActiveTurn | None = None
        self._speech_start_mono: float | None = None
        self._source_ended = False
        self._checks = _UtteranceChecks()
        self._check_tasks: set[asyncio.Task[None]] = set()
        self._words_due: asyncio.Event | None = None  # a file source waits for the words' verdict
        self.partials = self._partials_on(engines)

    def _partials_on(self, engines: SessionEngines) -> Partials:
        return Partials(
            engines,
            self.config.partials,
            self.conversation.with_user,
            asr=engines.partial_asr,
            wait=not self.source.realtime,
            conversation=self.session_id,
            tools=engines.tools,
        )

    @property
    def speaking(self) -> bool:
        return self._active is not None and self._active.turn.player.playing

    @property
    def state(self) -> str:
        """What the admin page shows: speaking (a reply playing), thinking (a turn running), listening."""
        if self.speaking:
            return "speaking"
        return "thinking" if self._active is not None else "listening"

    @property
    def idle(self) -> bool:
        """No turn running and nobody speaking."""
        return self._active is None and not self.endpointer.in_speech

    @property
    def on_call(self) -> bool:
        """The audio is a call's (it ends when the caller hangs up)."""
        return self.source.ends_with_listener

    @property
    def heard(self) -> str:
        """The latest partial transcript of the utterance in progress ("" when none)."""
        return self.partials.record.latest if self.endpointer.in_speech else ""

    async def run(self, *, stop: asyncio.Event | None = None, max_turns: int | None = None) -> None:
        """Listen until the source ends, ``stop`` is set, or ``max_turns`` turns have finished."""
        self._vad_stream = await self.engines.vad_worker.call(self.engines.vad.stream)
        stopped_early = False
        try:
            async for frame in self._heard():
                if frame is not None:
                    await self._on_frame(frame)
                await self._on_keypad(time.monotonic())
                if not self.source.realtime:
                    # A file fed faster than real time: answer each turn before listening on, as a
                    # person would wait for the answer (no barge-in without a clock); and a pause's
                    # verdicts come before the next frame, as they would within its silence.
                    await self._wait_for_words()
                    await self._wait_for_confirmed_turn()
                await self._reap()
                await self._watch_silence(time.monotonic())
                await self._check_transfer(time.monotonic())
                if self._hang_up is not None and self._active is None:
                    log.info("session %s: ending the call: %s", self.session_id, self._hang_up)
                    break
                await self._move_to_offered_engines()
                if stop is not None and stop.is_set():
                    stopped_early = True
                    break
                if max_turns is not None and self.turns_done >= max_turns and self._active is None:
                    break
            else:
                self._source_ended = True
                if not self.source.ends_with_listener:
                    for event in self.endpointer.finish():
                        await self._on_event(event, time.monotonic())
        except asyncio.CancelledError:
            stopped_early = True  # the session itself was stopped (the daemon shutting down, a call gone)
            raise
        finally:
            for task in [*self._check_tasks, *([self._transferring] if self._transferring else [])]:
                task.cancel()
            await self.partials.close()
            await self._keys.close()
            hung_up = self._source_ended and self.source.ends_with_listener
            await self._close_active(
                cancel=stopped_early or hung_up, outcome="hangup" if self._source_ended else "stopped"
            )
            self.engines.llm.end_conversation(self.session_id)

    def _heard(self) -> AsyncIterator[np.ndarray | HeardFrame | None]:
        frames = self.source.frames()
        # A live source can fall silent (a phone's silence suppression) while turns play out.
        return frames_or_ticks(frames, TICK_S) if self.source.realtime else frames

    async def _move_to_offered_engines(self) -> None:
        """Between turns, with nobody speaking and nothing being judged: go on with the engines
        offered (a new bundle version's). The conversation's history is text and stays; the VAD
        stream starts afresh in silence; the old LLM forgets this conversation."""
        offered = self._engines_offered() if self._engines_offered is not None else self.engines
        if (
            offered is self.engines
            or self._active is not None
            or self.endpointer.in_speech
            or self._check_tasks
            or self._keys
        ):
            return
        old = self.engines
        await self.partials.close()
        old.llm.end_conversation(self.session_id)
        self._vad_stream = await offered.vad_worker.call(offered.vad.stream)
        self.engines = offered
        self.partials = self._partials_on(offered)
        log.info(
            "session %s: now on the engines of bundle version %s (was %s)",
            self.session_id,
            offered.bundle_version or "unversioned",
            old.bundle_version or "unversioned",
        )

    async def _on_keypad(self, now: float) -> None:
        """Keys typed on a caller's keypad are a turn of their own, ended by # or a pause
        (``keypad_timeout_ms``); the first key cuts a reply being played, as speech does."""
        params = self.config.call
        for key in self.source.keypad():
            if key == params.operator_digit and not self._keys and self.source.ends_with_listener:
                log.info("session %s: operator key: putting the caller through", self.session_id)
                self._transfer_to = params.operator_target
                preamble = params.transfer_preamble.format(target=params.operator_target)
                await self._start_text_turn(now, "operator_key", say=preamble)
                continue
            if key == "#":
                await self._typed(now)
                continue
            if not self._keys and self._active is not None and not self._active.task.done():
                self.barge_ins += 1
                log.info(
                    "session %s: keypad barge-in on turn %s", self.session_id, self._active.turn.trace.turn_id
                )
                await self._close_active(cancel=True)
            self._keys.add(key, now, self.engines.llm, self.engines.llm_worker)
            self._heard_someone(now)
        if self._keys.paused(now, self.config.call.keypad_timeout_s):
            await self._typed(now)

    async def _typed(self, now: float) -> None:
        last_key_at = self._keys.last_key_at
        keys, prefilled = self._keys.take()
        if not keys:
            return
        log.info("session %s: %d key(s) typed on the keypad", self.session_id, len(keys))
        record = PartialsRecord(prefill_tokens=prefilled)
        await self._start_text_turn(
            now, "keypad", typed=typed_text(keys), typed_at=last_key_at, record=record
        )

    async def _start_text_turn(
        self,
        now: float,
        by: str,
        *,
        typed: str | None = None,
        typed_at: float = 0.0,
        say: str | None = None,
        record: PartialsRecord | None = None,
    ) -> None:
        """A turn without speech: keys typed (answered by the model), or a sentence only said."""
        if self._active is not None:
            await self._close_active(cancel=True)
        trace = TurnTrace(
            turn_id=new_turn_id(),
            session_id=self.session_id,
            bundle_version=self.engines.bundle_version,
            endpoint_by=by,
        )
        trace.speech_start = trace.speech_end = typed_at if typed is not None else now
        trace.mark("endpoint", now)
        turn = Turn(
            engines=self.engines,
            player=Player(self.sink),
            messages_for=self.conversation.with_user,
            audio_16k=np.zeros(0, dtype=np.float32),
            trace=trace,
            config=self.config.turn,
            tools=self.engines.tools,
            typed=typed,
            say=say,
        )
        turn.confirm()
        task = asyncio.create_task(turn.run(), name=f"turn-{trace.turn_id}")
        self._active = _ActiveTurn(turn, task, record or PartialsRecord())

    async def _transfer(self, target: str) -> tuple[str, str | None]:
        uri = self.config.call.transfer_uri(target)
        if uri is None:
            return target, f"{target!r} is not one of sip.transfer_targets"
        log.info("session %s: transferring the caller to %s (%s)", self.session_id, target, uri)
        return target, await self.source.transfer(uri)

    async def _check_transfer(self, now: float) -> None:
        """A transfer that is over: done, the call ends; refused or unanswered, the caller is told so and
        the conversation goes on."""
        task = self._transferring
        if task is None or not task.done():
            return
        self._transferring = None
        target, why = task.result()
        if why is None:
            self._hang_up = f"put through to {target}"
            return
        log.warning("session %s: the transfer to %s failed: %s", self.session_id, target, why)
        await self._start_text_turn(
            now, "transfer_failed", say=self.config.call.transfer_failed_reply.format(target=target)
        )

    def _heard_someone(self, now: float) -> None:
        self._quiet_since, self._prompted = now, False

    async def _watch_silence(self, now: float) -> None:
        """A caller silent for ``silence_prompt_s`` after the last reply is asked once whether they are
        still there; silent ``silence_hangup_s`` more, the call is ended."""
        params = self.config.call
        if not self.source.ends_with_listener or params.silence_prompt_s <= 0:
            return
        if self._active is not None or self.endpointer.in_speech or self._keys:
            return
        quiet_s = now - self._quiet_since
        if not self._prompted and quiet_s >= params.silence_prompt_s:
            self._prompted = True
            log.info(
                "session %s: silent for %.0f s; asking whether anyone is there", self.session_id, quiet_s
            )
            await self._start_text_turn(now, "silence_prompt", say=params.silence_prompt)
        elif self._prompted and quiet_s >= params.silence_hangup_s:
            self._hang_up = (
                f"nobody answered within {params.silence_hangup_s:g} s of asking whether anyone is there"
            )

    async def _on_frame(self, heard: np.ndarray | HeardFrame) -> None:
        frame, transcribed = split_frame(heard)
        if len(frame) != FRAME_SAMPLES or len(transcribed) != FRAME_SAMPLES:
            raise ValueError(f"frames must have {FRAME_SAMPLES} samples, got {len(frame)}")
        now = time.monotonic()
        self._frames.append((transcribed, now))  # the utterance's audio: ASR, partials, the turn model
        self._frame_count += 1
        probability = float(await self.engines.vad_worker.call(self._vad_stream.probability, frame))
        playing = self.speaking
        self.endpointer.threshold = self.config.echo.threshold_for(playing)
        probability = self.config.echo.probability_for(probability, playing)
        if playing and not self.source.echo_converged:
            probability = 0.0  # the echo canceller is still learning the room (a session's first seconds)
        for event in self.endpointer.feed(probability, FRAME_S):
            await self._on_event(event, now)
        if self.endpointer.in_speech and self._active is None:
            await self.partials.on_frame(self.endpointer.time_s, self._audio_between)

    async def _on_event(self, event: EndpointEvent, now: float) -> None:
        log.debug("session %s: %s at %.3f s", self.session_id, event.kind.value, event.time_s)
        if event.kind is EventKind.SPEECH_START:
            self._speech_start_mono = self._monotonic_at(event.speech_start_s, now)
            self._checks = _UtteranceChecks()
            self._heard_someone(now)
            if self._active is not None:
                self.barge_ins += 1
                log.info("session %s: barge-in on turn %s", self.session_id, self._active.turn.trace.turn_id)
                await self._close_active(cancel=True)
            self.partials.begin(event.utterance_start_s, event.speech_start_s)
        elif event.kind is EventKind.PROBABLY_ENDED:
            await self._start_turn(event, now, confirmed=False)
        elif event.kind is EventKind.RESUMED:
            if self._active is not None and not self._active.turn.confirmed:
                self._active.turn.dropped = True
                self.dropped_speculative += 1
                await self._close_active(cancel=True)
            self.partials.resume()
        elif event.kind is EventKind.TURN_CHECK:
            await self._check_turn(event)
        elif event.kind is EventKind.ENDPOINT:
            active = self._active
            if active is not None and not active.turn.confirmed:
                self._stamp_endpoint(active.turn.trace, event, now)
                active.turn.confirm()
            else:
                await self._start_turn(event, now, confirmed=True)

    async def _check_turn(self, event: EndpointEvent) -> None:
        audio = self._audio_between(event.utterance_start_s, event.time_s)
        task = asyncio.create_task(self._judge(event.check_id, audio), name=f"turn-check-{event.check_id}")
        self._check_tasks.add(task)
        task.add_done_callback(self._check_tasks.discard)
        if not self.source.realtime:
            await task  # a file fed faster than real time: the verdict comes before the next frame

    async def _judge(self, check_id: int, audio: np.ndarray) -> None:
        """Ask the turn detector on its worker; hand its verdict to the endpointer."""
        detector, worker = self.engines.turn, self.engines.turn_worker
        started = time.monotonic()
        probability: float | None = None
        try:
            if detector is None or worker is None:
                raise RuntimeError("endpointer.mode is smart_turn but the session has no turn detector")
            probability = await worker.call(detector.complete_probability, audio)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s: the turn detector failed; this pause ends on silence", self.session_id)
            self._checks.failed += 1
        else:
            self._checks.last_probability = round(probability, 4)
            self._checks.incomplete += probability < self.config.endpointer.turn_complete_threshold
        self._checks.checks += 1
        self._checks.last_ms = round((time.monotonic() - started) * 1000.0, 1)
        for ended in self.endpointer.verdict(check_id, probability):
            await self._on_event(ended, time.monotonic())

    def _words_unavailable(self) -> WordsNotExpected | None:
        """Why the reply's language model cannot judge this pause's words at no extra wait (None when it
        can): it must judge turns and not be answering another session (whose reply would delay our
        prompt's evaluation). The turn's trace keeps the reason; /metrics counts it."""
        params, llm = self.config.endpointer, self.engines.llm
        if params.mode != "smart_turn" or not params.judge_words:
            return WordsNotExpected.OFF
        if not llm.judges_turns:
            return WordsNotExpected.MODEL_CANNOT
        now = llm.occupancy()
        if now.running or now.waiting:
            return WordsNotExpected.LLM_BUSY
        return None

    def _words_heard(self, pause_id: int, probability: float | None) -> None:
        """The words' verdict on pause ``pause_id`` (on the event loop, from the turn)."""
        if self._words_due is not None:
            self._words_due.set()
        if probability is not None:
            self._checks.words_p = round(probability, 6)
        ended = self.endpointer.text_verdict(pause_id, probability)
        if ended:
            task = asyncio.ensure_future(self._handle_events(ended))
            self._check_tasks.add(task)
            task.add_done_callback(self._check_tasks.discard)

    async def _handle_events(self, events: list[EndpointEvent]) -> None:
        for event in events:
            await self._on_event(event, time.monotonic())

    async def _wait_for_words(self) -> None:
        due = self._words_due
        if due is not None:
            await asyncio.wait_for(due.wait(), self.config.drain_timeout_s)
            self._words_due = None
            await asyncio.gather(*list(self._check_tasks), return_exceptions=True)

    def _stamp_endpoint(self, trace: TurnTrace, event: EndpointEvent, now: float) -> None:
        trace.mark("endpoint", now)
        trace.endpoint_by = event.by
        checks = self._checks
        trace.turn_checks, trace.turn_incomplete, trace.turn_check_failed = (
            checks.checks,
            checks.incomplete,
            checks.failed,
        )
        trace.turn_check_ms, trace.turn_complete_p = checks.last_ms, checks.last_probability
        if checks.words_p is not None:
            trace.words_complete_p = checks.words_p

    async def _start_turn(self, event: EndpointEvent, now: float, *, confirmed: bool) -> None:
        if self._active is not None:
            await self._close_active(cancel=True)
        # A turn started at the endpoint (after our own earlier reply was cut) has no pause to judge.
        words_missing = WordsNotExpected.NO_PAUSE if confirmed else self._words_unavailable()
        judge_words = words_missing is None
        self.partials.stop()
        end_s = event.speech_end_s if event.speech_end_s is not None else event.time_s
        audio = self._audio_between(event.utterance_start_s, event.time_s)
        trace = TurnTrace(
            turn_id=new_turn_id(),
            session_id=self.session_id,
            speculative=not confirmed,
            bundle_version=self.engines.bundle_version,
            words_not_expected="" if words_missing is None else words_missing.value,
        )
        trace.speech_start = self._speech_start_mono
        trace.speech_end = self._monotonic_at(end_s, now)
        turn = Turn(
            engines=self.engines,
            player=Player(self.sink),
            messages_for=self.conversation.with_user,
            audio_16k=audio,
            trace=trace,
            config=self.config.turn,
            tools=self.engines.tools,
            on_words=functools.partial(self._words_heard, event.pause_id) if judge_words else None,
        )
        if judge_words:
            self.endpointer.expect_text(event.pause_id)
            if not self.source.realtime:
                self._words_due = asyncio.Event()
        if confirmed:
            self._stamp_endpoint(trace, event, now)
            turn.confirm()
        task = asyncio.create_task(turn.run(), name=f"turn-{trace.turn_id}")
        self._active = _ActiveTurn(turn, task, self.partials.record)

    async def _wait_for_confirmed_turn(self) -> None:
        active = self._active
        if active is not None and active.turn.confirmed and not active.task.done():
            await asyncio.wait({active.task}, timeout=self.config.drain_timeout_s)

    async def _reap(self) -> None:
        # An unconfirmed turn stays until ENDPOINT or RESUMED decides about it, even when done.
        if self._active is not None and self._active.turn.confirmed and self._active.task.done():
            await self._close_active(cancel=False)

    async def _close_active(self, *, cancel: bool, outcome: str = "") -> None:
        """Close the active turn: cancel it (``outcome``: why it was cut, when the session ends) or
        let it finish; record it either way."""
        active, self._active = self._active, None
        if active is None:
            return
        try:
            if not active.task.done():
                if cancel:
                    active.turn.trace.outcome = outcome
                    active.task.cancel()
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(active.task), self.config.drain_timeout_s)
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
            active.turn.trace.outcome = "hangup" if self._source_ended else "stopped"
            await self._finish(active.turn, active.heard)
            raise
        await self._finish(active.turn, active.heard)

    async def _finish(self, turn: Turn, heard: PartialsRecord) -> None:
        trace = turn.trace
        trace.partials, trace.partial_asr_ms = heard.partials, round(heard.asr_ms, 1)
        trace.prefill_tokens = heard.prefill_tokens
        trace.prefill_discarded = heard.prefill_discarded + turn.stats.discarded_prefill_tokens
        if turn.dropped:
            log.debug("session %s: speculative turn %s dropped", self.session_id, trace.turn_id)
            return
        self._quiet_since = time.monotonic()  # silence is counted from the end of the reply
        if turn.ends_call and self.source.ends_with_listener:
            self._hang_up = "the agent ended the call (after its goodbye)"
        target, self._transfer_to = turn.transfer_to or self._transfer_to, None
        if target and self.source.ends_with_listener and self._transferring is None:
            self._transferring = asyncio.create_task(
                self._transfer(target), name=f"transfer-{self.session_id}"
            )
        if turn.transcript:
            try:
                trace.repeated = said_again(turn.transcript, self._last_transcript)
            except Exception:  # a quality signal must never cost the call or the turn's record
                log.exception("turn %s: could not compare the transcript with the last one", trace.turn_id)
            self._last_transcript = turn.transcript
        if trace.error is None and turn.transcript:
            self.conversation.commit(turn.transcript, turn.played_text)
        self.turns_done += 1
        self.traces.append(trace)
        log.info("turn %s", trace.log_line())
        if self.store is not None:
            try:
                await self.store.add_async(trace)
            except Exception:
                log.exception("turn %s: could not store the trace", trace.turn_id)
        if self.on_turn is not None:
            self.on_turn(trace)

    def _audio_between(self, start_s: float, end_s: float) -> np.ndarray:
        first_index = self._frame_count - len(self._frames)
        start = max(first_index, math.floor(start_s / FRAME_S + 1e-6))
        end = min(self._frame_count, math.ceil(end_s / FRAME_S - 1e-6))
        frames = [self._frames[i - first_index][0] for i in range(start, end)]
        if not frames:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(frames)

    def _monotonic_at(self, stream_s: float, now: float) -> float:
        """The monotonic time at which stream time ``stream_s`` arrived (frames carry their arrival)."""
        first_index = self._frame_count - len(self._frames)
        index = math.ceil(stream_s / FRAME_S - 1e-6) - 1
        if first_index <= index < self._frame_count:
            arrival = self._frames[index - first_index][1]
            return arrival - ((index + 1) * FRAME_S - stream_s)
        return now - (self._frame_count * FRAME_S - stream_s)
