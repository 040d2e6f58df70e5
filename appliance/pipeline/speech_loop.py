"""The speech loop: frames -> echo gate -> VAD (its worker) -> endpointer, and the verdicts on each
pause back to the endpointer: the turn detector's (its own worker) on TURN_CHECK, and the words'
(the reply's language model, reading them as it evaluates its prompt) when a turn asks for them.

It knows nothing of turns or calls. The endpointer's other events go to ``on_event``; the loop keeps
the utterance's audio (with each frame's arrival time) and what was judged during it, for the turn
that answers it.

While the appliance is speaking the endpointer's threshold is raised (or the VAD gated entirely)
where no echo canceller takes the speaker out of the microphone (appliance/audio/echo.py); behind
one, the VAD also hears the linear canceller's output (appliance/pipeline/linear_ear.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from appliance.audio.base import FRAME_S, FRAME_SAMPLES, HeardFrame, split_frame
from appliance.pipeline.activation import Activation
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.linear_ear import LinearEar
from appliance.pipeline.session_config import SessionConfig
from appliance.pipeline.ticks import frames_or_ticks
from appliance.trace.labels import OpenedBy, WordsNotExpected
from appliance.trace.record import TurnTrace
from engines.audio import power
from engines.vad.endpointer import Endpointer, EndpointEvent, EventKind
from engines.vad.params import EndpointerMode
from engines.wake.params import ActivationMode

log = logging.getLogger(__name__)

OnEvent = Callable[[EndpointEvent, float], Awaitable[None]]
T = TypeVar("T")

TICK_S = 0.1  # how often the session looks up when a live source sends nothing
# The linear ear goes on this long after the reply stops or pauses: the echo's tail is still in the
# room, and AEC3's suppressor still turns a person down with it, most of all in a session's first
# seconds, so a word that paused the reply could otherwise fade out of the VAD's hearing.
EAR_TAIL_S = 0.5


@dataclass
class UtteranceChecks:
    """What was judged during one utterance, for the trace of the turn that answers it."""

    checks: int = 0
    incomplete: int = 0
    failed: int = 0
    last_ms: float | None = None
    last_probability: float | None = None
    words_p: float | None = None  # the words' verdict on the last pause that had one

    def stamp(self, trace: TurnTrace) -> None:
        trace.turn_checks, trace.turn_incomplete, trace.turn_check_failed = (
            self.checks,
            self.incomplete,
            self.failed,
        )
        trace.turn_check_ms, trace.turn_complete_p = self.last_ms, self.last_probability
        if self.words_p is not None:
            trace.words_complete_p = self.words_p


class SpeechLoop:
    def __init__(self, config: SessionConfig, *, realtime: bool, on_event: OnEvent, label: str) -> None:
        """``realtime`` False (a file fed faster than real time): each pause's verdicts come before
        the next frame, as they would within its silence (waiting at most ``drain_timeout_s``)."""
        self.params = params = config.endpointer
        self.echo = config.echo
        self.realtime = realtime
        self._on_event = on_event
        self._label = f"session {label}"
        self._max_wait_s = config.drain_timeout_s
        self.endpointer = Endpointer(params, threshold=config.echo.threshold)
        self.checks = UtteranceChecks()
        self._frames: deque[tuple[np.ndarray, float]] = deque(
            maxlen=math.ceil((params.max_utterance_s + params.pre_roll_s + 2.0) / FRAME_S)
        )
        self._frame_count = 0
        self._engines: SessionEngines | None = None
        self._vad_stream: Any = None
        threshold = config.echo.linear_threshold
        self._linear_ear = LinearEar(threshold) if threshold is not None else None
        self._linear_stream: Any = None  # the VAD's stream on the linear output, afresh for each reply
        self._ear_heard_last = False  # the linear ear heard the last frame
        self._ear_new_filter = False  # the canceller went on from another filter since the ear last heard
        self._ear_until = 0.0  # monotonic: the linear ear hears until then (EAR_TAIL_S after playing)
        self._check_tasks: set[asyncio.Task[None]] = set()
        self._words_due: asyncio.Event | None = None
        self.voiced = False  # the last frame was voiced (at the endpointer's threshold)
        self.by_linear_ear = False  # ... and only in the linear canceller's output
        self.heard_at = 0.0  # monotonic: the last frame arrived
        self.activation = (
            Activation(config.wake) if config.wake.activation == ActivationMode.WAKE_WORD else None
        )
        self._wake_stream: Any = None
        self._answering = False
        self.opened_by = OpenedBy.ALWAYS  # of the utterance in progress
        self._heard = self.activation is None

    async def listen_with(self, engines: SessionEngines) -> None:
        """Judge with ``engines`` from now on; their VAD stream starts afresh, in silence."""
        self._vad_stream = await engines.vad_worker.call(engines.vad.stream)
        if self._linear_ear is not None:
            self._linear_stream = await engines.vad_worker.call(engines.vad.stream)
        if self.activation is not None and engines.wake is not None and engines.wake_worker is not None:
            self._wake_stream = await engines.wake_worker.call(engines.wake.stream)
        elif self.activation is not None:
            log.warning(
                "%s: wake.activation is wake_word but no wake word is loaded: any speech begins a turn",
                self._label,
            )
            self.activation = None
            self._heard = True
        self._engines = engines

    def frames(self, frames: AsyncIterator[T]) -> AsyncIterator[T | None]:
        """A live source can fall silent (a phone's silence suppression) while turns play out: its
        frames come with a ``None`` each TICK_S without one, for whatever happens between frames."""
        return frames_or_ticks(frames, TICK_S) if self.realtime else frames

    @property
    def judging(self) -> bool:
        """A verdict on a pause is still being made."""
        return bool(self._check_tasks)

    async def feed(
        self, heard: np.ndarray | HeardFrame, *, playing: bool, echo_converged: bool, answering: bool = False
    ) -> None:
        """``answering``: a turn is running (or its reply playing): speech over it needs no wake word."""
        engines = self._engines
        assert engines is not None, "listen_with() first"
        frame, transcribed = split_frame(heard)
        if len(frame) != FRAME_SAMPLES or len(transcribed) != FRAME_SAMPLES:
            raise ValueError(f"frames must have {FRAME_SAMPLES} samples, got {len(frame)}")
        now = time.monotonic()
        self._frames.append((transcribed, now))  # the utterance's audio: ASR, partials, the turn model
        self._frame_count += 1
        probability = float(await engines.vad_worker.call(self._vad_stream.probability, frame))
        heard_alone = probability  # what the VAD's own ear heard
        linear = 0.0
        if playing:
            self._ear_until = now + EAR_TAIL_S
        ear = False
        if isinstance(heard, HeardFrame) and heard.new_filter:
            self._ear_new_filter = True
        if now < self._ear_until and isinstance(heard, HeardFrame) and heard.echo_power is not None:
            linear, ear = await self._linear_heard(engines, transcribed, heard.echo_power), True
        self._ear_heard_last = ear
        self.endpointer.threshold = self.echo.threshold_for(playing)
        learning = playing and not echo_converged
        if learning:
            # The canceller is still learning the room (a session's first seconds): AEC3 lets the echo
            # through, and only the linear ear, whose own test asks for a filter that already
            # cancels (the room kept from the last start), may hear a person.
            probability = linear
        probability = self.echo.probability_for(max(probability, linear), playing)
        if self.activation is not None and not await self._addressed(engines, transcribed, answering):
            probability = 0.0  # nobody said the wake word: as if nobody spoke
        self.voiced, self.heard_at = probability >= self.endpointer.threshold, now
        self.by_linear_ear = self.voiced and (learning or heard_alone < self.endpointer.threshold)
        await self._handle(self.endpointer.feed(probability, FRAME_S), now)

    async def _linear_heard(self, engines: SessionEngines, frame: np.ndarray, echo_power: float) -> float:
        """The linear ear's probability for this frame (0.0 where it hears nobody)."""
        if self._linear_ear is None or self._linear_stream is None:
            return 0.0
        if not self._ear_heard_last:
            await engines.vad_worker.call(self._linear_stream.reset)
        probability = float(await engines.vad_worker.call(self._linear_stream.probability, frame))
        new_filter, self._ear_new_filter = self._ear_new_filter, False
        hears = self._linear_ear.hears(probability, power(frame), echo_power, new_filter=new_filter)
        return probability if hears else 0.0

    @property
    def addressed(self) -> bool:
        """The last frame was heard (always, unless a wake word is awaited)."""
        return self._heard

    @property
    def wakes(self) -> int:
        """Wake words heard (with wake.activation = wake_word), turn or not."""
        return 0 if self.activation is None else self.activation.wakes

    async def _addressed(self, engines: SessionEngines, frame: np.ndarray, answering: bool) -> bool:
        """Whether this frame is heard; the wake word's windows run on the stream's own time, so that
        a file fed faster than real time keeps them."""
        assert self.activation is not None and engines.wake_worker is not None
        now = self.endpointer.time_s + FRAME_S
        heard_wake = bool(await engines.wake_worker.call(self._wake_stream.process, frame))
        if heard_wake:
            log.info("%s: wake word heard", self._label)
        self._answering = answering
        self._heard = self.activation.step(
            now, heard_wake=heard_wake, busy=answering or self.endpointer.in_speech
        )
        return self._heard

    async def finish(self) -> None:
        """The audio ended: the utterance in progress, if any, ends with it."""
        await self._handle(self.endpointer.finish(), time.monotonic())

    async def _handle(self, events: list[EndpointEvent], now: float | None = None) -> None:
        for event in events:
            at = time.monotonic() if now is None else now
            log.debug("%s: %s at %.3f s", self._label, event.kind.value, event.time_s)
            if event.kind is EventKind.TURN_CHECK:
                await self._check_turn(event)
                continue
            if event.kind is EventKind.SPEECH_START:
                self.checks = UtteranceChecks()
                self.opened_by = (
                    OpenedBy.ALWAYS
                    if self.activation is None
                    else self.activation.opened_by(event.speech_start_s, answering=self._answering)
                )
            await self._on_event(event, at)

    async def _check_turn(self, event: EndpointEvent) -> None:
        audio = self.audio_between(event.utterance_start_s, event.time_s)
        task = asyncio.create_task(self._judge(event.check_id, audio), name=f"turn-check-{event.check_id}")
        self._track(task)
        if not self.realtime:
            await task

    def _track(self, task: asyncio.Task[None]) -> None:
        self._check_tasks.add(task)
        task.add_done_callback(self._check_tasks.discard)

    async def _judge(self, check_id: int, audio: np.ndarray) -> None:
        """Ask the turn detector on its worker; hand its verdict to the endpointer."""
        engines = self._engines
        detector = engines.turn if engines is not None else None
        worker = engines.turn_worker if engines is not None else None
        started = time.monotonic()
        probability: float | None = None
        try:
            if detector is None or worker is None:
                raise RuntimeError("endpointer.mode is smart_turn but the session has no turn detector")
            probability = await worker.call(detector.complete_probability, audio)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: the turn detector failed; this pause ends on silence", self._label)
            self.checks.failed += 1
        else:
            self.checks.last_probability = round(probability, 4)
            self.checks.incomplete += probability < self.params.turn_complete_threshold
        self.checks.checks += 1
        self.checks.last_ms = round((time.monotonic() - started) * 1000.0, 1)
        await self._handle(self.endpointer.verdict(check_id, probability))

    def expect_words(self, pause_id: int) -> Callable[[float | None], None]:
        """The words' verdict on pause ``pause_id`` will come: the endpointer waits for it (up to
        ``words_wait_ms``). Returns what the turn calls with it, on the event loop."""
        self.endpointer.expect_text(pause_id)
        due = asyncio.Event() if not self.realtime else None
        if due is not None:
            self._words_due = due

        def heard(probability: float | None) -> None:
            if due is not None:
                due.set()
            if probability is not None:
                self.checks.words_p = round(probability, 6)
            ended = self.endpointer.text_verdict(pause_id, probability)
            if ended:
                self._track(asyncio.ensure_future(self._handle(ended)))

        return heard

    async def wait_for_words(self) -> None:
        """A file fed faster than real time: the words' verdict on the last pause before the next frame."""
        due, self._words_due = self._words_due, None
        if due is not None:
            await asyncio.wait_for(due.wait(), self._max_wait_s)
            await asyncio.gather(*list(self._check_tasks), return_exceptions=True)

    def words_unavailable(self) -> WordsNotExpected | None:
        """Why the reply's language model cannot judge this pause's words at no extra wait (None when it
        can): it must judge turns and not be answering another session (whose reply would delay our
        prompt's evaluation). The turn's trace keeps the reason; /metrics counts it."""
        if self.params.mode != EndpointerMode.SMART_TURN or not self.params.judge_words:
            return WordsNotExpected.OFF
        llm = self._engines.llm if self._engines is not None else None
        if llm is None or not llm.judges_turns:
            return WordsNotExpected.MODEL_CANNOT
        now = llm.occupancy()
        if now.running or now.waiting:
            return WordsNotExpected.LLM_BUSY
        return None

    def stamp_endpoint(self, trace: TurnTrace, event: EndpointEvent, now: float) -> None:
        """What ended the utterance and what was judged during it, on the turn that answers it."""
        trace.mark("endpoint", now)
        trace.endpoint_by = event.by if event.by is not None else ""
        self.checks.stamp(trace)

    def close(self) -> None:
        for task in self._check_tasks:
            task.cancel()

    def audio_between(self, start_s: float, end_s: float) -> np.ndarray:
        first_index = self._frame_count - len(self._frames)
        start = max(first_index, math.floor(start_s / FRAME_S + 1e-6))
        end = min(self._frame_count, math.ceil(end_s / FRAME_S - 1e-6))
        frames = [self._frames[i - first_index][0] for i in range(start, end)]
        if not frames:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(frames)

    def monotonic_at(self, stream_s: float, now: float) -> float:
        """The monotonic time at which stream time ``stream_s`` arrived (frames carry their arrival)."""
        first_index = self._frame_count - len(self._frames)
        index = math.ceil(stream_s / FRAME_S - 1e-6) - 1
        if first_index <= index < self._frame_count:
            arrival = self._frames[index - first_index][1]
            return arrival - ((index + 1) * FRAME_S - stream_s)
        return now - (self._frame_count * FRAME_S - stream_s)
