"""A call as an audio endpoint: the interface the conversation pipeline plugs into.

``CallAudio`` is what a ``CallHandler`` gets when a call is established: caller audio as 16 kHz
float32 frames of 512 samples, a queue for the appliance's 16 kHz audio, a flush for barge-in, and a
way to end the call. The SIP server calls the handler once per call; when it returns, the appliance
hangs up. When the caller hangs up first, ``frames()`` ends and the handler should return; it is
cancelled if it is still running ``HANDLER_GRACE_S`` later.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, runtime_checkable

import numpy as np

from appliance.rtp.srtp import CryptoOffer
from appliance.rtp.stream import RtpStream
from appliance.sip.dialog import Dialog
from appliance.sip.message import SipRequest
from appliance.sip.transactions import Retransmitter
from appliance.transfer import TransferFailed
from engines.audio import FRAME_SAMPLES, SAMPLE_RATE_HZ

HANDLER_GRACE_S = 2.0


@runtime_checkable
class CallAudio(Protocol):
    call_id: str
    caller: str  # the caller's From header
    sample_rate_hz: int  # 16000
    frame_samples: int  # 512

    def frames(self) -> AsyncIterator[np.ndarray]:
        """Caller audio, float32 mono frames of ``frame_samples``; ends when the call ends."""
        ...

    def play(self, audio: np.ndarray) -> None:
        """Queue float32 mono audio at ``sample_rate_hz`` for the caller; returns at once."""
        ...

    def flush(self) -> float:
        """Drop all queued, not yet sent audio (barge-in); returns the seconds dropped."""
        ...

    async def drain(self) -> None:
        """Wait until everything queued has been sent."""
        ...

    @property
    def played_s(self) -> float:
        """Seconds of queued audio actually sent to the caller so far."""
        ...

    @property
    def queued_s(self) -> float: ...

    @property
    def keys_pressed(self) -> list[str]:
        """Every keypad key of the call so far (RFC 4733 telephone-events and SIP INFO)."""
        ...

    @property
    def ended(self) -> bool: ...

    async def hangup(self) -> None:
        """End the call (BYE to the caller); frames() ends."""
        ...

    async def transfer(self, target: str) -> None:
        """Hand the caller to ``target`` (a SIP URI) with a blind transfer; returns when the target
        answered (the appliance then hangs up). Raises TransferFailed saying why not (the call goes on)."""
        ...


class CallHandler(Protocol):
    async def __call__(self, call: CallAudio) -> None: ...


class CallState(enum.Enum):
    RINGING = "ringing"
    ANSWERED = "answered"  # 200 OK sent, waiting for ACK
    ESTABLISHED = "established"
    ENDED = "ended"


class Call:
    """One call: its dialog, its RTP stream and the handler's task. Implements ``CallAudio``."""

    sample_rate_hz = SAMPLE_RATE_HZ
    frame_samples = FRAME_SAMPLES

    def __init__(
        self,
        dialog: Dialog,
        stream: RtpStream,
        *,
        peer: tuple[str, int],
        end: Callable[[Call, str, bool], Awaitable[None]],
    ) -> None:
        self.dialog = dialog
        self.stream = stream
        self.peer = peer
        self.call_id = dialog.call_id
        self.caller = dialog.remote_uri
        self.state = CallState.RINGING
        self.end_reason: str | None = None
        self.handler_task: asyncio.Task[None] | None = None
        self.answer_task: asyncio.Task[None] | None = None
        self.session_id = 0
        self.session_version = 1
        self.invite: SipRequest | None = None
        self.ok_retx: Retransmitter | None = None  # 2xx to an INVITE, until its ACK
        self.awaiting_answer = False  # our offer went in a 200 OK; the answer comes in the ACK
        self.offered_crypto: CryptoOffer | None = None  # our SRTP key in that offer
        self.refer_progress: asyncio.Queue[int] | None = None  # a transfer's NOTIFY statuses
        self.transferring: Callable[[Call, str], Awaitable[None]] | None = None  # the server's REFER
        self._end = end
        self._ended_event = asyncio.Event()

    def frames(self) -> AsyncIterator[np.ndarray]:
        return self.stream.frames()

    def play(self, audio: np.ndarray) -> None:
        self.stream.play(audio)

    def flush(self) -> float:
        return self.stream.flush()

    async def drain(self) -> None:
        await self.stream.drain()

    @property
    def played_s(self) -> float:
        return self.stream.played_s

    @property
    def queued_s(self) -> float:
        return self.stream.queued_s

    @property
    def keys_pressed(self) -> list[str]:
        return self.stream.stats.digits

    @property
    def ended(self) -> bool:
        return self.state is CallState.ENDED

    async def hangup(self) -> None:
        await self._end(self, "hung up by the appliance", True)

    async def transfer(self, target: str) -> None:
        """Hand the caller to ``target`` (blind transfer). Raises TransferFailed saying why not."""
        if self.transferring is None:
            raise TransferFailed("this call cannot be transferred")
        await self.transferring(self, target)

    def mark_ended(self, reason: str) -> None:
        self.state = CallState.ENDED
        self.end_reason = reason
        self._ended_event.set()
