"""Frames, with a tick in the gaps between them.

A call's audio can stop while the call goes on: a phone with silence suppression (RFC 3389 comfort
noise, or none at all) sends no RTP while the caller is quiet. Whatever the session does between
frames (closing a finished turn, the silence prompt, hanging up after a goodbye, a transfer) must
still happen then, so the frame loop gets ``None`` whenever no frame came for ``every_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def frames_or_ticks(frames: AsyncIterator[T], every_s: float) -> AsyncIterator[T | None]:
    """``frames`` as they come, and ``None`` after each ``every_s`` without one; ends with them."""
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(frames.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            next_frame, pending = pending, None
            try:
                frame = next_frame.result()
            except StopAsyncIteration:
                return
            yield frame
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        closing = getattr(frames, "aclose", None)
        if closing is not None:
            with contextlib.suppress(RuntimeError):  # still running in a cancelled task
                await closing()
