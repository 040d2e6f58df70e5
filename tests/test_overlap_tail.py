"""A stop word decided at the pause inside it ("hold ... on"): the rest is not answered as a turn,
while a question right after a stop word is. Fake engines; the words come by the tone's pitch."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import numpy as np
import pytest

from appliance.audio import MemorySink
from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.overlap import rest_of_a_stop
from appliance.pipeline.params import OverlapParams
from appliance.pipeline.session import Session
from appliance.trace.labels import OverlapKind
from engines.asr import Transcript
from engines.vad.params import EndpointerParams
from tests.fixtures.pipeline import SILENCE_ONLY, FakeAsr, ReactiveSource, make_fakes, silence, tone

QUESTION_HZ, STOP_HZ, AFTER_HZ = 440.0, 660.0, 880.0
REPLY = "It is sunny and warm today, with a light breeze from the west and no rain expected at all."


@pytest.mark.parametrize("heard", ["on.", "On", "no, no.", "okay", "", "wait"])
def test_more_of_a_stop_word_is_only_more_of_it(heard: str) -> None:
    assert rest_of_a_stop(heard, OverlapParams())


@pytest.mark.parametrize("heard", ["What time is it?", "on the left, please", "hold"])
def test_anything_more_is_a_turn(heard: str) -> None:
    """("hold" alone is the start of "hold on", not its rest.)"""
    assert not rest_of_a_stop(heard, OverlapParams())


class PitchAsr(FakeAsr):
    """Writes the words of the loudest tone in the audio."""

    def __init__(self, words: dict[float, str]) -> None:
        super().__init__()
        self.words = words

    def transcribe(self, audio: np.ndarray, *, cancel: threading.Event | None = None) -> Transcript:
        spectrum = np.abs(np.fft.rfft(audio))
        pitch = float(np.argmax(spectrum)) * 16000 / max(1, len(audio))
        self.text = min(self.words.items(), key=lambda item: abs(item[0] - pitch))[1]
        return super().transcribe(audio, cancel=cancel)


def _over_a_reply(after: str) -> tuple[Session, list[str]]:
    """A question, then 0.6 s into the reply "stop", a pause, and ``after``."""
    fakes = make_fakes(REPLY)
    fakes.engines.asr = PitchAsr({QUESTION_HZ: "what is the weather like", STOP_HZ: "Stop.", AFTER_HZ: after})
    said = np.concatenate([tone(0.3, frequency_hz=STOP_HZ), silence(0.35), tone(0.5, frequency_hz=AFTER_HZ)])
    source = ReactiveSource(tone(0.8, frequency_hz=QUESTION_HZ), said, inject_after_s=0.6, tail_s=2.5)
    config = dataclasses.replace(
        SILENCE_ONLY,
        endpointer=EndpointerParams(mode="silence", end_silence_ms=400),
        echo=EchoGate(threshold=0.5, threshold_while_playing=0.5, gate_while_playing=False),
    )
    session = Session(
        engines=fakes.engines, source=source, sink=MemorySink(16000, realtime=True), config=config
    )
    source.session = session
    asyncio.run(asyncio.wait_for(session.run(), 30))
    return session, [call.history[-1].content for call in fakes.llm.calls]


def test_the_rest_of_a_stop_word_is_not_answered() -> None:
    session, asked = _over_a_reply("on.")
    reply, *others = [t for t in session.turns.traces if t.transcript]
    assert [o["kind"] for o in reply.overlaps] == [OverlapKind.STOP_WORD]
    assert reply.cancelled and not others, [t.transcript for t in others]
    assert len(asked) == 1


def test_a_question_right_after_a_stop_word_is_answered() -> None:
    session, asked = _over_a_reply("what about parking")
    reply, *others = [t for t in session.turns.traces if t.transcript]
    assert [o["kind"] for o in reply.overlaps] == [OverlapKind.STOP_WORD]
    assert [t.transcript.lower() for t in others] == ["what about parking"] and others[0].reply
    assert len(asked) == 2
