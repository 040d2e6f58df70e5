"""How a turn may begin (``[wake]``): always, or after a wake word."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from engines.labels import Label
from engines.params import Params

WAKE_MODELS = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa")


class ActivationMode(Label):
    """What lets speech begin a turn (``wake.activation``)."""

    ALWAYS = "always"
    WAKE_WORD = "wake_word"


class WakeParams(Params):
    """How a turn may begin: any speech, or only speech after the wake word."""

    activation: ActivationMode = Field(
        ActivationMode.ALWAYS,
        description="always: any speech begins a turn | wake_word: only speech after the wake word (and "
        "within follow_up_ms of a reply, or over a reply); for kiosks where people pass by talking",
    )
    # hey_jarvis: found in 99% of phrases (100% at 10 dB) with no false wake in 0.46 h; okay_nabu 54%,
    # hey_mycroft 73%, alexa 94% (bench wake, bench/reference/wake.json).
    model: Literal["okay_nabu", "hey_jarvis", "hey_mycroft", "alexa"] = Field(
        "hey_jarvis",
        description="the wake word (microWakeWord): hey_jarvis | alexa | hey_mycroft | okay_nabu",
    )
    threshold: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="the averaged probability at which the wake word is heard (unset: the model's own cutoff)",
    )
    listen_ms: int = Field(
        5000, ge=500, le=60000, description="after the wake word, how long the appliance waits for speech"
    )
    follow_up_ms: int = Field(
        8000,
        ge=0,
        le=120000,
        description="after a reply, how long a follow-up question needs no wake word (0: every turn needs it)",
    )

    @property
    def listen_s(self) -> float:
        return self.listen_ms / 1000.0

    @property
    def follow_up_s(self) -> float:
        return self.follow_up_ms / 1000.0
