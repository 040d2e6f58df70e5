"""The echo canceller's settings (in ``[audio]``)."""

from __future__ import annotations

from pydantic import Field

from engines.params import Params


class AecParams(Params):
    echo_noise_suppression: bool = Field(False, description="WebRTC noise suppression after the canceller")
    echo_high_pass: bool = Field(True, description="WebRTC high-pass filter (removes hum and DC)")
