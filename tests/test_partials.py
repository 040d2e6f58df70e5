"""Thinking while the person speaks, on the real engines (Silero VAD, Whisper base int8, Qwen 1.5B,
Piper) with real recordings: partial transcripts during the utterance, the LLM prefill of their
words, and how both behave beside barge-in and another session's reply."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from appliance.audio import ArraySource, MemorySink
from appliance.config import load_settings
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.params import PartialsParams
from appliance.pipeline.partials import prefill_words, stable_prefix
from appliance.pipeline.session import Session, SessionConfig
from appliance.trace import TurnTrace
from appliance.trace.labels import OverlapKind
from engines.audio import load_audio_16k
from engines.llm import Message
from tests.fixtures.pipeline import ReactiveSource, english_words, silence

LONG_QUESTION = "speech/en/cheetah_test_en.wav"  # "Today only platforms one and three are used." 4.5 s
QUESTION = "speech/en/google_audio.wav"  # "how old is the Brooklyn Bridge"
INTERRUPTION = "speech/en/speechbrain_single-mic_example1.wav"  # "The birch canoe slid on the smooth planks"


def _config(interval_ms: int) -> SessionConfig:
    config = session_config(load_settings(None))
    return dataclasses.replace(config, partials=PartialsParams(partial_interval_ms=interval_ms))


def _evict(engines: SessionEngines) -> None:
    """Another conversation's turn in every slot, so the LLM cache holds nothing of the recording's
    words (a new session could otherwise take the slot an ended one left with them)."""
    slots = engines.llm.occupancy().slots
    for index in range(slots):
        "".join(engines.llm.stream([Message("user", "Hello.")], conversation=f"evict-{index}"))
    for index in range(slots):
        engines.llm.end_conversation(f"evict-{index}")


def _one_turn(engines: SessionEngines, audio: np.ndarray, config: SessionConfig) -> TurnTrace:
    # Frames as fast as they are read: each partial and prefill is awaited before the next frame,
    # so what they do is the same on a loaded machine as on an idle one.
    source = ArraySource(np.concatenate([silence(0.3), audio, silence(1.5)]), realtime=False)
    session = Session(
        engines=engines, source=source, sink=MemorySink(engines.tts.sample_rate_hz), config=config
    )
    asyncio.run(asyncio.wait_for(session.run(max_turns=1), 300))
    (trace,) = session.turns.traces
    return trace


def test_the_stable_words_are_those_both_partials_begin_with() -> None:
    assert stable_prefix("Today only plat", "Today only platforms one") == "Today only"
    assert stable_prefix("the birch canoe", "The birch canoe slid") == ""  # exact words only
    assert stable_prefix("How old is", "How old is") == "How old is"
    assert prefill_words("Today only", "Today only platforms one and") == "Today only platforms one"
    assert prefill_words("How old is", "How old is") == "How old is"
    assert prefill_words("", "Today") == ""


def test_partials_prefill_the_question_and_the_turn_evaluates_only_its_end(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    audio = load_audio_16k(data_dir / LONG_QUESTION)
    _evict(real_engines)
    off = _one_turn(real_engines, audio, _config(0))
    _evict(real_engines)
    on = _one_turn(real_engines, audio, _config(600))

    for trace in (off, on):
        assert trace.error is None and not trace.cancelled
        assert "platforms" in trace.transcript.lower(), trace.transcript
        assert english_words(trace.reply), trace.reply
    # Partials off is today's turn: nothing ran during the speech.
    assert (off.partials, off.prefill_tokens, off.prefill_reused) == (0, 0, 0)
    # Partials on: 4.5 s of speech gave several partials, the LLM evaluated their words during the
    # speech, and the turn found them in its cache (the engine's own counts).
    assert on.partials >= 4 and on.partial_asr_ms > 0
    assert on.prefill_tokens > 0 and 0 < on.prefill_reused <= on.prefill_tokens
    assert on.prefill_tokens - on.prefill_reused == on.prefill_discarded
    # Same audio, same prompt; after the end of speech only what the prefill did not cover is run.
    assert on.llm_prompt_tokens == off.llm_prompt_tokens
    system = real_engines.llm.system_prompt_tokens  # type: ignore[attr-defined]
    assert off.llm_evaluated_tokens == off.llm_prompt_tokens - system
    assert on.llm_evaluated_tokens <= off.llm_evaluated_tokens - on.prefill_reused
    assert on.transcript == off.transcript


def test_speech_over_the_reply_interrupts_it_and_is_itself_heard_in_partials(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    question = np.concatenate([silence(0.3), load_audio_16k(data_dir / QUESTION)])
    interruption = load_audio_16k(data_dir / INTERRUPTION)
    source = ReactiveSource(question, interruption, inject_after_s=0.5, tail_s=2.0)
    session = Session(
        engines=real_engines,
        source=source,
        sink=MemorySink(real_engines.tts.sample_rate_hz, realtime=True),
        config=_config(500),
    )
    source.session = session

    asyncio.run(asyncio.wait_for(session.run(max_turns=2), 300))

    assert session.turns.barge_ins == 1
    first, second = session.turns.traces
    assert first.cancelled and "brooklyn" in first.transcript.lower()
    # The reply fell silent as the person began (a pause) and was cut as an interruption after a
    # second of their speech, not at their end.
    assert first.reply_audio_s - (source.injected_at - first.playback_start) < 0.3  # type: ignore[operator]
    assert [o["kind"] for o in first.overlaps] == [OverlapKind.INTERRUPTION]
    assert first.turn_done - source.injected_at < 1.6  # type: ignore[operator]
    assert not second.cancelled and second.error is None
    assert "canoe" in second.transcript.lower(), second.transcript
    assert second.partials >= 2  # the interruption (3.3 s) was transcribed while it was spoken
    assert english_words(second.reply), second.reply


def test_a_partial_of_one_session_does_not_disturb_another_sessions_reply(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    question = load_audio_16k(data_dir / QUESTION)
    other = load_audio_16k(data_dir / LONG_QUESTION)

    def caller(name: str, lead_s: float, audio: np.ndarray, tail_s: float, interval_ms: int) -> Session:
        return Session(
            engines=real_engines,
            source=ArraySource(np.concatenate([silence(lead_s), audio, silence(tail_s)]), realtime=True),
            sink=MemorySink(real_engines.tts.sample_rate_hz, realtime=True),
            config=_config(interval_ms),
            session_id=name,
        )

    first = caller("caller-1", 0.3, question, 4.0, 0)
    # The second caller starts speaking as the first one's reply is being written.
    second = caller("caller-2", 2.4, other, 2.0, 400)

    async def both() -> None:
        await asyncio.gather(first.run(max_turns=1), second.run(max_turns=1))

    asyncio.run(asyncio.wait_for(both(), 300))

    (reply_turn,) = first.turns.traces
    assert reply_turn.error is None and not reply_turn.cancelled
    assert "brooklyn" in reply_turn.transcript.lower() and english_words(reply_turn.reply)
    (answered,) = second.turns.traces
    assert answered.error is None and "platforms" in answered.transcript.lower()
    assert answered.partials >= 2
    assert english_words(answered.reply)


@pytest.mark.parametrize("interval_ms", [0, 600])
def test_the_setting_reaches_the_session(interval_ms: int) -> None:
    from appliance.config import override

    settings = override(load_settings(None), partials={"partial_interval_ms": interval_ms})
    config = session_config(settings)
    assert config.partials.partial_interval_s == interval_ms / 1000.0
    assert config.partials.enabled is (interval_ms > 0)


def test_another_partial_model_is_a_second_engine_and_shown_as_one() -> None:
    from appliance.admin.daemon import engine_states
    from appliance.config import override

    settings = load_settings(None)
    assert settings.partials.separate_model(settings.asr.model) is None  # shipped: they use asr.model
    other = override(settings, asr={"model": "whisper-base"}, partials={"partial_model": "whisper-tiny-en"})
    assert other.partials.separate_model(other.asr.model) == "whisper-tiny-en"
    assert ("asr_partial", "whisper-tiny-en") in [(e.name, e.model) for e in engine_states(other)]
    off = override(other, partials={"partial_interval_ms": 0})
    assert off.partials.separate_model(off.asr.model) is None
    assert "asr_partial" not in [e.name for e in engine_states(off)]
