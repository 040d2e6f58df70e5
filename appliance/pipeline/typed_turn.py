"""A question as text through the same answer path as a spoken one: the site's words, the facts, the
model's choice of sentence, the product's checks and the voice (into memory). For `appliance facts
test` and the answers benchmark: what a technician reads is what the kiosk would have said."""

from __future__ import annotations

import secrets

import numpy as np

from appliance.audio.files import MemorySink
from appliance.pipeline.conversation import Conversation
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.playback import Player
from appliance.pipeline.turn import Turn, TurnConfig
from appliance.trace.record import TurnTrace


async def answer_typed(
    engines: SessionEngines, config: TurnConfig, question: str, *, session_id: str = "typed"
) -> TurnTrace:
    """The trace of one turn answering ``question`` (its reply, what was chosen, declined, withheld)."""
    trace = TurnTrace(turn_id=secrets.token_hex(6), session_id=session_id)
    turn = Turn(
        engines=engines,
        player=Player(MemorySink(engines.tts.sample_rate_hz)),
        messages_for=Conversation().with_user,
        audio_16k=np.zeros(0, np.float32),
        trace=trace,
        config=config,
        tools=engines.tools,
        typed=question,
    )
    turn.confirm()
    await turn.run()
    return trace
