"""Speech over a reply being heard, for one session: the reply paused at the first voiced frame, what
was said transcribed (and, when Whisper is unsure, matched to a stop word by its sound), and the verdict
of overlap.py carried out: a backchannel resumes the reply, a stop word ends it, anything else cuts it
and is a turn of its own.

The session tells it each frame and the endpointer's events about an overlap; it starts the turn that
follows through the session's ``start_turn``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np

from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.overlap import (
    STOP_TAIL_S,
    Heard,
    OverlapKind,
    Overlaps,
    closest_stop_word,
    only_unsure,
    rest_of_a_stop,
)
from appliance.pipeline.params import OverlapParams
from appliance.pipeline.partials import Partials
from appliance.pipeline.turn import Turn
from appliance.pipeline.turn_keeper import TurnKeeper
from engines.vad.endpointer import Endpointer, EndpointEvent

log = logging.getLogger(__name__)

StartTurn = Callable[[EndpointEvent, float, bool], Awaitable[None]]  # (event, now, confirmed)


@dataclasses.dataclass
class SessionParts:
    """What of the session speech over a reply reads and drives (engines and partials are replaced
    when the session moves to a new bundle's engines, so they are read through these callables)."""

    session_id: str
    endpointer: Callable[[], Endpointer]
    engines: Callable[[], SessionEngines]
    partials: Callable[[], Partials]
    turns: TurnKeeper
    start_turn: StartTurn


class SpeechOverReply:
    def __init__(self, params: OverlapParams, parts: SessionParts) -> None:
        self.overlaps = Overlaps(params)
        self._parts = parts
        self._stopped_at: float | None = None  # monotonic: the last stop word over a reply was decided

    @property
    def deciding(self) -> bool:
        """``overlap.mode = "decide"``: speech over a reply is judged, not a barge-in at once."""
        return self.overlaps.deciding

    @property
    def pending(self) -> bool:
        """A reply is paused under someone's voice and the verdict is not in."""
        return self.overlaps.current is not None

    @property
    def speaking(self) -> bool:
        """The endpointer's utterance is someone speaking over a reply."""
        return self.overlaps.current is not None and self.overlaps.current.speech

    def began_speaking(self) -> bool:
        """The endpointer heard speech start; True when it is over a paused reply (the overlap
        decides), False when it is not (a barge-in, if a turn is running)."""
        if self.overlaps.current is None:
            return False
        self.overlaps.current.speech = True
        return True

    async def step(
        self, now: float, *, voiced: bool, reply: Turn | None, by_linear_ear: bool = False
    ) -> None:
        """Each frame: pause, resume or decide (``reply``: the reply that may be heard now)."""
        kind = await self.overlaps.on_frame(
            now,
            voiced=voiced,
            in_speech=self._parts.endpointer().in_speech,
            reply=reply,
            by_linear_ear=by_linear_ear,
        )
        if kind is not None:
            await self.settle(kind, time.monotonic())

    def paused_speaking(self, event: EndpointEvent, audio: np.ndarray) -> None:
        self.overlaps.paused_speaking(event, audio, self._transcribe)

    def spoke_again(self) -> None:
        self.overlaps.spoke_again()

    async def at_endpoint(self, event: EndpointEvent, backchannel_max_s: float) -> None:
        kind = await self.overlaps.words_now(backchannel_max_s)
        await self.settle(kind, time.monotonic(), endpoint=event)

    async def settle(self, kind: OverlapKind, now: float, endpoint: EndpointEvent | None = None) -> None:
        overlap = self.overlaps.current
        assert overlap is not None
        parts = self._parts
        self.overlaps.forget()
        overlap.reply.trace.overlaps.append(overlap.record(kind, now))
        log.info(
            "session %s: %s over turn %s (%r, log-probability %s)",
            parts.session_id,
            kind.value,
            overlap.reply.trace.turn_id,
            overlap.heard.text,
            overlap.heard.logprob,
        )
        if kind is OverlapKind.BACKCHANNEL:
            parts.endpointer().dismiss()
            parts.partials().stop()
            await overlap.reply.player.resume()
            return
        await parts.turns.barge_in(kind.value)
        if kind is OverlapKind.STOP_WORD:
            parts.endpointer().dismiss()
            parts.partials().stop()
            self._stopped_at = now
        elif endpoint is not None:
            await parts.start_turn(endpoint, now, True)
        elif overlap.pause is not None:  # the person is silent: what they said is a turn from this pause
            await parts.start_turn(overlap.pause, now, False)

    def after_a_stop(self, speech_started: float | None) -> Callable[[str], bool] | None:
        """For speech that began right after a stop word was decided: what is only more of it."""
        stopped = self._stopped_at
        if stopped is None or speech_started is None or speech_started - stopped > STOP_TAIL_S:
            return None
        return lambda text: rest_of_a_stop(text, self.overlaps.params)

    async def _transcribe(self, audio: np.ndarray) -> Heard:
        engines = self._parts.engines()
        result = await engines.asr_worker.call(engines.asr.transcribe, audio)
        heard = Heard(str(result.text).strip(), result.avg_logprob)
        if only_unsure(heard, self.overlaps.params):
            heard = dataclasses.replace(heard, sounds_like=await self._sounds_like_a_stop_word(heard.text))
        return heard

    async def _sounds_like_a_stop_word(self, text: str) -> str:
        """The stop word ``text`` sounds like (phonemes from the voice's espeak, on the TTS worker)."""
        engines = self._parts.engines()
        stops = list(self.overlaps.params.stop_words)
        try:
            sounds = await engines.tts_worker.call(engines.tts.phonemes, [text, *stops])
        except Exception:  # without phonemes the words alone decide
            log.warning("session %s: no phonemes for %r", self._parts.session_id, text, exc_info=True)
            return ""
        return closest_stop_word(sounds[0], dict(zip(stops, sounds[1:], strict=True)))
