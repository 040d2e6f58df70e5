"""The composition root puts the echo canceller where ``audio.echo_cancellation`` says: the local
microphone with a speaker (auto), every call too (on), nowhere (off), with the VAD threshold that
goes with it."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np
import pytest

from appliance.audio.echo import EchoCancelledSource, TappedSink
from appliance.audio.files import ArraySource, MemorySink
from appliance.config import Settings, load_settings, override
from appliance.daemon import local_session as daemon
from appliance.engine_set import session_config
from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.session import Session
from appliance.pipeline.workers import EngineWorker
from appliance.trace.labels import SessionKind
from engines.aec import EchoCanceller
from engines.vad.params import EndpointerParams
from tests.fixtures.pipeline import SILENCE_ONLY, ReactiveSource, make_fakes, tone


def _wire(
    settings: Settings, aec_engine: EchoCanceller | None, *, kind: str, speaker: bool
) -> tuple[Any, Any, Any]:
    canceller = None if aec_engine is None else (aec_engine, EngineWorker("aec"))
    source = ArraySource(np.zeros(512 * 4, np.float32), realtime=True)
    sink = MemorySink(16000, realtime=True)
    return daemon.with_echo_cancellation(
        settings,
        canceller,
        source,
        sink,
        kind=SessionKind(kind),
        speaker=speaker,
        config=session_config(settings),
    )


def test_auto_cancels_the_local_microphone_with_a_speaker_at_the_normal_threshold(
    aec_engine: EchoCanceller,
) -> None:
    settings = load_settings(None)
    source, sink, config = _wire(settings, aec_engine, kind="microphone", speaker=True)
    assert isinstance(source, EchoCancelledSource) and isinstance(sink, TappedSink)
    assert config.echo.threshold_while_playing == settings.vad.threshold

    async def frames() -> list[Any]:
        return [frame async for frame in source.frames()]

    heard = asyncio.run(frames())
    assert len(heard) == 4 and heard[0].for_vad.shape == heard[0].for_asr.shape == (512,)


@pytest.mark.parametrize(
    ("mode", "kind", "speaker", "cancelled"),
    [
        ("auto", "sip", True, False),  # a phone cancels its own echo
        ("auto", "microphone", False, False),  # no speaker: nothing to cancel
        ("on", "sip", True, True),
        ("off", "microphone", True, False),
    ],
)
def test_the_other_sessions(
    aec_engine: EchoCanceller, mode: str, kind: str, speaker: bool, cancelled: bool
) -> None:
    settings = override(load_settings(None), audio={"echo_cancellation": mode})
    source, sink, config = _wire(settings, aec_engine, kind=kind, speaker=speaker)
    assert isinstance(source, EchoCancelledSource) is cancelled
    assert isinstance(sink, TappedSink) is cancelled
    assert config.echo.threshold_while_playing == (settings.vad.threshold if cancelled else 0.85)


def test_no_canceller_loaded_means_none_is_wired() -> None:
    source, sink, config = _wire(load_settings(None), None, kind="microphone", speaker=True)
    assert isinstance(source, ArraySource) and isinstance(sink, MemorySink)
    assert config.echo.threshold_while_playing == 0.85


class _LearningSource(ReactiveSource):
    """A person speaks over the reply while the echo canceller has or has not yet learnt the room."""

    def __init__(self, *, converged: bool) -> None:
        super().__init__(tone(0.8), tone(0.5), inject_after_s=0.6, tail_s=1.5)
        self.converged = converged

    @property
    def echo_converged(self) -> bool:
        return self.converged


@pytest.mark.parametrize("converged", [False, True])
def test_the_microphone_is_ignored_while_a_new_canceller_learns_the_room(converged: bool) -> None:
    fakes = make_fakes("It is sunny and warm today, with a light breeze from the west.")
    source = _LearningSource(converged=converged)
    config = dataclasses.replace(
        SILENCE_ONLY,
        endpointer=EndpointerParams(mode="silence", end_silence_ms=400),
        echo=EchoGate(0.5, 0.5, gate_while_playing=False),
    )
    session = Session(
        engines=fakes.engines, source=source, sink=MemorySink(16000, realtime=True), config=config
    )
    source.session = session
    asyncio.run(asyncio.wait_for(session.run(max_turns=1), 60))
    assert source.injected_at is not None
    assert session.turns.barge_ins == (1 if converged else 0)
