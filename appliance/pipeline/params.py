"""The pipeline's own settings, each class a section: ``[partials]`` (partial transcripts and the LLM
prefill), ``[conversation]`` (the history a session keeps, what a turn says when it cannot answer),
``[call]`` (a phone call's keypad, silence and transfers) and ``[overlap]`` (speech over a reply).
(``[echo_gate]`` is in ``echo_gate``.)"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from engines.params import Params, check_sentence, ms_to_s

# An extension (digits, *, #, a user name) or a SIP URI without spaces, angle brackets or line breaks:
# the value goes into a Refer-To header.
# A whole target (fullmatch: "$" alone lets a final line break through into Refer-To); a SIP URI
# without headers ("?Replaces=..." would make the REFER take over another call).
_TARGET = re.compile(r"sip:[^\s<>\"?]{1,200}|[A-Za-z0-9*#+._-]{1,64}")


class PartialsParams(Params):
    """Transcripts made while the person speaks (``appliance.pipeline.partials``), and the LLM's
    evaluation of their stable words before the person stops."""

    # 600: turn latency p50 0.83x / p95 0.87x of partials off, same transcripts (docs/turn-taking.md).
    partial_interval_ms: int = Field(
        600,
        ge=0,
        le=10000,
        description="while a person speaks, transcribe what was said so far after each this much new "
        "speech (0: off); the LLM pre-evaluates the words two partials agree on (partials.prefill)",
    )
    partial_model: str = Field(
        "", description='Whisper for those partials: "" = asr.model, or another one of the bundle'
    )
    prefill: bool = Field(
        True,
        description="evaluate the stable words of partial transcripts before the person stops speaking, "
        "and the keys typed on a caller's keypad before the last one",
    )

    @property
    def partial_interval_s(self) -> float:
        return ms_to_s(self.partial_interval_ms)

    @property
    def enabled(self) -> bool:
        return self.partial_interval_ms > 0

    def separate_model(self, asr_model: str) -> str | None:
        """The model of a second Whisper engine for the partials, when they run on another model than
        ``asr_model``."""
        if self.partial_interval_ms == 0 or self.partial_model in ("", asr_model):
            return None
        return self.partial_model


class ConversationParams(Params):
    """The conversation a session keeps, and what a turn says when the model cannot answer at once."""

    max_history_messages: int = Field(
        16, ge=2, le=256, description="messages of conversation kept per session (older ones are dropped)"
    )
    fallback_reply: str = Field(
        "Sorry, something went wrong. Please say that again.", description="said when a turn fails"
    )
    busy_reply: str = Field(
        "One moment, please.", description="said first when every LLM slot is busy (llm.max_queue)"
    )

    @field_validator("fallback_reply", "busy_reply")
    @classmethod
    def _reply_sentence(cls, value: str) -> str:
        return check_sentence(value)


class CallParams(Params):
    """A phone call (with ``[sip]`` on): its greeting, keys typed on the keypad, silence, and transfers."""

    greeting: str = Field(
        "",
        description='said when a call is answered, before the caller speaks ("Plant 3 reception, how can I '
        'help?"); empty: the call is answered in silence',
    )

    keypad_timeout_ms: int = Field(
        3000,
        ge=500,
        le=30000,
        description="keys typed on a caller's keypad are one turn, ended by # or after this long without a "
        "key (the first key cuts a reply that is playing)",
    )
    silence_prompt_s: float = Field(
        20.0,
        ge=0.0,
        le=600.0,
        description="a caller silent this long after the last reply is asked silence_prompt (0: never)",
    )
    silence_prompt: str = Field(
        "Are you still there?", min_length=1, description="said once to a caller who stays silent"
    )
    silence_hangup_s: float = Field(
        10.0,
        gt=0.0,
        le=600.0,
        description="... and the call is ended when they stay silent this long after it",
    )

    transfer_targets: dict[str, str] = Field(
        default_factory=dict,
        description='people a caller can be put through to, by the name said: {"front desk" = "2000"} (an '
        'extension at sip.registrar) or {"security" = "sip:2100@10.20.0.2"}; the transfer tool offers them',
    )
    operator_digit: str = Field(
        "", pattern=r"^[0-9*]?$", description="a key that puts the caller through to operator_target at once"
    )
    operator_target: str = Field(
        "", description="... the transfer_targets name it puts the caller through to"
    )
    transfer_preamble: str = Field(
        "I'll put you through to {target}.",
        min_length=1,
        description="said before a transfer; {target} is the name as said (spoken_target: 'the shift "
        "supervisor', 'reception')",
    )
    transfer_failed_reply: str = Field(
        "Sorry, I could not put you through to {target} just now.",
        min_length=1,
        description="said when a transfer is refused or not answered (the call goes on)",
    )

    @field_validator("transfer_preamble", "transfer_failed_reply")
    @classmethod
    def _says_target(cls, value: str) -> str:
        return check_sentence(value, ("target",))

    @field_validator("silence_prompt")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return check_sentence(value)

    @field_validator("greeting")
    @classmethod
    def _greeting(cls, value: str) -> str:
        return check_sentence(value) if value else value

    @field_validator("transfer_targets")
    @classmethod
    def _targets(cls, value: dict[str, str]) -> dict[str, str]:
        for name, target in value.items():
            if not name.strip() or len(name) > 64 or any(c in name for c in "\r\n{}"):
                raise ValueError(f"target name {name[:64]!r}: 1-64 characters on one line, no braces")
            if not _TARGET.fullmatch(target):
                raise ValueError(
                    f"{name!r} = {target[:80]!r} is neither an extension (digits or a user name) nor a "
                    'SIP URI without spaces, line breaks or headers ("sip:2100@10.20.0.2")'
                )
        return value

    @model_validator(mode="after")
    def _operator(self) -> CallParams:
        if self.operator_digit and self.operator_target not in self.transfer_targets:
            raise ValueError(
                f"call.operator_target {self.operator_target!r} is not one of call.transfer_targets "
                f"({', '.join(self.transfer_targets) or 'none'})"
            )
        return self

    @property
    def keypad_timeout_s(self) -> float:
        return ms_to_s(self.keypad_timeout_ms)

    def transfer_uri(self, name: str, domain: str) -> str | None:
        """Where ``name`` of transfer_targets is reached: its SIP URI, or an extension at ``domain``
        (the phone system's, ``SipParams.transfer_domain``; none without one)."""
        value = self.transfer_targets.get(name)
        if value is None:
            return None
        if value.startswith("sip:"):
            return value
        return f"sip:{value}@{domain}" if domain else None


# fmt: off
_BACKCHANNELS = (
    "mm", "mmm", "mm hmm", "mhm", "hmm", "hm", "uh huh", "uh", "huh", "um", "ah", "oh", "yeah", "yes",
    "yep", "yup", "okay", "ok", "right", "sure", "alright", "all right", "i see", "got it", "cool",
    "great", "good", "nice", "wow", "true", "exactly", "ha", "haha", "thanks", "thank you", "you",
)
# fmt: on


class OverlapParams(Params):
    """Speech over a reply (docs/turn-taking.md, "While the appliance speaks")."""

    mode: Literal["decide", "interrupt"] = Field(
        "decide",
        description="decide: speech over a reply pauses it at once; a backchannel lets it go on, a stop "
        "word stops it, anything else interrupts it; interrupt: any speech over a reply stops it",
    )
    backchannel_max_ms: int = Field(
        1000,
        ge=100,
        le=5000,
        description="decide: voiced speech over a reply this long is an interruption, whatever its words",
    )
    backchannels: tuple[str, ...] = Field(
        _BACKCHANNELS,
        description='decide: words that only acknowledge ("you": what Whisper hears in a cough)',
    )
    stop_words: tuple[str, ...] = Field(
        ("stop", "wait", "hold on", "no", "cancel", "quiet", "be quiet", "enough", "shut up", "pause"),
        description="decide: words that stop the reply without being answered (with backchannels around "
        'them too: "oh wait", "no no")',
    )
    unsure_logprob: float | None = Field(
        -0.65,
        le=0.0,
        description="decide: at most 3 words that Whisper heard less sure than this (mean token "
        'log-probability) are a sound, not words: a hum ("mm-hmm" heard as "in my mom") lets the reply go '
        "on; none: judge the words alone",
    )

    @property
    def backchannel_max_s(self) -> float:
        return ms_to_s(self.backchannel_max_ms)
