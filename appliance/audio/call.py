"""A phone call as a session's source and sink (the SIP layer's ``CallAudio``: 16 kHz frames in,
audio queued for RTP out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import numpy as np

from appliance.audio.base import SourceBase


class CallAudioLike(Protocol):
    call_id: str
    sample_rate_hz: int

    def frames(self) -> AsyncIterator[np.ndarray]: ...

    def play(self, audio: np.ndarray) -> None: ...

    def flush(self) -> float: ...

    @property
    def keys_pressed(self) -> list[str]:
        """Every keypad key of the call so far (RFC 4733 events and SIP INFO)."""
        ...

    async def transfer(self, target: str) -> None: ...


class CallSource(SourceBase):
    realtime = True  # RTP arrives at the caller's pace
    # When the call's audio ends the caller has hung up: nobody is left to hear a reply, so the
    # session cuts the turn in progress at once instead of letting it run on (and hold the LLM).
    ends_with_listener = True

    def __init__(self, call: CallAudioLike) -> None:
        self.call = call
        self.name = f"call:{call.call_id}"

    async def frames(self) -> AsyncIterator[np.ndarray]:
        async for frame in self.call.frames():
            yield np.asarray(frame, dtype=np.float32)

    async def close(self) -> None:
        return None


class CallLine:
    """The call's keypad and transfers, for the session's call policy."""

    def __init__(self, call: CallAudioLike) -> None:
        self.call = call
        self._keys_taken = 0

    def pressed(self) -> list[str]:
        pressed = self.call.keys_pressed
        new, self._keys_taken = pressed[self._keys_taken :], len(pressed)
        return new

    async def transfer(self, uri: str) -> None:
        await self.call.transfer(uri)


class CallSink:
    """Reply audio queued for the caller; a flush drops what RTP has not sent yet."""

    realtime = True

    def __init__(self, call: CallAudioLike) -> None:
        self.call = call
        self.name = f"call:{call.call_id}"
        self.sample_rate_hz = call.sample_rate_hz

    async def write(self, audio: np.ndarray) -> None:
        self.call.play(audio)

    async def flush(self) -> None:
        self.call.flush()

    async def close(self) -> None:
        return None


def call_session_kwargs(call: Any) -> dict[str, Any]:
    """Source, sink, the call's line and session id for ``Session(**kwargs, engines=..., config=...)``."""
    return {
        "source": CallSource(call),
        "sink": CallSink(call),
        "call": CallLine(call),
        "session_id": f"call-{call.call_id}",
    }
