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

from engines.vad.ended_by import EndedBy
from engines.vad.params import EndpointerMode, EndpointerParams, VadParams

__all__ = [
    "EndpointEvent",
    "Endpointer",
    "EventKind",
    "PauseVerdicts",
]

# Durations are sums of floats (0.032 * 3 != 0.096 exactly); compare with a tolerance far below a sample.
_EPS_S = 1e-9


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
            if self.params.mode == EndpointerMode.SMART_TURN and self._silence_reached(self._next_check_s):
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
        if self.params.mode == EndpointerMode.SILENCE:
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
