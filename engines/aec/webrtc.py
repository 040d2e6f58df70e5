"""WebRTC's audio processing module (AEC3, noise suppression, high-pass filter) through LiveKit's
Python SDK, which ships it compiled for x86-64 and aarch64 (``livekit`` on the package registry).

Only the audio processing module is used: nothing of LiveKit's rooms or network is started.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engines.aec.blocks import BLOCK_SAMPLES, BlockCanceller
from engines.aec.room import EchoRoom
from engines.audio import SAMPLE_RATE_HZ
from engines.errors import BackendUnavailable


def _import_rtc() -> Any:
    from livekit import rtc

    return rtc


def _rtc() -> Any:
    try:
        rtc = _import_rtc()
    except ImportError as err:
        raise BackendUnavailable(
            f"WebRTC audio processing is not installed ({err})",
            fix="pip install livekit==1.2.0, or set audio.echo_cancellation = 'off'",
        ) from err
    except OSError as err:  # the native library failed to load
        raise BackendUnavailable(
            f"WebRTC audio processing cannot load its native library ({err})",
            fix="reinstall livekit==1.2.0 for this machine's architecture, or set audio.echo_cancellation = 'off'",
        ) from err
    return rtc


def unavailable_reason() -> str | None:
    """Why WebRTC audio processing cannot run here (None when it can)."""
    try:
        _rtc()
    except BackendUnavailable as err:
        return str(err)
    return None


class WebRtcStream(BlockCanceller):
    def __init__(
        self, rtc: Any, *, noise_suppression: bool, high_pass_filter: bool, room: EchoRoom | None = None
    ) -> None:
        self._rtc = rtc
        self._apm = rtc.AudioProcessingModule(
            echo_cancellation=True, noise_suppression=noise_suppression, high_pass_filter=high_pass_filter
        )
        # The caller aligns the reference with the capture, so the module is told there is no delay
        # between them; AEC3 still estimates what is left (the room's own path) by itself.
        self._apm.set_stream_delay_ms(0)
        super().__init__(self._block, room=room)

    def _block(self, capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
        frame = self._rtc.AudioFrame
        far = frame(bytearray(reference.tobytes()), SAMPLE_RATE_HZ, 1, BLOCK_SAMPLES)
        near = frame(bytearray(capture.tobytes()), SAMPLE_RATE_HZ, 1, BLOCK_SAMPLES)
        self._apm.process_reverse_stream(far)
        self._apm.process_stream(near)  # in place
        return np.frombuffer(bytes(near.data), dtype=np.int16)


class WebRtcCanceller:
    def __init__(self, *, noise_suppression: bool, high_pass_filter: bool) -> None:
        self.noise_suppression = noise_suppression
        self.high_pass_filter = high_pass_filter
        self._rtc: Any = None

    def load(self) -> None:
        self._rtc = _rtc()
        warm = self.stream()  # proves the native module runs here before the daemon reports ready
        noise = np.random.default_rng(0).uniform(-0.1, 0.1, BLOCK_SAMPLES * 10).astype(np.float32)
        warm.process(noise, noise)

    def stream(self, room: EchoRoom | None = None) -> WebRtcStream:
        """A new stream; ``room``: a linear filter learnt before in the same room, to start from."""
        if self._rtc is None:
            raise RuntimeError("echo canceller not loaded; call load() first")
        return WebRtcStream(
            self._rtc,
            noise_suppression=self.noise_suppression,
            high_pass_filter=self.high_pass_filter,
            room=room,
        )

    def close(self) -> None:
        self._rtc = None
