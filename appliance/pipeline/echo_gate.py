"""What the endpointer hears while the appliance is speaking."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from engines.params import Params
from engines.vad.params import VadParams

# Without echo cancellation the appliance's own voice reaches the microphone: only speech louder than
# the reply's echo should interrupt it (docs/echo-cancellation.md).
RAISED_THRESHOLD = 0.85
LINEAR_THRESHOLD = 0.85  # appliance/pipeline/linear_ear.py


class EchoGateParams(Params):
    """What the VAD hears while a reply plays (without echo cancellation the microphone hears the reply)."""

    threshold_while_playing: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="while a reply plays; unset: vad.threshold where echo cancellation runs, "
        f"{RAISED_THRESHOLD} elsewhere (without it the microphone hears the reply)",
    )
    gate_while_playing: bool = Field(False, description="hear nothing at all while a reply plays")
    linear_ear: bool = Field(
        True,
        description="behind the echo canceller, while a reply plays: the VAD also hears the linear canceller's "
        "output, where a voice stands out of the echo (a short word the suppressor hides); false: the "
        "suppressor's output alone",
    )
    linear_threshold_while_playing: float = Field(
        LINEAR_THRESHOLD, gt=0.0, le=1.0, description="the linear ear's threshold (echo_gate.linear_ear)"
    )


@dataclass(frozen=True)
class EchoGate:
    threshold: float
    threshold_while_playing: float
    gate_while_playing: bool
    linear_threshold: float | None = None  # the linear ear's (behind the echo canceller only)

    @classmethod
    def of(
        cls,
        vad: VadParams | None = None,
        params: EchoGateParams | None = None,
        *,
        echo_cancelled: bool = False,
    ) -> EchoGate:
        """With the echo cancelled, the normal threshold while a reply plays (unless
        ``threshold_while_playing`` says otherwise) and the linear ear; without, the raised one."""
        vad = VadParams() if vad is None else vad
        params = EchoGateParams() if params is None else params
        while_playing = params.threshold_while_playing
        if while_playing is None:
            while_playing = vad.threshold if echo_cancelled else RAISED_THRESHOLD
        linear = params.linear_threshold_while_playing if echo_cancelled and params.linear_ear else None
        return cls(vad.threshold, while_playing, params.gate_while_playing, linear)

    def threshold_for(self, playing: bool) -> float:
        return self.threshold_while_playing if playing else self.threshold

    def probability_for(self, probability: float, playing: bool) -> float:
        return 0.0 if playing and self.gate_while_playing else probability
