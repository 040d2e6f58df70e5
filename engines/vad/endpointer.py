"""End-of-utterance detection as a pure state machine: frame probabilities and durations in, events out.

No audio and no clock: the caller feeds one VAD probability and the frame's duration at a time, and
stream time is the sum of the durations fed since the last ``reset()``.

    idle --(voiced for min_speech_ms)--> SPEECH_START --> in speech
    in speech --(first unvoiced frame)--> PROBABLY_ENDED --> trailing silence (a pause)
    trailing silence --(voiced again)--> RESUMED --> in speech
    trailing silence --(silence for end_silence_ms)--> ENDPOINT --> idle
    in speech or trailing silence --(max_utterance_s since speech start)--> ENDPOINT(forced) --> idle

In ``smart_turn`` mode the silence alone does not decide. Two verdicts on each pause may:

- the sound (``verdict()``): after ``turn_check_ms`` of silence the endpointer asks (TURN_CHECK) how
  likely the utterance so far is finished, and again every ``turn_recheck_ms`` while the pause lasts;
- the words (``text_verdict()``): the probability that the words heard so far end the person's
  message, from the language model that is already evaluating them for the reply. The caller says
  a pause will get one (``expect_text``) only when it comes at no extra wait; otherwise the sound
  decides alone, exactly as without it.

Whenever a verdict arrives the pause is judged on what is known. The sound alone: at or above
``turn_complete_threshold`` the turn ends (by "smart_turn"), below ``turn_incomplete_threshold`` it waits
``incomplete_silence_ms``, in between ``end_silence_ms``. With the words, the words can hold a turn the
sound would end, and either can end it:

    words below words_incomplete_threshold ("... out of the") --(words_incomplete_silence_ms)--> ENDPOINT
    words at or above words_complete_threshold, or the sound at or above turn_complete_threshold
        --> ENDPOINT now (by "fused"; by "text" when the sound's model failed)
    otherwise --(words_unsure_silence_ms)--> ENDPOINT (by "silence")

While words are expected, whatever the sound says, the pause waits for them at most ``words_wait_ms``
after the sound's verdict: no silence timer ends it before (the words can still say "not finished":
"... out of the", and on a slow machine they come after end_silence_ms); if they do not come in
time, the sound's rule decides. The words alone never end a pause (a gap between two words is one
too), they wait for the sound. A verdict for a pause that is over (the person spoke again) is ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

from pydantic import Field, model_validator

from engines.params import Params, ms_to_s
from engines.vad.ended_by import EndedBy
from engines.vad.params import VadParams

__all__ = [
    "EndpointEvent",
    "Endpointer",
    "EndpointerParams",
    "EventKind",
    "PauseVerdicts",
]

# Durations are sums of floats (0.032 * 3 != 0.096 exactly); compare with a tolerance far below a sample.
_EPS_S = 1e-9


class EndpointerParams(Params):
    """The ``[endpointer]`` settings; the VAD's threshold (``vad.threshold``) is the endpointer's own
    argument, since the session raises it while a reply plays."""

    mode: Literal["silence", "smart_turn"] = Field(
        "smart_turn",
        description="silence: a turn ends after end_silence_ms of silence; smart_turn: after "
        "turn_check_ms the Smart Turn model judges how likely the utterance is finished: sure "
        "(turn_complete_threshold) ends it at once, sure it is not (below turn_incomplete_threshold) "
        "waits incomplete_silence_ms, unsure waits end_silence_ms (docs/turn-taking.md)",
    )
    min_speech_ms: int = Field(96, ge=0, le=2000, description="voiced time that starts an utterance")
    end_silence_ms: int = Field(
        500,
        ge=64,
        le=5000,
        description="silence mode; smart_turn when the sound alone is unsure (or the model fails)",
    )
    turn_check_ms: int = Field(
        160, ge=32, le=2000, description="smart_turn: silence before the Smart Turn model is asked"
    )
    incomplete_silence_ms: int = Field(
        1000, ge=200, le=10000, description="smart_turn: silence that ends a turn judged unfinished"
    )
    turn_complete_threshold: float = Field(
        0.9, gt=0.0, lt=1.0, description="the sound alone: at or above it the turn ends at once"
    )
    turn_incomplete_threshold: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="the sound alone: below it, incomplete_silence_ms; in between, end_silence_ms",
    )
    turn_recheck_ms: int = Field(
        0,
        ge=0,
        le=2000,
        description="smart_turn: ask the sound again this often while a pause lasts (0: once)",
    )
    judge_words: bool = Field(
        True,
        description="smart_turn: the reply's language model also judges from the words whether the person "
        "has finished, read from the logits it computes for the reply anyway (llama.cpp with the model's "
        "own chat template and no other call's reply running; otherwise the sound decides alone)",
    )
    words_complete_threshold: float = Field(
        0.35,
        gt=0.0,
        lt=1.0,
        description="judge_words: words at or above it end the turn at once (so does a sure sound, "
        "unless the words say unfinished)",
    )
    words_incomplete_threshold: float = Field(
        0.02,
        gt=0.0,
        lt=1.0,
        description="judge_words: words below it keep listening up to words_incomplete_silence_ms, "
        "whatever the sound says",
    )
    words_incomplete_silence_ms: int = Field(
        2000,
        ge=200,
        le=10000,
        description='judge_words: silence that ends a turn whose words are unfinished ("... out of the")',
    )
    words_unsure_silence_ms: int = Field(
        1000,
        ge=64,
        le=10000,
        description="judge_words: silence that ends a turn when neither the words nor the sound is sure",
    )
    words_wait_ms: int = Field(
        1000, ge=0, le=2000, description="judge_words: how long a finished-sounding pause waits for the words"
    )
    words_hold_any_sound: bool = Field(
        True,
        description="judge_words: the expected words hold the pause whatever the sound says; false: the "
        "rule before December 2026, where an unsure sound's own silence could end it first (benchmarks)",
    )
    pre_roll_ms: int = Field(256, ge=0, le=2000, description="audio kept from before the speech start")
    max_utterance_s: float = Field(20.0, gt=1.0, le=60.0, description="an utterance this long is ended")

    @model_validator(mode="after")
    def _check_order(self) -> EndpointerParams:
        if self.incomplete_silence_ms <= self.turn_check_ms:
            raise ValueError(
                f"incomplete_silence_ms ({self.incomplete_silence_ms}) must be longer than turn_check_ms "
                f"({self.turn_check_ms}): the model is asked before the long silence ends the turn"
            )
        for judge in ("turn", "words"):
            low = getattr(self, f"{judge}_incomplete_threshold")
            high = getattr(self, f"{judge}_complete_threshold")
            if low > high:
                raise ValueError(
                    f"{judge}_incomplete_threshold ({low}) must not be above {judge}_complete_threshold ({high})"
                )
        return self

    @property
    def min_speech_s(self) -> float:
        return ms_to_s(self.min_speech_ms)

    @property
    def end_silence_s(self) -> float:
        return ms_to_s(self.end_silence_ms)

    @property
    def turn_check_s(self) -> float:
        return ms_to_s(self.turn_check_ms)

    @property
    def incomplete_silence_s(self) -> float:
        return ms_to_s(self.incomplete_silence_ms)

    @property
    def turn_recheck_s(self) -> float:
        return ms_to_s(self.turn_recheck_ms)

    @property
    def words_incomplete_silence_s(self) -> float:
        return ms_to_s(self.words_incomplete_silence_ms)

    @property
    def words_unsure_silence_s(self) -> float:
        return ms_to_s(self.words_unsure_silence_ms)

    @property
    def words_wait_s(self) -> float:
        return ms_to_s(self.words_wait_ms)

    @property
    def pre_roll_s(self) -> float:
        return ms_to_s(self.pre_roll_ms)


class EventKind(str, Enum):
    SPEECH_START = "speech_start"  # utterance began (after min_speech_s voiced)
    PROBABLY_ENDED = "probably_ended"  # first unvoiced frame after speech: start speculative work now
    RESUMED = "resumed"  # voiced again before the endpoint: drop speculative work
    TURN_CHECK = "turn_check"  # smart_turn: ask whether the utterance is complete, answer with verdict()
    ENDPOINT = "endpoint"  # end confirmed (silence, a verdict, or max length)


@dataclass(frozen=True)
class EndpointEvent:
    kind: EventKind
    time_s: float  # stream time at the end of the frame that caused the event
    utterance_start_s: float  # speech start minus pre-roll, never below 0 (audio to keep from here)
    speech_end_s: float | None  # end of the last voiced frame (PROBABLY_ENDED, ENDPOINT), else None
    speech_start_s: float = 0.0  # start of the first voiced frame of the utterance (no pre-roll)
    check_id: int = 0  # TURN_CHECK: the number to answer verdict() with
    pause_id: int = 0  # PROBABLY_ENDED, TURN_CHECK: the pause, to answer text_verdict() with
    by: EndedBy | None = None  # ENDPOINT: what decided it

    @property
    def forced(self) -> bool:
        """ENDPOINT because of max_utterance_s."""
        return self.by is EndedBy.MAX_LENGTH


def _check_threshold(value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ValueError(f"threshold must be in (0, 1], got {value!r}")


@dataclass(frozen=True)
class PauseVerdicts:
    """What is known about the current pause: the sound's latest verdict and the words'."""

    audio: float | None = None
    audio_failed: bool = False
    text: float | None = None
    text_expected: bool = False


class Endpointer:
    """Turns a stream of (probability, duration) into utterance events; one instance per audio stream."""

    _check_id: int
    _pause_silence_s: float
    _pause_by: EndedBy
    _verdicts: PauseVerdicts
    _audio_at_s: float | None
    _next_check_s: float

    def __init__(self, params: EndpointerParams | None = None, *, threshold: float | None = None) -> None:
        self.params = EndpointerParams() if params is None else params
        self._threshold = VadParams().threshold if threshold is None else threshold
        _check_threshold(self._threshold)
        self._checks_sent = 0  # never reset: a verdict for a check before reset() stays stale
        self._pauses = 0  # likewise for pauses
        self._pause_id = 0
        self.reset()

    @property
    def threshold(self) -> float:
        return self._threshold

    @threshold.setter
    def threshold(self, value: float) -> None:
        """Applies from the next frame on (raised while the appliance is speaking)."""
        _check_threshold(value)
        self._threshold = float(value)

    @property
    def in_speech(self) -> bool:
        """True from SPEECH_START until its ENDPOINT (trailing silence included)."""
        return self._in_speech

    @property
    def time_s(self) -> float:
        """Stream time: the sum of the durations fed since the last reset."""
        return self._time_s

    def reset(self) -> None:
        """Forget any utterance in progress; stream time restarts at 0. The threshold is kept."""
        self._time_s = 0.0
        self._in_speech = False
        self._run_start_s: float | None = None  # start of the current voiced run (idle only)
        self._run_voiced_s = 0.0
        self._speech_start_s = 0.0
        self._utterance_start_s = 0.0
        self._last_voiced_end_s = 0.0
        self._trailing = False  # PROBABLY_ENDED sent, waiting for the endpoint or a resume
        self._floor_s = 0.0  # audio before the previous endpoint belongs to the previous utterance
        self._new_pause()

    def dismiss(self) -> None:
        """Forget the utterance in progress without an ENDPOINT: it was not a turn (a listener's
        "mm-hmm" over a reply). The next voiced run starts a new one."""
        if self._in_speech:
            self._forget_utterance()

    def _forget_utterance(self) -> None:
        self._in_speech = False
        self._trailing = False
        self._new_pause()
        self._floor_s = self._time_s  # audio before this belongs to the utterance forgotten

    @property
    def verdicts(self) -> PauseVerdicts:
        """What the current (or last) pause was told."""
        return self._verdicts

    def verdict(self, check_id: int, probability: float | None) -> list[EndpointEvent]:
        """The answer to TURN_CHECK ``check_id``: the probability that the turn is complete, or None
        when the detector failed.

        Returns the ENDPOINT it causes (at once when complete, or when the silence it calls for has
        already passed); nothing for a stale check (the person spoke again, the turn ended, or a
        later check of the same pause was sent)."""
        if not (self._trailing and check_id == self._check_id):
            return []
        self._check_id = -check_id  # answered
        self._verdicts = replace(self._verdicts, audio=probability, audio_failed=probability is None)
        self._audio_at_s = self._time_s
        return self._judge()

    def expect_text(self, pause_id: int) -> None:
        """Pause ``pause_id`` will get a ``text_verdict`` at no extra wait (the reply's own language
        model is about to evaluate the words): a finished-sounding verdict waits for it, at most
        ``words_wait_ms``."""
        if self._trailing and pause_id == self._pause_id:
            self._verdicts = replace(self._verdicts, text_expected=True)

    def text_verdict(self, pause_id: int, probability: float | None) -> list[EndpointEvent]:
        """The words' verdict on pause ``pause_id`` (None: the model could not give one); the
        ENDPOINT it causes, if any; nothing for a pause that is over."""
        if not (self._trailing and pause_id == self._pause_id):
            return []
        if probability is None:
            self._verdicts = replace(self._verdicts, text_expected=False)
        else:
            self._verdicts = replace(self._verdicts, text=probability)
        return self._judge()

    def _judge(self) -> list[EndpointEvent]:
        """Decide the pause on what is known now: the silence that ends it, or the end at once."""
        params, known = self.params, self._verdicts
        if known.text is not None:
            if known.text < params.words_incomplete_threshold:
                self._hold(params.words_incomplete_silence_s, EndedBy.INCOMPLETE_SILENCE)
            elif known.audio is None and not known.audio_failed:
                # The words alone never end a pause: a gap between two words is a pause too, and
                # "She had a dark suit" could end. They wait for the sound, at turn_check_s.
                pass
            elif known.text >= params.words_complete_threshold or self._sounds_complete():
                return [self._end(by=EndedBy.TEXT if known.audio_failed else EndedBy.FUSED)]
            else:
                self._hold(params.words_unsure_silence_s, EndedBy.SILENCE)
        elif known.audio is not None or known.audio_failed:
            if known.text_expected and not self._text_wait_over():
                # The words are on their way (the reply's own prompt pass): no timer of the sound ends
                # the pause before them, so a slow machine is not cut off by end_silence_ms; they
                # decide at once when they come ("... out of the" holds, "... at nine?" ends).
                if params.words_hold_any_sound:
                    self._hold(math.inf, EndedBy.SILENCE)
                    return []
                if self._sounds_complete():
                    return self._silence_endpoint()
            if self._sounds_complete():
                return [self._end(by=EndedBy.SMART_TURN)]
            if known.audio is not None and known.audio < params.turn_incomplete_threshold:
                self._hold(params.incomplete_silence_s, EndedBy.INCOMPLETE_SILENCE)
            else:
                self._hold(params.end_silence_s, EndedBy.SILENCE)
        return self._silence_endpoint()

    def _hold(self, silence_s: float, by: EndedBy) -> None:
        self._pause_silence_s, self._pause_by = silence_s, by

    def _sounds_complete(self) -> bool:
        audio = self._verdicts.audio
        return audio is not None and audio >= self.params.turn_complete_threshold

    def _text_wait_over(self) -> bool:
        return (
            self._audio_at_s is not None
            and self._time_s - self._audio_at_s + _EPS_S >= self.params.words_wait_s
        )

    def feed(self, probability: float, duration_s: float) -> list[EndpointEvent]:
        """One frame: its speech probability and its duration. Returns the events it caused, in order."""
        if not (math.isfinite(probability) and 0.0 <= probability <= 1.0):
            raise ValueError(f"probability must be in [0, 1], got {probability!r}")
        if not (math.isfinite(duration_s) and duration_s > 0.0):
            raise ValueError(f"duration_s must be a finite number > 0, got {duration_s!r}")
        frame_start_s = self._time_s
        self._time_s += duration_s
        voiced = probability >= self._threshold
        if self._in_speech:
            return self._feed_in_speech(voiced)
        return self._feed_idle(voiced, frame_start_s, duration_s)

    def finish(self) -> list[EndpointEvent]:
        """End of the stream: an ENDPOINT for the utterance in progress, if any."""
        if not self._in_speech:
            return []
        return [self._end(by=EndedBy.STREAM_END)]

    def _feed_idle(self, voiced: bool, frame_start_s: float, duration_s: float) -> list[EndpointEvent]:
        if not voiced:
            self._run_start_s = None
            self._run_voiced_s = 0.0
            return []
        if self._run_start_s is None:
            self._run_start_s = frame_start_s
        self._run_voiced_s += duration_s
        if self._run_voiced_s + _EPS_S < self.params.min_speech_s:
            return []
        self._in_speech = True
        self._trailing = False
        self._speech_start_s = self._run_start_s
        self._utterance_start_s = max(self._floor_s, self._run_start_s - self.params.pre_roll_s, 0.0)
        self._last_voiced_end_s = self._time_s
        self._run_start_s = None
        self._run_voiced_s = 0.0
        events = [self._event(EventKind.SPEECH_START, speech_end_s=None)]
        if self._over_max_length():
            events.append(self._end(by=EndedBy.MAX_LENGTH))
        return events

    def _feed_in_speech(self, voiced: bool) -> list[EndpointEvent]:
        events: list[EndpointEvent] = []
        if voiced:
            self._last_voiced_end_s = self._time_s
            if self._trailing:
                self._trailing = False
                self._new_pause()
                events.append(self._event(EventKind.RESUMED, speech_end_s=None))
        else:
            if not self._trailing:
                self._trailing = True
                self._pauses += 1
                self._pause_id = self._pauses
                events.append(self._event(EventKind.PROBABLY_ENDED, speech_end_s=self._last_voiced_end_s))
            if self.params.mode == "smart_turn" and self._silence_reached(self._next_check_s):
                self._checks_sent += 1
                self._check_id = self._checks_sent
                recheck = self.params.turn_recheck_s
                self._next_check_s = self._next_check_s + recheck if recheck > 0 else math.inf
                events.append(self._event(EventKind.TURN_CHECK, speech_end_s=self._last_voiced_end_s))
            known = self._verdicts
            heard = known.audio is not None or known.audio_failed
            waited = known.text_expected and known.text is None and heard and self._text_wait_over()
            ended = self._judge() if waited else self._silence_endpoint()
            if ended:
                return events + ended
        if self._over_max_length():
            events.append(self._end(by=EndedBy.MAX_LENGTH))
        return events

    def _silence_reached(self, seconds: float) -> bool:
        return self._time_s - self._last_voiced_end_s + _EPS_S >= seconds

    def _silence_endpoint(self) -> list[EndpointEvent]:
        """The ENDPOINT the trailing silence alone causes by now, if any."""
        return [self._end(by=self._pause_by)] if self._silence_reached(self._pause_silence_s) else []

    def _new_pause(self) -> None:
        self._check_id = 0  # the TURN_CHECK of this pause waiting for its verdict (0: none; < 0: answered)
        self._next_check_s = self.params.turn_check_s  # silence at which the sound is asked next
        self._verdicts = PauseVerdicts()
        self._audio_at_s = None
        # The silence that ends this pause: until a verdict says otherwise, the long one in smart_turn.
        if self.params.mode == "silence":
            self._pause_silence_s, self._pause_by = self.params.end_silence_s, EndedBy.SILENCE
        else:
            self._pause_silence_s, self._pause_by = (
                self.params.incomplete_silence_s,
                EndedBy.INCOMPLETE_SILENCE,
            )

    def _over_max_length(self) -> bool:
        return self._time_s - self._speech_start_s + _EPS_S >= self.params.max_utterance_s

    def _end(self, *, by: EndedBy) -> EndpointEvent:
        event = self._event(EventKind.ENDPOINT, speech_end_s=self._last_voiced_end_s, by=by)
        self._forget_utterance()
        return event

    def _event(
        self, kind: EventKind, *, speech_end_s: float | None, by: EndedBy | None = None
    ) -> EndpointEvent:
        return EndpointEvent(
            kind=kind,
            time_s=self._time_s,
            utterance_start_s=self._utterance_start_s,
            speech_end_s=speech_end_s,
            speech_start_s=self._speech_start_s,
            check_id=self._check_id if kind is EventKind.TURN_CHECK else 0,
            pause_id=self._pause_id if kind in (EventKind.PROBABLY_ENDED, EventKind.TURN_CHECK) else 0,
            by=by,
        )
