"""Speech segments of a whole recording: VAD probabilities run through the endpointer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engines.vad.endpointer import Endpointer, EventKind
from engines.vad.frames import FRAME_S
from engines.vad.params import EndpointerMode, EndpointerParams

__all__ = ["SpeechSegment", "speech_segments"]


@dataclass(frozen=True)
class SpeechSegment:
    start_s: float  # start of the first voiced frame (no pre-roll)
    end_s: float  # end of the last voiced frame
    forced: bool = False  # cut at max_utterance_s

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def speech_segments(
    probabilities: Iterable[float],
    params: EndpointerParams | None = None,
    *,
    threshold: float | None = None,
    frame_s: float = FRAME_S,
) -> list[SpeechSegment]:
    """Every utterance the endpointer finds in a recording, including one still open at its end
    (``threshold``: the VAD's, ``vad.threshold`` by default). Without ``params`` the silence alone
    ends an utterance: no end-of-turn model answers here."""
    endpointer = Endpointer(
        EndpointerParams(mode=EndpointerMode.SILENCE) if params is None else params, threshold=threshold
    )
    segments: list[SpeechSegment] = []
    events = []
    for probability in probabilities:
        events.extend(endpointer.feed(float(probability), frame_s))
    events.extend(endpointer.finish())
    for event in events:
        if event.kind is EventKind.ENDPOINT and event.speech_end_s is not None:
            segments.append(SpeechSegment(event.speech_start_s, event.speech_end_s, event.forced))
    return segments
