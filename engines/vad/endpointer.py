"""End-of-utterance detection as a pure state machine: frame probabilities and durations in, events out.

No audio and no clock: the caller feeds one VAD probability and the frame's duration at a time, and
stream time is the sum of the durations fed since the last ``reset()``.

    idle --(voiced for min_speech_s)--> SPEECH_START --> in speech
    in speech --(first unvoiced frame)--> PROBABLY_ENDED --> trailing silence
    trailing silence --(voiced again)--> RESUMED --> in speech
    trailing silence --(silence for end_silence_s)--> ENDPOINT --> idle
    in speech or trailing silence --(max_utterance_s since speech start)--> ENDPOINT(forced) --> idle

In ``smart_turn`` mode the silence alone does not decide. After ``turn_check_s`` of it the endpointer
asks (TURN_CHECK) how likely the utterance so far is finished, and the caller answers with
``verdict()``, a probability:

    trailing silence --(silence for turn_check_s)--> TURN_CHECK, waiting for the verdict
    p >= complete_threshold --> ENDPOINT now (by "smart_turn")
    p < incomplete_threshold, or no verdict yet --(silence for incomplete_silence_s)--> ENDPOINT
    in between, or the detector failed --(silence for end_silence_s)--> ENDPOINT (by "silence")

A verdict that arrives after the person resumed speaking belongs to a pause that is over: ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

__all__ = ["ENDPOINTER_MODES", "EndpointEvent", "Endpointer", "EndpointerParams", "EventKind"]

ENDPOINTER_MODES = ("silence", "smart_turn")

# Durations are sums of floats (0.032 * 3 != 0.096 exactly); compare with a tolerance far below a sample.
_EPS_S = 1e-9


@dataclass(frozen=True)
class EndpointerParams:
    threshold: float = 0.5  # probability at or above which a frame is voiced
    min_speech_s: float = 0.096  # voiced time needed to start an utterance
    end_silence_s: float = 0.5  # silence after the last voiced frame that confirms the end
    pre_roll_s: float = 0.256  # audio kept before the speech start
    max_utterance_s: float = 20.0  # forced endpoint
    mode: str = "silence"  # or "smart_turn": a verdict on the utterance decides, see the module text
    turn_check_s: float = 0.256  # smart_turn: silence before the verdict is asked for
    incomplete_silence_s: float = 1.0  # smart_turn: silence that ends a turn judged incomplete
    complete_threshold: float = 0.5  # smart_turn: a verdict at or above it ends the turn at once
    incomplete_threshold: float = 0.5  # smart_turn: below it, the turn waits for incomplete_silence_s

    def __post_init__(self) -> None:
        _check_threshold(self.threshold)
        _check_threshold(self.complete_threshold)
        _check_threshold(self.incomplete_threshold)
        if self.incomplete_threshold > self.complete_threshold:
            raise ValueError(
                f"EndpointerParams.incomplete_threshold ({self.incomplete_threshold}) must not be above "
                f"complete_threshold ({self.complete_threshold})"
            )
        if self.mode not in ENDPOINTER_MODES:
            raise ValueError(f"EndpointerParams.mode must be one of {ENDPOINTER_MODES}, got {self.mode!r}")
        for name in ("min_speech_s", "end_silence_s", "pre_roll_s", "turn_check_s", "incomplete_silence_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"EndpointerParams.{name} must be a finite number >= 0, got {value!r}")
        if not math.isfinite(self.max_utterance_s) or self.max_utterance_s <= 0:
            raise ValueError(f"EndpointerParams.max_utterance_s must be > 0, got {self.max_utterance_s!r}")


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
    # ENDPOINT: what decided it: "silence", "smart_turn" (a complete verdict), "incomplete_silence"
    # (the long silence after an incomplete or missing verdict), "max_length", "stream_end"
    by: str = ""

    @property
    def forced(self) -> bool:
        """ENDPOINT because of max_utterance_s."""
        return self.by == "max_length"


def _check_threshold(value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ValueError(f"threshold must be in (0, 1], got {value!r}")


class Endpointer:
    """Turns a stream of (probability, duration) into utterance events; one instance per audio stream."""

    _check_id: int
    _answered: bool
    _pause_silence_s: float
    _pause_by: str

    def __init__(self, params: EndpointerParams = EndpointerParams()) -> None:
        self.params = params
        self._threshold = params.threshold
        self._checks_sent = 0  # never reset: a verdict for a check before reset() stays stale
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

    def verdict(self, check_id: int, probability: float | None) -> list[EndpointEvent]:
        """The answer to TURN_CHECK ``check_id``: the probability that the turn is complete, or None
        when the detector failed.

        Returns the ENDPOINT it causes (at once when complete, or when the silence it calls for has
        already passed); nothing for a stale check (the person spoke again, or the turn ended)."""
        if not (self._trailing and check_id == self._check_id and not self._answered):
            return []
        self._answered = True
        params = self.params
        if probability is not None and probability >= params.complete_threshold:
            return [self._end(by="smart_turn")]
        if probability is not None and probability < params.incomplete_threshold:
            self._pause_silence_s, self._pause_by = params.incomplete_silence_s, "incomplete_silence"
        else:
            self._pause_silence_s, self._pause_by = params.end_silence_s, "silence"
        return self._silence_endpoint()

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
        return [self._end(by="stream_end")]

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
            events.append(self._end(by="max_length"))
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
                events.append(self._event(EventKind.PROBABLY_ENDED, speech_end_s=self._last_voiced_end_s))
            if (
                self.params.mode == "smart_turn"
                and self._check_id == 0
                and self._silence_reached(self.params.turn_check_s)
            ):
                self._checks_sent += 1
                self._check_id = self._checks_sent
                events.append(self._event(EventKind.TURN_CHECK, speech_end_s=self._last_voiced_end_s))
            ended = self._silence_endpoint()
            if ended:
                return events + ended
        if self._over_max_length():
            events.append(self._end(by="max_length"))
        return events

    def _silence_reached(self, seconds: float) -> bool:
        return self._time_s - self._last_voiced_end_s + _EPS_S >= seconds

    def _silence_endpoint(self) -> list[EndpointEvent]:
        """The ENDPOINT the trailing silence alone causes by now, if any."""
        return [self._end(by=self._pause_by)] if self._silence_reached(self._pause_silence_s) else []

    def _new_pause(self) -> None:
        self._check_id = 0  # the TURN_CHECK of this pause (0: none asked yet)
        self._answered = False
        # The silence that ends this pause: until a verdict says otherwise, the long one in smart_turn.
        if self.params.mode == "silence":
            self._pause_silence_s, self._pause_by = self.params.end_silence_s, "silence"
        else:
            self._pause_silence_s, self._pause_by = self.params.incomplete_silence_s, "incomplete_silence"

    def _over_max_length(self) -> bool:
        return self._time_s - self._speech_start_s + _EPS_S >= self.params.max_utterance_s

    def _end(self, *, by: str) -> EndpointEvent:
        event = self._event(EventKind.ENDPOINT, speech_end_s=self._last_voiced_end_s, by=by)
        self._in_speech = False
        self._trailing = False
        self._new_pause()
        self._floor_s = self._time_s
        return event

    def _event(self, kind: EventKind, *, speech_end_s: float | None, by: str = "") -> EndpointEvent:
        return EndpointEvent(
            kind=kind,
            time_s=self._time_s,
            utterance_start_s=self._utterance_start_s,
            speech_end_s=speech_end_s,
            speech_start_s=self._speech_start_s,
            check_id=self._check_id if kind is EventKind.TURN_CHECK else 0,
            by=by,
        )
