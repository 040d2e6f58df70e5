"""One turn's record: monotonic timestamps, texts and outcome."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from appliance.trace.labels import EndedBy, OpenedBy, TurnOutcome, WordsNotExpected

# In the order they happen in an undisturbed turn. ``asr_start`` may come before ``endpoint``
# (speculative start), which is the point of starting early.
TIMESTAMPS: tuple[str, ...] = (
    "speech_start",
    "speech_end",
    "endpoint",
    "asr_start",
    "asr_done",
    "llm_first_token",
    "first_clause",
    "tts_first_audio",
    "playback_start",
    "turn_done",
)

# Stage name -> (from, to). ``turn_latency`` includes the endpoint wait (end-of-speech silence),
# unless speculative work already finished inside it.
STAGES: dict[str, tuple[str, str]] = {
    "endpoint_wait": ("speech_end", "endpoint"),
    "asr": ("asr_start", "asr_done"),
    "llm_first_token": ("asr_done", "llm_first_token"),
    "first_clause": ("llm_first_token", "first_clause"),
    "tts_first_audio": ("first_clause", "tts_first_audio"),
    "playback_start": ("tts_first_audio", "playback_start"),
    "turn_latency": ("speech_end", "playback_start"),
    "turn_total": ("speech_end", "turn_done"),
}


def new_turn_id() -> str:
    return uuid.uuid4().hex[:12]


_LABEL_FIELDS: dict[str, Any] = {
    "outcome": TurnOutcome,
    "endpoint_by": EndedBy,
    "words_not_expected": WordsNotExpected,
    "opened_by": OpenedBy,
}


@dataclass
class TurnTrace:
    """Timestamps are ``time.monotonic()`` seconds; ``None`` when the turn never got there."""

    turn_id: str
    session_id: str
    wall_time: float = field(default_factory=time.time)
    speech_start: float | None = None
    speech_end: float | None = None
    endpoint: float | None = None
    asr_start: float | None = None
    asr_done: float | None = None
    llm_first_token: float | None = None
    first_clause: float | None = None
    tts_first_audio: float | None = None
    playback_start: float | None = None
    turn_done: float | None = None
    transcript: str = ""
    reply: str = ""
    played_reply: str = ""
    cancelled: bool = False
    error: str | None = None
    # "" for a turn that ran its course (or was cut by barge-in: ``cancelled``); TurnOutcome.HANGUP
    # or STOPPED when the session was stopped with the reply still playing.
    outcome: TurnOutcome | Literal[""] = ""
    speculative: bool = False  # ASR started before the endpoint was confirmed
    audio_s: float = 0.0  # utterance audio given to ASR
    reply_audio_s: float = 0.0  # reply audio actually played
    llm_tokens: int = 0
    endpoint_by: EndedBy | Literal[""] = ""  # what ended the turn; "" in older records
    turn_checks: int = 0  # times the turn detector was asked during the utterance
    turn_incomplete: int = 0  # ... and did not hear it as finished (below endpointer.turn_complete_threshold)
    turn_check_failed: int = 0  # ... and could not answer
    turn_check_ms: float | None = None  # cost of the last check (queue + model), ms
    # The reply model's P(the words end the person's message) for the pause this turn started at
    # (endpointer.judge_words); None when the words were not judged.
    words_complete_p: float | None = None
    words_not_expected: WordsNotExpected | Literal[""] = ""  # why the words did not judge that pause
    turn_complete_p: float | None = None  # the last check's probability that the turn was complete
    partials: int = 0  # partial transcripts made while the person spoke (partials.partial_interval_ms)
    partial_asr_ms: float = 0.0  # their ASR time, summed
    prefill_tokens: int = 0  # prompt tokens the LLM evaluated while the person spoke (partials.prefill)
    prefill_reused: int = 0  # ... of which this turn's prompt found in the cache
    prefill_discarded: int = 0  # ... thrown away as not matching what was finally said
    llm_prompt_tokens: int = 0  # this turn's prompt (system prompt included)
    llm_evaluated_tokens: int = 0  # ... evaluated after the end of speech (the rest was cached)
    llm_queued_ms: float = 0.0  # waited for an LLM slot (every one busy with other calls' replies)
    llm_backend: str = ""  # who answered when llm.backend = "openai": site server, or local model (why)
    busy_reply: bool = False  # conversation.busy_reply was said first (the LLM's queue was full)
    tool_calls: list[str] = field(default_factory=list)  # tools called (name, or name:why it failed)
    tool_ms: float = 0.0  # time the tools took, summed
    preamble_audio: bool = False  # agent.tool_preamble was said while a tool ran
    # What the reply could say (appliance.grounding): the facts sections given for the question, the
    # clauses not spoken ({"clause", "why": figure | internal, "figures"}), and whether it declined.
    facts_given: list[str] = field(default_factory=list)
    # Words of the transcript read as the site's by their sound ("L -> Elm"): the transcript holds them.
    heard_as: list[str] = field(default_factory=list)
    heard: str = ""  # the transcript as Whisper wrote it, when heard_as changed it
    # agent.answers = "select": the facts' sentences the model chose (their numbers; [0]: none), and
    # why the product declined its choice ("none chosen", "not named: M6", ...), when it did.
    chosen: list[int] = field(default_factory=list)
    answer_check: str = ""
    withheld: list[dict[str, Any]] = field(default_factory=list)
    declined: bool = False
    # speech over the reply ({"kind": OverlapKind, "heard", "heard_logprob", "at_s", "voiced_ms", "silenced_ms",
    # "decided_ms", "by_linear_ear"}): a backchannel paused the reply for decided_ms, a stop word or
    # interruption ended it.
    overlaps: list[dict[str, Any]] = field(default_factory=list)
    # What let the speech begin a turn (appliance.pipeline.activation.OpenedBy): always, the wake
    # word, the follow-up window after a reply, or speech over a turn still answering.
    opened_by: OpenedBy | Literal[""] = ""
    # Output quality (appliance.quality): Whisper's confidence in the transcript, the person saying
    # again what they said the turn before, and the bundle version whose engines answered.
    asr_avg_logprob: float | None = None
    asr_no_speech_p: float | None = None
    asr_compression_ratio: float | None = None
    repeated: bool = False
    bundle_version: str = ""

    def mark(self, name: str, at: float | None = None) -> None:
        """Set timestamp ``name`` to now (or ``at``) unless it is already set."""
        if name not in TIMESTAMPS:
            raise ValueError(f"unknown trace timestamp {name!r}; expected one of {', '.join(TIMESTAMPS)}")
        if getattr(self, name) is None:
            setattr(self, name, time.monotonic() if at is None else at)

    def stage_s(self, stage: str) -> float | None:
        start_name, end_name = STAGES[stage]
        start, end = getattr(self, start_name), getattr(self, end_name)
        if start is None or end is None:
            return None
        return float(end - start)

    def stages_ms(self) -> dict[str, float | None]:
        result: dict[str, float | None] = {}
        for stage in STAGES:
            seconds = self.stage_s(stage)
            result[stage] = None if seconds is None else round(seconds * 1000.0, 1)
        return result

    def relative_s(self) -> dict[str, float | None]:
        """Every timestamp relative to ``speech_start`` (or the first one set), in seconds."""
        present = [getattr(self, n) for n in TIMESTAMPS if getattr(self, n) is not None]
        origin = self.speech_start if self.speech_start is not None else min(present, default=0.0)
        return {
            n: None if getattr(self, n) is None else round(getattr(self, n) - origin, 4) for n in TIMESTAMPS
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnTrace:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name, labels in _LABEL_FIELDS.items():
            value = known.get(name)
            if isinstance(value, str) and value:
                try:
                    known[name] = labels(value)
                except ValueError:  # a label this version does not know reads as none
                    known[name] = ""
        return cls(**known)

    def log_line(self) -> str:
        """One structured line (JSON) for the log: ids, outcome, texts, stage durations."""
        payload = {
            "turn_id": self.turn_id,
            "session_id": self.session_id,
            "cancelled": self.cancelled,
            "error": self.error,
            "outcome": self.outcome,
            "speculative": self.speculative,
            "transcript": self.transcript,
            "reply": self.reply,
            "played_reply": self.played_reply,
            "audio_s": round(self.audio_s, 3),
            "reply_audio_s": round(self.reply_audio_s, 3),
            "llm_tokens": self.llm_tokens,
            "endpoint_by": self.endpoint_by,
            "turn_checks": self.turn_checks,
            "turn_incomplete": self.turn_incomplete,
            "turn_check_ms": self.turn_check_ms,
            "words": f"not expected, {self.words_not_expected}" if self.words_not_expected else "expected",
            "partials": self.partials,
            "prefill_reused": self.prefill_reused,
            "llm_evaluated_tokens": self.llm_evaluated_tokens,
            "stages_ms": self.stages_ms(),
        }
        if self.withheld:
            payload["withheld"] = self.withheld
        if self.chosen:
            payload["chosen"] = self.chosen
        if self.answer_check:
            payload["answer_check"] = self.answer_check
        if self.overlaps:
            payload["overlaps"] = self.overlaps
        if self.opened_by not in ("", "always"):
            payload["opened_by"] = self.opened_by
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
