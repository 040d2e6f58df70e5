"""What the endpointer hears while the appliance is speaking."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from engines.params import Params
from engines.vad.params import VadParams

# Without echo cancellation the appliance's own voice reaches the microphone: only speech louder than
# the reply's echo should interrupt it (docs/echo-cancellation.md).
RAISED_THRESHOLD = 0.85


class EchoGateParams(Params):
    """The ``[vad]`` settings for the time a reply plays."""

    threshold_while_playing: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="while a reply plays; unset: vad.threshold where echo cancellation runs, "
        f"{RAISED_THRESHOLD} elsewhere (without it the microphone hears the reply)",
    )
    gate_while_playing: bool = Field(False, description="hear nothing at all while a reply plays")


@dataclass(frozen=True)
class EchoGate:
    threshold: float
    threshold_while_playing: float
    gate_while_playing: bool

    @classmethod
    def of(
        cls,
        vad: VadParams | None = None,
        params: EchoGateParams | None = None,
        *,
        echo_cancelled: bool = False,
    ) -> EchoGate:
        """With the echo cancelled, the normal threshold while a reply plays (unless
        ``threshold_while_playing`` says otherwise); without, the raised one."""
        vad = VadParams() if vad is None else vad
        params = EchoGateParams() if params is None else params
        while_playing = params.threshold_while_playing
        if while_playing is None:
            while_playing = vad.threshold if echo_cancelled else RAISED_THRESHOLD
        return cls(vad.threshold, while_playing, params.gate_while_playing)

    def threshold_for(self, playing: bool) -> float:
        return self.threshold_while_playing if playing else self.threshold

    def probability_for(self, probability: float, playing: bool) -> float:
        return 0.0 if playing and self.gate_while_playing else probability
