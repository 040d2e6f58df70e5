"""Someone speaks over a reply: pause it at the first voiced frame, then decide what it was.

- a backchannel ("mm-hmm", "yeah", "okay", a laugh, a cough): the reply goes on from the sample where
  it paused, and the sound is not answered as a turn;
- a stop word ("stop", "wait", "hold on"): the reply stops and the appliance listens, without
  answering "stop" as a question;
- an interruption (a new question, "no, I meant ..."), or anything voiced longer than
  ``backchannel_max_ms``: the reply stops and what the person says is the next turn, as a barge-in
  always was.

The words come from one transcript of the overlap, made when it pauses (the ASR worker is free while
a reply plays). ``classify`` is pure and decides from those words and how sure Whisper was of them:
a hum ("mm-hmm") has no words, and Whisper makes some up for it ("in my mom", "MMO") with less
confidence than it hears any short word a person says on purpose.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.audio.base import FRAME_S
from appliance.pipeline.params import OverlapParams
from appliance.pipeline.turn import Turn
from appliance.tools.site_words import closest_by_sound
from appliance.trace.labels import OverlapKind
from engines.asr.text import edit_distance, normalize_text
from engines.vad.endpointer import EndpointEvent

# What Whisper writes for a sound that is not a word ("(laughs)", "[coughing]").
_SOUNDS = frozenset(
    [
        "laugh",
        "laughs",
        "laughing",
        "laughter",
        "chuckles",
        "chuckle",
        "cough",
        "coughs",
        "coughing",
        "sigh",
        "sighs",
        "sighing",
        "breath",
        "breathing",
        "inhales",
        "exhales",
        "clears",
        "throat",
        "sniff",
        "sniffs",
        "music",
        "noise",
        "inaudible",
        "silence",
        "blank",
        "audio",
    ]
)
_HUM = re.compile(r"[mh]+")  # "m", "mm", "hmm", "mhm", "m h m": a hum written as letters
# At most this many words heard less sure than ``unsure_logprob`` are a sound, not words (bench
# interruptions: Piper's "mm-hmm" and "hmm" came out as 1-5 words at -0.6 to -1.2; short words said on
# purpose, "what?", "why?", "stop", "no", at -0.1 to -0.56).
UNSURE_MAX_WORDS = 3
# Unsure words this close to a stop word's phonemes are that stop word (Whisper wrote "Old one." for
# Piper's "Hold on." over a reply: 3 edits in 7).
MAX_SOUND_DISTANCE = 0.45
# A voiced blip that never became speech (shorter than endpointer.min_speech_ms): resume after this
# much silence.
BLIP_SILENCE_S = 0.096


def _covers(words: Sequence[str], phrases: set[tuple[str, ...]]) -> bool:
    """Whether ``words`` are a sequence of ``phrases``, each whole."""
    reachable = [True] + [False] * len(words)
    for start in range(len(words)):
        if reachable[start]:
            for phrase in phrases:
                end = start + len(phrase)
                if tuple(words[start:end]) == phrase:
                    reachable[end] = True
    return reachable[len(words)]


@dataclass(frozen=True)
class Heard:
    """One transcript of an overlap: its words, Whisper's mean token log-probability, and the stop word
    its sound is close to when Whisper was unsure of the words ("old one" for "hold on")."""

    text: str
    logprob: float | None = None
    sounds_like: str = ""


def _phrases(texts: Sequence[str]) -> set[tuple[str, ...]]:
    """A site's backchannels or stop words as the word sequences a transcript is matched against."""
    return {tuple(normalize_text(text).split()) for text in texts}


def _words(text: str) -> list[str]:
    return [w for w in normalize_text(text).split() if w not in _SOUNDS and not _HUM.fullmatch(w)]


def classify(heard: Heard, params: OverlapParams) -> OverlapKind:
    """What an overlap was, from its words (its length is judged before them)."""
    words = _words(heard.text)
    backchannels = _phrases(params.backchannels)
    if not words or _covers(words, backchannels):
        return OverlapKind.BACKCHANNEL
    stops = _phrases(params.stop_words)
    if _covers(words, backchannels | stops) or heard.sounds_like:
        return OverlapKind.STOP_WORD
    if _unsure(heard, len(words), params):
        return OverlapKind.BACKCHANNEL
    return OverlapKind.INTERRUPTION


STOP_TAIL_S = 1.0  # speech that began this soon after a stop word was decided may be the rest of it


def rest_of_a_stop(text: str, params: OverlapParams) -> bool:
    """Whether what someone said just after a stop word was decided is only more of it: the rest of
    its phrase ("on." after "hold", decided at the pause between them), more stop words or
    backchannels ("no, no"), or no words at all."""
    words = _words(text)
    stops = _phrases(params.stop_words)
    rests = {phrase[cut:] for phrase in stops for cut in range(1, len(phrase))}
    return not words or _covers(words, stops | _phrases(params.backchannels) | rests)


def only_unsure(heard: Heard, params: OverlapParams) -> bool:
    """Whether only Whisper's doubt would make these words a backchannel (they are none of the
    backchannels or stop words): then how they sound decides whether they were a stop word."""
    words = _words(heard.text)
    known = _phrases([*params.backchannels, *params.stop_words])
    return bool(words) and not _covers(words, known) and _unsure(heard, len(words), params)


def closest_stop_word(sounds: str, stop_sounds: dict[str, str]) -> str:
    """The stop word whose phonemes are within ``MAX_SOUND_DISTANCE`` of ``sounds`` ("" when none),
    counted against the stop word's own phonemes too: two sounds more around a short word are another
    word ("nimo" is not "no")."""
    found = closest_by_sound(sounds, stop_sounds, max_distance=MAX_SOUND_DISTANCE)
    if found is None:
        return ""
    theirs = stop_sounds[found[0]]
    return found[0] if edit_distance(sounds, theirs) <= MAX_SOUND_DISTANCE * len(theirs) else ""


def _unsure(heard: Heard, words: int, params: OverlapParams) -> bool:
    """A few words Whisper was unsure of: made up for a sound."""
    if params.unsure_logprob is None or heard.logprob is None:
        return False
    return words <= UNSURE_MAX_WORDS and heard.logprob < params.unsure_logprob


@dataclass
class Overlap:
    """One stretch of someone's voice over a reply."""

    reply: Turn
    began: float  # monotonic: the first voiced frame arrived
    last_voiced: float
    silenced_ms: float  # from the first voiced frame's arrival to the reply's silence
    reply_heard_s: float  # of the reply, when it paused
    voiced_s: float = FRAME_S
    by_linear_ear: bool = False  # its first voiced frame was heard in the linear canceller's output alone
    speech: bool = False  # the endpointer heard speech start (more than a blip)
    pause: EndpointEvent | None = None  # its PROBABLY_ENDED, while the pause lasts
    judging: asyncio.Task[Heard] | None = None
    heard: Heard = Heard("")

    def record(self, kind: OverlapKind, now: float) -> dict[str, Any]:
        """For the reply's trace (``TurnTrace.overlaps``)."""
        return {
            "kind": kind.value,
            "heard": self.heard.text,
            "heard_logprob": None if self.heard.logprob is None else round(self.heard.logprob, 2),
            "at_s": round(self.reply_heard_s, 3),
            "voiced_ms": round(self.voiced_s * 1000.0),
            "silenced_ms": round(self.silenced_ms, 1),
            "decided_ms": round((now - self.began) * 1000.0, 1),
            "by_linear_ear": self.by_linear_ear,
        }


Transcribe = Callable[[np.ndarray], Awaitable[Heard]]
NOT_TRANSCRIBED = Heard("(not transcribed)")  # the words could not be had: not taken for a backchannel


class Overlaps:
    """The overlap in progress (at most one), for one session."""

    def __init__(self, params: OverlapParams) -> None:
        self.params = params
        self.current: Overlap | None = None

    @property
    def deciding(self) -> bool:
        return self.params.mode == "decide"

    async def on_frame(
        self, now: float, *, voiced: bool, in_speech: bool, reply: Turn | None, by_linear_ear: bool = False
    ) -> OverlapKind | None:
        """Each frame: pause an audible reply at the first voiced frame over it; resume it after a
        blip; the decision, once there is one. ``by_linear_ear``: the frame is voiced only in the
        linear canceller's output (appliance/pipeline/linear_ear.py)."""
        overlap = self.current
        if overlap is None:
            if voiced and reply is not None and reply.player.playing:
                heard_s = reply.player.played_samples / reply.player.rate
                await reply.player.pause()
                silenced_ms = (time.monotonic() - now) * 1000.0
                self.current = Overlap(reply, now, now, silenced_ms, heard_s, by_linear_ear=by_linear_ear)
            return None
        if reply is not overlap.reply:  # the reply was cut meanwhile (a key pressed, the session ending)
            self.forget()
            return None
        if voiced:
            overlap.last_voiced = now
            overlap.voiced_s += FRAME_S
        if not overlap.speech and not in_speech and now - overlap.last_voiced >= BLIP_SILENCE_S:
            self.current = None
            await overlap.reply.player.resume()  # a click, a breath: nothing to decide
            return None
        if overlap.speech and in_speech and overlap.voiced_s >= self.params.backchannel_max_s:
            return OverlapKind.INTERRUPTION
        if overlap.judging is not None and overlap.judging.done():
            return self._from_words(overlap, overlap.judging)
        return None

    def _from_words(self, overlap: Overlap, judging: asyncio.Task[Heard]) -> OverlapKind:
        overlap.heard = NOT_TRANSCRIBED if judging.cancelled() else _result(judging)
        return classify(overlap.heard, self.params)

    def paused_speaking(self, event: EndpointEvent, audio: np.ndarray, transcribe: Transcribe) -> None:
        """The overlap paused (PROBABLY_ENDED): transcribe it so far."""
        overlap = self.current
        assert overlap is not None
        overlap.pause = event
        if overlap.judging is not None:
            overlap.judging.cancel()
        overlap.judging = asyncio.ensure_future(transcribe(audio))

    def spoke_again(self) -> None:
        """RESUMED: the words so far are not the whole overlap."""
        overlap = self.current
        if overlap is not None:
            overlap.pause = None
            if overlap.judging is not None:
                overlap.judging.cancel()
                overlap.judging = None

    async def words_now(self, timeout_s: float) -> OverlapKind:
        """The overlap ended (ENDPOINT) before its words were judged: wait for them, briefly."""
        overlap = self.current
        assert overlap is not None
        judging = overlap.judging
        if judging is None:
            return OverlapKind.INTERRUPTION
        # asyncio.wait, not wait_for: the session's own cancellation must not be taken for the words'.
        done, _pending = await asyncio.wait({judging}, timeout=timeout_s)
        return self._from_words(overlap, judging) if done else OverlapKind.INTERRUPTION

    def forget(self) -> None:
        overlap, self.current = self.current, None
        if overlap is not None and overlap.judging is not None:
            overlap.judging.cancel()


def _result(task: asyncio.Task[Heard]) -> Heard:
    try:
        return task.result()
    except Exception:  # a failed transcript: the words cannot say it was only a backchannel
        return NOT_TRANSCRIBED
