"""The echo canceller's own settings (``[aec]``; whether it runs: ``audio.echo_cancellation``)."""

from __future__ import annotations

from pydantic import Field

from engines.params import Params


class AecParams(Params):
    """The echo canceller's filters (whether it runs at all: audio.echo_cancellation)."""

    echo_noise_suppression: bool = Field(False, description="WebRTC noise suppression after the canceller")
    echo_high_pass: bool = Field(True, description="WebRTC high-pass filter (removes hum and DC)")
