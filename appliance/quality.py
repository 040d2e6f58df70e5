"""Output quality in service, per turn and per bundle version: a worse bundle shows in the turns it
answers, not only in its latency.

Signals of a turn (each turn's trace has what they need):

- ``unsure``: Whisper's own confidence is low (average log probability under -1, or it thought no one
  spoke: no-speech probability over 0.6), the thresholds Whisper's decoder itself falls back on;
- ``repeated``: the person said again what they said the turn before (they were not understood);
- ``barge_in``: the reply was cut by the person speaking;
- ``tool_failed``: a tool the model called failed;
- ``fallback``: the turn failed and ``conversation.fallback_reply`` was said;
- ``empty``: words were heard and nothing was answered.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from appliance.trace.record import TurnTrace
from engines.asr.text import normalize_text

SIGNALS = ("unsure", "repeated", "barge_in", "tool_failed", "fallback", "empty")
UNSURE_AVG_LOGPROB = -1.0
UNSURE_NO_SPEECH_P = 0.6
SAID_AGAIN_RATIO = 0.8
SAID_AGAIN_MIN_WORDS = 3  # "yes" twice is an answer, not a repetition


def said_again(transcript: str, previous: str) -> bool:
    """``transcript`` is (nearly) the words of ``previous``."""
    new, old = normalize_text(transcript), normalize_text(previous)
    if len(new.split()) < SAID_AGAIN_MIN_WORDS or not old:
        return False
    return difflib.SequenceMatcher(None, new, old).ratio() >= SAID_AGAIN_RATIO  # by letter: "where's"


def signals(trace: TurnTrace) -> list[str]:
    """The quality signals ``trace`` shows (a subset of SIGNALS, in their order)."""
    if not trace.transcript:
        return []
    unsure = (trace.asr_avg_logprob is not None and trace.asr_avg_logprob < UNSURE_AVG_LOGPROB) or (
        trace.asr_no_speech_p is not None and trace.asr_no_speech_p > UNSURE_NO_SPEECH_P
    )
    found = {
        "unsure": unsure,
        "repeated": trace.repeated,
        "barge_in": trace.cancelled and not trace.outcome and trace.error is None,
        "tool_failed": any(":" in call for call in trace.tool_calls),
        "fallback": trace.error is not None,
        "empty": not trace.reply and trace.error is None and not trace.cancelled and not trace.outcome,
    }
    return [name for name in SIGNALS if found[name]]


@dataclass
class VersionQuality:
    """The quality of the turns one bundle version answered."""

    version: str  # "" for an unversioned bundle
    turns: int = 0  # turns with words heard
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0))
    avg_logprob: float | None = None  # mean over those turns
    no_speech_p: float | None = None

    def share(self, signal: str) -> float:
        return self.counts[signal] / self.turns if self.turns else 0.0


def by_version(traces: Sequence[TurnTrace]) -> list[VersionQuality]:
    """Per bundle version, in the order each first appears in ``traces`` (newest first from the store)."""
    found: dict[str, VersionQuality] = {}
    logprobs: dict[str, list[float]] = {}
    no_speech: dict[str, list[float]] = {}
    for trace in traces:
        if not trace.transcript:
            continue
        quality = found.setdefault(trace.bundle_version, VersionQuality(trace.bundle_version))
        quality.turns += 1
        for signal in signals(trace):
            quality.counts[signal] += 1
        if trace.asr_avg_logprob is not None:
            logprobs.setdefault(trace.bundle_version, []).append(trace.asr_avg_logprob)
        if trace.asr_no_speech_p is not None:
            no_speech.setdefault(trace.bundle_version, []).append(trace.asr_no_speech_p)
    for version, quality in found.items():
        quality.avg_logprob = _mean(logprobs.get(version, []))
        quality.no_speech_p = _mean(no_speech.get(version, []))
    return list(found.values())


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None
