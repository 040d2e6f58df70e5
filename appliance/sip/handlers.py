"""Call handlers that need no speech pipeline: for checks on a site's phone system and for tests."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from appliance.sip.call import CallAudio
from engines.audio import load_audio_16k

log = logging.getLogger(__name__)


class EchoHandler:
    """Sends the caller's own audio back, frame by frame (a loopback check of both directions)."""

    async def __call__(self, call: CallAudio) -> None:
        async for frame in call.frames():
            call.play(frame)


class PlaybackHandler:
    """Plays one recording to the caller, then hangs up (or keeps listening, ``hang_up=False``)."""

    def __init__(self, path: str | Path, *, hang_up: bool = True, lead_in_s: float = 0.0) -> None:
        self.audio = load_audio_16k(path)  # raises InputError naming the file if it is unusable
        self.hang_up = hang_up
        self.lead_in_s = lead_in_s

    async def __call__(self, call: CallAudio) -> None:
        if self.lead_in_s > 0:
            call.play(np.zeros(int(self.lead_in_s * call.sample_rate_hz), dtype=np.float32))
        call.play(self.audio)
        await call.drain()
        log.info("call %s: played %.2f s", call.call_id, call.played_s)
        if not self.hang_up:
            async for _ in call.frames():
                pass
