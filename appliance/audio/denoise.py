"""Noise suppression between a session's source and what listens to it (``[denoise]``).

``denoise.feed`` says which ear gets the cleaned audio: the VAD (and so the end of turn and the turn
model's sound), Whisper, or both; the other keeps the source's own. The suppressor runs on its own
worker, a stream per session, and its output is ``latency_s`` (30-40 ms) late.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import numpy as np

from appliance.audio.base import AudioSource, HeardFrame, split_frame
from appliance.audio.echo import Worker
from engines.denoise import Denoiser, DenoiseStream

log = logging.getLogger(__name__)


class DenoisedSource:
    def __init__(self, source: AudioSource, *, denoiser: Denoiser, worker: Worker, feed: str) -> None:
        self.inner = source
        self.worker = worker
        self.feed = feed
        self.name = f"{source.name}+{denoiser.name}"
        self.realtime = source.realtime
        self.ends_with_listener = source.ends_with_listener
        self._vad_stream: DenoiseStream | None = denoiser.stream() if feed in ("vad", "both") else None
        self._asr_stream: DenoiseStream | None = denoiser.stream() if feed in ("asr", "both") else None
        self.latency_s = max(s.latency_s for s in (self._vad_stream, self._asr_stream) if s is not None)

    @property
    def echo_converged(self) -> bool:
        return self.inner.echo_converged

    @property
    def heard_late_s(self) -> float:
        """The VAD's version of a frame is the suppressor's output (when it gets it), ``latency_s`` late."""
        return self.inner.heard_late_s + (self._vad_stream.latency_s if self._vad_stream is not None else 0.0)

    async def frames(self) -> AsyncIterator[HeardFrame]:
        async for heard in self.inner.frames():
            for_vad, for_asr = split_frame(heard)
            same = for_vad is for_asr
            if self._vad_stream is not None:
                for_vad = await self.worker.call(self._vad_stream.process, for_vad)
            if self._asr_stream is not None:
                # One stream cleans a frame both ears hear alike; a second, the transcribed version
                # of a frame the echo canceller cleaned two ways.
                if same and self._vad_stream is not None:
                    for_asr = for_vad
                else:
                    for_asr = await self.worker.call(self._asr_stream.process, for_asr)
            yield HeardFrame(
                for_vad=np.asarray(for_vad, np.float32),
                for_asr=np.asarray(for_asr, np.float32),
                echo_power=heard.echo_power if isinstance(heard, HeardFrame) else None,
                new_filter=isinstance(heard, HeardFrame) and heard.new_filter,
            )

    async def close(self) -> None:
        await self.inner.close()


def suppress_noise(
    source: AudioSource, denoiser: Denoiser | None, worker: Worker | None, *, feed: str
) -> AudioSource:
    """``source`` through the suppressor, when one is loaded (``denoise.engine`` is not none)."""
    if denoiser is None or worker is None:
        return source
    denoised = DenoisedSource(source, denoiser=denoiser, worker=worker, feed=feed)
    log.info(
        "%s: noise suppression on (%s for the %s, %.0f ms late)",
        source.name,
        denoiser.name,
        feed,
        denoised.latency_s * 1000,
    )
    return denoised
