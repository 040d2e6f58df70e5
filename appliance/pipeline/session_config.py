"""What a session is built with: each part's parameters (engine_set.session_config makes it from the
settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.params import CallParams, ConversationParams, OverlapParams, PartialsParams
from appliance.pipeline.turn import TurnConfig
from engines.vad.params import EndpointerParams
from engines.wake.params import WakeParams


@dataclass(frozen=True)
class SessionConfig:
    endpointer: EndpointerParams = field(default_factory=EndpointerParams)
    echo: EchoGate = field(default_factory=EchoGate.of)
    turn: TurnConfig = field(default_factory=TurnConfig)
    partials: PartialsParams = field(default_factory=PartialsParams)
    conversation: ConversationParams = field(default_factory=ConversationParams)
    call: CallParams = field(default_factory=CallParams)
    transfer_domain: str = ""  # where an extension of call.transfer_targets is reached (the phone system)
    overlap: OverlapParams = field(default_factory=OverlapParams)
    wake: WakeParams = field(default_factory=WakeParams)
    keep_traces: int = 100  # recent turns kept in memory on the session (all go to the store)
    drain_timeout_s: float = 300.0  # how long a turn may still run after the source ended
