"""Speech over a reply on the real models, in real time: a person asks "How old is the Brooklyn
Bridge?" (a recording), and half a second into the reply they hear says "okay" (Piper), "stop" (a
recording) or a new question (a recording)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from appliance.config import load_settings, override
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.trace.labels import OverlapKind
from bench.overlap_set import CueSink, CueSource, recorded_word, spoken
from engines.audio import load_audio_16k

HOW_OLD = "speech/en/google_audio.wav"  # "How old is the Brooklyn Bridge?"
NEW_QUESTION = "speech/en/speechbrain_spk1_snt1.wav"


def _talk(
    engines: SessionEngines, question: np.ndarray, said: np.ndarray, **overlap: object
) -> tuple[Session, CueSource, CueSink]:
    # The model's answer said as it writes it (the Brooklyn Bridge's age is in no facts: checked, it
    # would be withheld): these tests are about speech over a reply, not about its figures.
    settings = override(load_settings(None), overlap=overlap, agent={"grounding": False})
    sink = CueSink(engines.tts.sample_rate_hz)
    source = CueSource(question, said, sink, after_s=0.5)
    session = Session(engines=engines, source=source, sink=sink, config=session_config(settings))
    asyncio.run(asyncio.wait_for(session.run(), 120))
    assert source.overlap_at is not None, "the reply ended before the person spoke over it"
    return session, source, sink


def test_an_okay_over_the_reply_lets_it_play_to_its_end(real_engines: SessionEngines, data_dir: Path) -> None:
    okay = spoken(real_engines.tts, "Okay.")
    session, _source, sink = _talk(real_engines, load_audio_16k(data_dir / HOW_OLD), okay)
    reply, *others = [t for t in session.turns.traces if t.transcript]
    assert [o["kind"] for o in reply.overlaps] == [OverlapKind.BACKCHANNEL]
    assert not reply.cancelled and reply.played_reply == reply.reply  # heard to its end
    assert not others, f"the okay was answered: {[t.transcript for t in others]}"
    pause = reply.overlaps[0]
    assert pause["silenced_ms"] <= 32.0  # the reply fell silent on the first voiced frame
    assert 0.0 < pause["decided_ms"] < 3000.0 and sink.flushed_at  # paused, then went on
    assert session.conversation.messages[-1].content == reply.reply


def test_stop_over_the_reply_silences_it_and_nothing_is_answered(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    stop = recorded_word(data_dir, "stop")
    session, source, sink = _talk(real_engines, load_audio_16k(data_dir / HOW_OLD), stop)
    reply, *others = [t for t in session.turns.traces if t.transcript]
    assert [o["kind"] for o in reply.overlaps] == [OverlapKind.STOP_WORD], reply.overlaps
    assert reply.cancelled and not others
    assert source.overlap_at is not None and sink.flushed_at[0] - source.overlap_at < 0.3
    assert len(reply.played_reply) < len(reply.reply)
    assert session.conversation.messages[-1].content == reply.played_reply  # the history holds what was heard


def test_a_new_question_over_the_reply_stops_it_and_is_answered(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    question = load_audio_16k(data_dir / NEW_QUESTION)
    session, _source, _sink = _talk(real_engines, load_audio_16k(data_dir / HOW_OLD), question)
    reply, *others = [t for t in session.turns.traces if t.transcript]
    assert [o["kind"] for o in reply.overlaps] == [OverlapKind.INTERRUPTION]
    assert reply.cancelled and len(others) == 1 and others[0].reply


def test_in_interrupt_mode_an_okay_stops_the_reply_as_before(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    okay = spoken(real_engines.tts, "Okay.")
    session, _source, _sink = _talk(real_engines, load_audio_16k(data_dir / HOW_OLD), okay, mode="interrupt")
    reply = next(t for t in session.turns.traces if t.transcript)
    assert reply.cancelled and not reply.overlaps
