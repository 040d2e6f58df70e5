"""Acoustic echo cancellation: the microphone's signal with the appliance's own voice taken out.

A stream is fed 16 kHz float32 capture (the microphone) and, sample for sample, the reference: what
the speaker was playing when that capture was made, aligned by the caller. It returns the capture with
the echo removed, ``BLOCK_SAMPLES`` late (the cancellers work on 10 ms blocks), in two versions
(``Cancelled``): WebRTC AEC3's, whose suppressor keeps the VAD from hearing the reply, and a linear
canceller's, which leaves a person speaking over the reply whole for Whisper. One engine serves every
session; each ``stream()`` has its own adaptive filters, and may start from a room learnt before
(``engines.aec.room``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from engines.aec.blocks import BLOCK_SAMPLES, BlockCanceller, Cancelled
from engines.aec.params import AecParams
from engines.aec.room import EchoRoom, Fit, RoomNotUsable, load_room, save_room
from engines.errors import BackendUnavailable

BACKENDS = ("webrtc",)

__all__ = [
    "BACKENDS",
    "BLOCK_SAMPLES",
    "BlockCanceller",
    "Cancelled",
    "EchoCanceller",
    "EchoRoom",
    "EchoStream",
    "Fit",
    "RoomNotUsable",
    "create_canceller",
    "load_room",
    "save_room",
    "unavailable_reason",
]


class EchoStream(Protocol):
    """One session's canceller state; capture and reference must be fed in order, equal lengths."""

    def process(self, capture: np.ndarray, reference: np.ndarray) -> Cancelled:
        """The capture without its echo: float32, as long as ``capture``, ``BLOCK_SAMPLES`` late."""
        ...

    def reference_heard_s(self) -> float:
        """Seconds of playback the stream has learnt the room from."""
        ...

    def room(self) -> EchoRoom | None:
        """What the stream has learnt of the room, to start a later one from (None before it has
        heard its echo alone)."""
        ...

    @property
    def fit(self) -> Fit | None:
        """Where the room it started from was placed on its own echo, or the room solved from that
        echo when it had none that fits (None until then)."""
        ...


class EchoCanceller(Protocol):
    def load(self) -> None: ...

    def stream(self, room: EchoRoom | None = None) -> EchoStream: ...

    def close(self) -> None: ...


def unavailable_reason() -> str | None:
    """Why the echo canceller's runtime cannot load on this machine (None when it can)."""
    from engines.aec.webrtc import unavailable_reason as webrtc_unavailable

    return webrtc_unavailable()


def create_canceller(params: AecParams | None = None, *, backend: str = "webrtc") -> EchoCanceller:
    """An unloaded canceller (``load()`` imports the runtime and runs it once)."""
    params = AecParams() if params is None else params
    if backend != "webrtc":
        raise BackendUnavailable(
            f"unknown echo cancellation backend {backend!r}; allowed: {', '.join(BACKENDS)}",
            fix="use backend='webrtc' (WebRTC AEC3), the one this appliance ships",
        )
    from engines.aec.webrtc import WebRtcCanceller

    return WebRtcCanceller(
        noise_suppression=params.echo_noise_suppression, high_pass_filter=params.echo_high_pass
    )
