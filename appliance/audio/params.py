"""[audio]: the local microphone and speaker (the echo canceller's own keys: engines/aec/params.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from engines.params import Params


class AudioParams(Params):
    """The local microphone and speaker, and whether the echo canceller runs between them."""

    input: Literal["auto", "microphone", "none"] = Field(
        "auto",
        description="auto: the microphone when there is one (else one spoken demo question); microphone: "
        "it must be there; none: SIP calls only",
    )
    output: Literal["auto", "speaker", "none"] = Field(
        "auto", description="auto: the speaker when there is one; speaker: it must be there; none: silent"
    )
    input_device: str | None = Field(None, description="sounddevice name or index; unset: the default")
    output_device: str | None = Field(None, description="sounddevice name or index; unset: the default")
    device_sample_rate_hz: int = Field(
        16000, ge=8000, le=192000, description="the sound card's rate (converted to 16 kHz and back)"
    )
    echo_cancellation: Literal["auto", "on", "off"] = Field(
        "auto",
        description="cancel the appliance's own voice from the microphone (WebRTC AEC3): auto = for the "
        "local microphone when a speaker plays the replies, not for SIP calls (a phone cancels its own "
        "echo); on = every session, SIP calls too; off = none (echo_gate.threshold_while_playing and "
        "echo_gate.gate_while_playing then keep the reply from interrupting itself)",
    )
    echo_delay_ms: float = Field(
        0.0,
        ge=0.0,
        le=1000.0,
        description="from a sample's write to the speaker until the microphone hears it (output buffer, "
        "air, input buffer): measure it with `appliance calibrate`, which writes it here; 0 leaves the "
        "whole delay to the canceller's own estimate",
    )
    echo_room_file: Path | None = Field(
        Path("/var/lib/appliance/echo-room.npz"),
        description="where the echo canceller keeps what it learnt of the room (the local microphone's), "
        "so that the first reply after a start is cancelled as well as the later ones; it is used only "
        'with the same devices and echo_delay_ms; "": learn the room anew at each start',
    )

    @field_validator("echo_room_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value
