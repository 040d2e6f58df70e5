"""The pipeline on the real engines (Silero VAD, Whisper, Qwen 1.5B, Piper) with real recorded speech."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.audio import ArraySource, MemorySink
from appliance.config import load_settings, override
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.trace import TIMESTAMPS, TraceStore
from appliance.trace.labels import OverlapKind
from engines.audio import load_audio_16k, resample
from engines.llm import LlmEngine, LlmOccupancy, Message
from tests.fixtures.pipeline import SILENCE_ONLY, ReactiveSource, english_words, silence

QUESTION = "speech/en/google_audio.wav"  # "how old is the Brooklyn Bridge"
INTERRUPTION = "speech/en/speechbrain_spk1_snt1.wav"  # "THE CHILD ALMOST HURT THE SMALL DOG"


def _transcribe(engines: SessionEngines, audio: np.ndarray, rate_hz: int) -> str:
    return engines.asr.transcribe(resample(audio, rate_hz, 16000)).text


def test_a_spoken_question_gets_a_spoken_english_answer(
    real_engines: SessionEngines, data_dir: Path, tmp_path: Path
) -> None:
    question = load_audio_16k(data_dir / QUESTION)
    source = ArraySource(np.concatenate([silence(0.3), question, silence(1.5)]), realtime=True)
    sink = MemorySink(real_engines.tts.sample_rate_hz, realtime=True)
    store = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    session = Session(config=SILENCE_ONLY, engines=real_engines, source=source, sink=sink, store=store)

    asyncio.run(asyncio.wait_for(session.run(max_turns=1), 300))

    (trace,) = session.turns.traces
    assert trace.error is None and not trace.cancelled
    assert "brooklyn bridge" in trace.transcript.lower()
    assert english_words(trace.reply), trace.reply
    # Whisper was sure of what it heard, and said so.
    assert trace.asr_avg_logprob is not None and -1.0 < trace.asr_avg_logprob < 0.0
    assert trace.asr_no_speech_p is not None and trace.asr_no_speech_p < 0.5
    assert trace.asr_compression_ratio is not None and trace.bundle_version == real_engines.bundle_version
    # Every timestamp is there and in order; ASR started at the first silent frame, before the
    # endpoint decision (speculative start), so the 0.5 s endpoint silence overlapped with ASR.
    assert all(getattr(trace, name) is not None for name in TIMESTAMPS), trace
    assert trace.speech_start < trace.speech_end < trace.asr_start < trace.endpoint  # type: ignore[operator]
    assert trace.asr_start < trace.asr_done <= trace.llm_first_token <= trace.first_clause  # type: ignore[operator]
    assert trace.first_clause <= trace.tts_first_audio <= trace.playback_start <= trace.turn_done  # type: ignore[operator]
    assert trace.endpoint <= trace.playback_start  # type: ignore[operator]
    assert trace.stage_s("endpoint_wait") == pytest.approx(0.5, abs=0.1)
    # The reply audio is speech: Whisper hears English words in it, and it is what was played.
    assert sink.duration_s == pytest.approx(trace.reply_audio_s, abs=0.1)
    heard = _transcribe(real_engines, sink.audio, sink.sample_rate_hz)
    assert len(english_words(heard)) >= 2, heard
    assert trace.played_reply.split() == " ".join(trace.played_reply.split()).split()
    assert store.recent(1)[0].transcript == trace.transcript
    store.close()


def test_speech_during_the_reply_interrupts_it_and_history_keeps_what_was_heard(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    question = np.concatenate([silence(0.3), load_audio_16k(data_dir / QUESTION)])
    interruption = load_audio_16k(data_dir / INTERRUPTION)
    source = ReactiveSource(question, interruption, inject_after_s=0.8, tail_s=2.0)
    sink = MemorySink(real_engines.tts.sample_rate_hz, realtime=True)
    sink_s_at_end: list[float] = []
    session = Session(
        engines=real_engines,
        source=source,
        sink=sink,
        # The model's own story, said as told (its invented figures unchecked): this is about a cut.
        config=session_config(override(load_settings(None), agent={"grounding": False})),
        on_turn=lambda trace: sink_s_at_end.append(sink.duration_s),
    )
    source.session = session

    asyncio.run(asyncio.wait_for(session.run(max_turns=1), 300))

    assert source.injected_at is not None, "the reply never started playing"
    assert session.turns.barge_ins == 1
    (trace,) = session.turns.traces
    assert trace.cancelled
    clause_words = " ".join(trace.reply.split()).split()
    heard = trace.played_reply.split()
    # Only part of the reply was heard (it stopped ~0.9 s in), and what was heard is its beginning.
    assert 0.5 <= trace.reply_audio_s <= 2.5
    assert len(heard) < len(clause_words)
    assert [w.strip(".,!?") for w in heard] == [w.strip(".,!?") for w in clause_words[: len(heard)]]
    # Playback stopped: the sink got about what was heard, not the whole reply.
    assert sink_s_at_end[0] <= trace.reply_audio_s + 0.2
    # It fell silent at the person's first voiced frames (a pause), and was cut once a second of
    # speech over it made it an interruption, not at the person's end.
    assert trace.reply_audio_s - (source.injected_at - trace.playback_start) < 0.3  # type: ignore[operator]
    assert [o["kind"] for o in trace.overlaps] == [OverlapKind.INTERRUPTION]
    assert trace.turn_done - source.injected_at < 1.6  # type: ignore[operator]
    # History: the question, and only the heard part of the answer.
    roles = [(m.role, m.content) for m in session.conversation.messages]
    assert roles[0][0] == "user" and "brooklyn" in roles[0][1].lower()
    if heard:
        assert roles[1] == ("assistant", trace.played_reply)
    else:
        assert len(roles) == 1


class _BrokenLlm:
    """The real language model's interface with a decode failure on its first reply."""

    def __init__(self, inner: LlmEngine) -> None:
        self.inner = inner
        self.failures = 1
        self.system_prompt = inner.system_prompt

    def load(self) -> None:
        return None

    def stream(self, history: Sequence[Message], **kwargs: Any) -> Iterator[str]:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("llama_decode returned -3 (injected)")
        return self.inner.stream(history, **kwargs)

    offers_tools = False

    def occupancy(self) -> LlmOccupancy:
        return self.inner.occupancy()

    def end_conversation(self, conversation: str) -> None:
        self.inner.end_conversation(conversation)

    def close(self) -> None:
        return None


def test_an_engine_failure_is_answered_with_the_spoken_fallback(
    real_engines: SessionEngines, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engines = SessionEngines.create(
        vad=real_engines.vad, asr=real_engines.asr, llm=_BrokenLlm(real_engines.llm), tts=real_engines.tts
    )
    question = load_audio_16k(data_dir / QUESTION)
    source = ArraySource(np.concatenate([silence(0.3), question, silence(1.5)]), realtime=False)
    sink = MemorySink(real_engines.tts.sample_rate_hz)
    session = Session(config=SILENCE_ONLY, engines=engines, source=source, sink=sink)
    asyncio.run(asyncio.wait_for(session.run(), 300))
    for _engine, worker in engines.pairs().values():
        worker.shutdown()

    (trace,) = session.turns.traces
    assert trace.error is not None and trace.error.startswith("llm-failed")
    assert f"turn {trace.turn_id}" in caplog.text
    heard = _transcribe(real_engines, sink.audio, sink.sample_rate_hz).lower()
    assert "sorry" in heard and "again" in heard, (
        heard
    )  # "Sorry, something went wrong. Please say that again."
    assert session.conversation.messages == ()
