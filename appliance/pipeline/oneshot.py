"""A single turn through a fresh session: what ``appliance talk`` and the no-microphone demo run."""

from __future__ import annotations

import logging

from appliance.audio.base import AudioSink, AudioSource
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session, SessionConfig
from appliance.trace.record import TurnTrace
from appliance.trace.store import TraceStore

log = logging.getLogger(__name__)


async def one_turn(
    engines: SessionEngines,
    source: AudioSource,
    sink: AudioSink,
    *,
    config: SessionConfig,
    store: TraceStore | None = None,
    session_id: str | None = None,
) -> TurnTrace | None:
    """Feed ``source`` through a new session until its first turn is done (or the source ends).
    None when no speech was found."""
    session = Session(
        engines=engines, source=source, sink=sink, config=config, store=store, session_id=session_id
    )
    try:
        await session.run(max_turns=1)
    finally:
        await sink.close()
    return session.turns.traces[0] if session.turns.traces else None
