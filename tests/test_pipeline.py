"""Pipeline logic on small fakes of the engine interfaces: turn flow, speculative start, barge-in,
echo gate, engine failures. The same logic on the real engines: tests/test_pipeline_real.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from appliance.agent.params import ToolConfig
from appliance.audio import ArraySource, MemorySink
from appliance.config import AgentParams
from appliance.pipeline.conversation import Conversation
from appliance.pipeline.echo_gate import EchoGate
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.params import CallParams, ConversationParams
from appliance.pipeline.played import played_text
from appliance.pipeline.session import Session
from appliance.pipeline.turn import TurnConfig
from appliance.quality import signals as quality_signals
from appliance.trace import TIMESTAMPS, TraceStore
from appliance.trace.labels import OverlapKind
from appliance.transfer import TransferFailed
from engines.llm import Message
from engines.tts.params import TtsParams
from engines.vad.params import EndpointerParams
from tests.fixtures.pipeline import (
    SILENCE_ONLY,
    SYSTEM_PROMPT,
    FakeLlm,
    Fakes,
    ReactiveSource,
    make_fakes,
    silence,
    tone,
    tool_calling_fakes,
)

REPLY = "It is sunny and warm today, with a light breeze from the west and no rain expected at all."


def _as_asked(transcript: str) -> str:
    """A transcript as the conversation keeps it: its first letter capitalised."""
    return transcript[:1].upper() + transcript[1:]


def _run(coro: object, timeout_s: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout_s))  # type: ignore[arg-type]


def test_one_turn_flows_through_every_stage_in_order(tmp_path) -> None:
    fakes = make_fakes(REPLY)
    sink = MemorySink(16000)
    store = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    source = ArraySource(np.concatenate([silence(0.3), tone(1.0), silence(1.0)]), realtime=False)
    session = Session(config=SILENCE_ONLY, engines=fakes.engines, source=source, sink=sink, store=store)

    _run(session.run())

    assert session.turns.done == 1
    (trace,) = session.turns.traces
    assert not trace.cancelled and trace.error is None
    stamps = [getattr(trace, name) for name in TIMESTAMPS]
    assert all(s is not None for s in stamps), trace
    # asr_start comes from the speculative start and so may precede the endpoint; the rest is ordered.
    assert trace.speech_start < trace.speech_end <= trace.asr_start < trace.asr_done  # type: ignore[operator]
    assert trace.asr_done <= trace.llm_first_token <= trace.first_clause <= trace.tts_first_audio  # type: ignore[operator]
    assert trace.endpoint <= trace.playback_start <= trace.turn_done  # type: ignore[operator]
    assert trace.transcript == fakes.asr.text
    assert trace.reply == REPLY and trace.played_reply == " ".join(REPLY.split())
    # The ASR saw the tone plus pre-roll and the first silent frame: about 1.3 s, not the whole file.
    assert 1.0 <= trace.audio_s <= 1.5
    # Every word was synthesized and written to the sink, in clauses, the first one short.
    assert " ".join(fakes.tts.texts).split() == REPLY.split()
    assert len(fakes.tts.texts[0].split()) <= 6
    assert sink.duration_s == pytest.approx(len(REPLY.split()) * fakes.tts.word_s, abs=0.01)
    assert [(m.role, m.content) for m in session.conversation.messages] == [
        ("user", _as_asked(fakes.asr.text)),
        ("assistant", trace.played_reply),
    ]
    assert store.recent(1)[0].turn_id == trace.turn_id
    store.close()


def test_second_turn_sees_the_first_in_its_history() -> None:
    fakes = make_fakes("Fine, thanks.")
    audio = np.concatenate([tone(0.8), silence(1.0), tone(0.8), silence(1.0)])
    session = Session(
        config=SILENCE_ONLY,
        engines=fakes.engines,
        source=ArraySource(audio, realtime=False),
        sink=MemorySink(16000),
    )
    _run(session.run())
    assert session.turns.done == 2
    second_history = fakes.llm.calls[-1].history
    assert [(m.role, m.content) for m in second_history] == [
        ("user", _as_asked(fakes.asr.text)),
        ("assistant", "Fine, thanks."),
        ("user", _as_asked(fakes.asr.text)),
    ]


def test_speculative_start_hides_the_endpoint_wait() -> None:
    """ASR starts at the first silent frame; by the time the 0.5 s endpoint silence is confirmed it
    is done, and playback starts right at the endpoint."""
    fakes = make_fakes(REPLY)
    fakes.asr.delay_s = 0.2
    sink = MemorySink(16000, realtime=True)
    source = ArraySource(np.concatenate([tone(1.0), silence(1.5)]), realtime=True)
    session = Session(config=SILENCE_ONLY, engines=fakes.engines, source=source, sink=sink)
    _run(session.run())

    (trace,) = session.turns.traces
    assert trace.speculative
    assert trace.asr_start < trace.endpoint  # type: ignore[operator]
    assert trace.asr_done < trace.endpoint  # type: ignore[operator]
    assert trace.tts_first_audio < trace.endpoint  # type: ignore[operator]
    # Endpoint wait is the configured 0.5 s silence; playback follows the endpoint within a few frames.
    assert trace.stage_s("endpoint_wait") == pytest.approx(0.5, abs=0.08)
    assert trace.playback_start - trace.endpoint < 0.1  # type: ignore[operator]
    assert len(fakes.asr.calls) == 1


def test_resumed_speech_drops_the_speculative_turn() -> None:
    fakes = make_fakes(REPLY)
    sink = MemorySink(16000, realtime=True)
    # A 0.25 s pause (shorter than the 0.5 s endpoint silence), then more speech.
    audio = np.concatenate([tone(1.0), silence(0.25), tone(0.8), silence(1.2)])
    session = Session(
        config=SILENCE_ONLY, engines=fakes.engines, source=ArraySource(audio, realtime=True), sink=sink
    )
    _run(session.run())

    assert session.turns.dropped_speculative == 1
    assert session.turns.done == 1
    assert len(fakes.asr.calls) == 2
    assert fakes.asr.calls[0].audio_s < 1.5 < fakes.asr.calls[1].audio_s  # the second heard it all
    (trace,) = session.turns.traces
    assert trace.audio_s == pytest.approx(fakes.asr.calls[1].audio_s)
    # Nothing of the dropped turn was played: the sink holds exactly one reply.
    assert sink.duration_s == pytest.approx(len(REPLY.split()) * fakes.tts.word_s, abs=0.01)
    assert session.conversation.messages[0].content == _as_asked(fakes.asr.text)
    assert len(session.conversation.messages) == 2


def _barge_in_session(
    *, gate: bool, token_delay_s: float = 0.01
) -> tuple[Session, ReactiveSource, Fakes, MemorySink]:
    fakes = make_fakes(REPLY, token_delay_s=token_delay_s)
    sink = MemorySink(16000, realtime=True)
    source = ReactiveSource(tone(0.8), tone(0.5), inject_after_s=0.6, tail_s=1.5)
    # A first piece of more than 0.6 s of audio: with a slow fake LLM (0.15 s a token) a shorter one
    # plays out before the next clause is written, and the speech injected 0.6 s into the reply's
    # audio would come after the reply was all generated.
    turn = dataclasses.replace(SILENCE_ONLY.turn, speech=TtsParams(first_clause_words=5))
    config = dataclasses.replace(
        SILENCE_ONLY,
        endpointer=EndpointerParams(mode="silence", end_silence_ms=400),
        echo=EchoGate(threshold=0.5, threshold_while_playing=0.85, gate_while_playing=gate),
        turn=turn,
    )
    session = Session(engines=fakes.engines, source=source, sink=sink, config=config)
    source.session = session
    return session, source, fakes, sink


def test_barge_in_stops_playback_and_keeps_only_what_was_played() -> None:
    session, source, fakes, sink = _barge_in_session(gate=False)
    sink_s_after_first: list[float] = []
    session.turns.on_turn = lambda trace: sink_s_after_first.append(sink.duration_s)
    _run(session.run(max_turns=2))

    assert source.injected_at is not None
    assert session.turns.barge_ins == 1
    first = session.turns.traces[0]
    assert first.cancelled
    # Its quality signals: the reply cut by barge-in; the fake hears the same words again next.
    assert quality_signals(first) == ["barge_in"] and not first.repeated
    assert session.turns.traces[1].repeated and "repeated" in quality_signals(session.turns.traces[1])
    full_s = len(REPLY.split()) * fakes.tts.word_s
    # Speech was injected 0.6 s into playback and paused it at its first voiced frame: about 0.6 s
    # was heard, the rest (about 3.1 s) never reached the sink.
    assert 0.55 <= first.reply_audio_s <= 1.0
    assert sink_s_after_first[0] < first.reply_audio_s + 0.2 < full_s
    assert sink.flushes >= 1
    # Playback fell silent within a few frames of the speech (the reply paused; it was cut when the
    # overlap was judged an interruption).
    assert [o["kind"] for o in first.overlaps] == [OverlapKind.INTERRUPTION]
    assert first.reply_audio_s - (source.injected_at - first.playback_start) < 0.1  # type: ignore[operator]
    heard_words = first.played_reply.split()
    assert 1 <= len(heard_words) < len(REPLY.split())
    assert heard_words == REPLY.split()[: len(heard_words)]
    assert len(heard_words) == int(first.reply_audio_s / fakes.tts.word_s + 1e-6)
    messages = [(m.role, m.content) for m in session.conversation.messages]
    assert messages[:2] == [("user", _as_asked(fakes.asr.text)), ("assistant", first.played_reply)]
    # The interruption was heard as the next question, with the truncated reply in its history.
    assert fakes.llm.calls[1].history[1].content == first.played_reply


def test_barge_in_stops_the_llm_within_one_token() -> None:
    session, _source, fakes, _sink = _barge_in_session(gate=False, token_delay_s=0.15)
    _run(session.run(max_turns=1))
    _run(fakes.engines.llm_worker.call(lambda: None))  # the LLM thread has finished its job
    first_call = fakes.llm.calls[0]
    assert session.turns.traces[0].cancelled
    assert first_call.cancelled_at is not None, "generation was still running and must see the cancel"
    assert first_call.tokens < len(REPLY.split())
    # At most the token being computed when the cancel came was finished; then generation stopped.
    assert first_call.tokens_after_cancel <= 1
    assert first_call.cancelled_at - session.turns.traces[0].turn_done < 0.15 + 0.05  # type: ignore[operator]


def test_gate_while_playing_ignores_speech_over_the_reply() -> None:
    session, source, fakes, sink = _barge_in_session(gate=True)
    _run(session.run(max_turns=1))
    assert source.injected_at is not None
    assert session.turns.barge_ins == 0
    trace = session.turns.traces[0]
    assert not trace.cancelled
    assert trace.played_reply.split() == REPLY.split()
    assert sink.duration_s == pytest.approx(len(REPLY.split()) * fakes.tts.word_s, abs=0.01)


def test_threshold_is_raised_only_while_playing() -> None:
    gate = EchoGate(threshold=0.5, threshold_while_playing=0.85, gate_while_playing=False)
    assert gate.threshold_for(False) == 0.5 and gate.threshold_for(True) == 0.85
    assert gate.probability_for(0.9, True) == 0.9
    gated = EchoGate(0.5, 0.85, gate_while_playing=True)
    assert gated.probability_for(0.99, True) == 0.0 and gated.probability_for(0.99, False) == 0.99


def test_an_engine_failure_says_the_fallback_and_the_session_keeps_listening(caplog) -> None:
    fakes = make_fakes("All good now.", fail_times=1)
    sink = MemorySink(16000)
    audio = np.concatenate([tone(0.8), silence(1.0), tone(0.8), silence(1.0)])
    config = SILENCE_ONLY
    session = Session(
        engines=fakes.engines, source=ArraySource(audio, realtime=False), sink=sink, config=config
    )
    _run(session.run())

    assert session.turns.done == 2
    failed, ok = session.turns.traces
    assert failed.error is not None and failed.error.startswith("llm-failed")
    assert f"turn {failed.turn_id}" in caplog.text and "injected" in caplog.text
    assert config.turn.replies.fallback_reply in fakes.tts.texts
    assert ok.error is None and ok.played_reply == "All good now."
    # The failed turn left no trace in the conversation.
    assert [(m.role, m.content) for m in session.conversation.messages] == [
        ("user", _as_asked(fakes.asr.text)),
        ("assistant", "All good now."),
    ]


def test_silence_and_noise_start_no_turn() -> None:
    fakes = make_fakes()
    rng = np.random.default_rng(0)
    quiet_noise = (rng.standard_normal(16000 * 2) * 0.005).astype(np.float32)
    session = Session(
        config=SILENCE_ONLY,
        engines=fakes.engines,
        source=ArraySource(quiet_noise, realtime=False),
        sink=MemorySink(16000),
    )
    _run(session.run())
    assert session.turns.done == 0 and not fakes.asr.calls


def test_stop_event_cancels_a_running_turn() -> None:
    fakes = make_fakes(REPLY, token_delay_s=0.2)
    sink = MemorySink(16000, realtime=True)
    audio = np.concatenate([tone(0.8), silence(10.0)])
    session = Session(
        config=SILENCE_ONLY, engines=fakes.engines, source=ArraySource(audio, realtime=True), sink=sink
    )

    async def main() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(session.run(stop=stop))
        while not session.turns.playing:
            await asyncio.sleep(0.02)
        stop.set()
        started = time.monotonic()
        await task
        return time.monotonic() - started

    took_s = asyncio.run(asyncio.wait_for(main(), 20))
    assert took_s < 0.5
    assert session.turns.traces[0].cancelled


def test_two_sessions_share_the_engines_at_once() -> None:
    fakes = make_fakes("Hello there.")
    sinks = [MemorySink(16000), MemorySink(16000)]
    sessions = [
        Session(
            config=SILENCE_ONLY,
            engines=fakes.engines,
            source=ArraySource(np.concatenate([tone(seconds), silence(1.0)]), realtime=True),
            sink=sink,
            session_id=f"call-{i}",
        )
        for i, (seconds, sink) in enumerate(zip((0.6, 0.9), sinks, strict=True))
    ]

    async def both() -> None:
        await asyncio.gather(*(s.run() for s in sessions))

    _run(both())
    for session, sink in zip(sessions, sinks, strict=True):
        assert session.turns.done == 1
        assert session.turns.traces[0].session_id == session.session_id
        assert sink.duration_s == pytest.approx(2 * fakes.tts.word_s, abs=0.01)
        assert len(session.conversation.messages) == 2  # each session has its own history
    assert len(fakes.llm.calls) == 2 and all(len(c.history) == 1 for c in fakes.llm.calls)
    # Each conversation is its own to the LLM (its cache slot), and given up when the session ends.
    assert sorted(c.conversation or "" for c in fakes.llm.calls) == ["call-0", "call-1"]
    assert sorted(fakes.llm.ended) == ["call-0", "call-1"]


def test_a_turn_that_must_wait_for_the_llm_says_so_first() -> None:
    fakes = make_fakes("The canteen opens at eight.")
    fakes.llm.full = True
    sink = MemorySink(16000)
    session = Session(
        engines=fakes.engines,
        source=ArraySource(np.concatenate([tone(0.8), silence(1.0)]), realtime=False),
        sink=sink,
        config=dataclasses.replace(
            SILENCE_ONLY, turn=TurnConfig(replies=ConversationParams(busy_reply="One moment, please."))
        ),
    )
    _run(session.run())
    (trace,) = session.turns.traces
    assert trace.busy_reply and trace.error is None
    assert fakes.tts.texts[0] == "One moment, please."
    assert trace.reply == "The canteen opens at eight."  # the model's words, the busy line apart
    assert trace.played_reply.startswith("One moment, please.")  # what the person heard, in order
    assert sink.duration_s == pytest.approx(8 * fakes.tts.word_s, abs=0.01)


def test_a_reply_reading_out_the_system_prompt_is_cut_and_the_fallback_said_instead() -> None:
    """A small model that answers with its own prompt: it is cut within the first clause or two (the
    first is spoken before the next shows what it is)."""
    fakes = make_fakes(f"{SYSTEM_PROMPT} Sorry.")
    sink = MemorySink(16000, realtime=False)
    session = Session(
        config=SILENCE_ONLY,
        engines=fakes.engines,
        source=ArraySource(np.concatenate([silence(0.3), tone(1.0), silence(1.0)]), realtime=False),
        sink=sink,
    )
    _run(session.run())
    (trace,) = session.turns.traces
    assert trace.played_reply.endswith(ConversationParams().fallback_reply)
    assert "assistant on a device" not in trace.played_reply
    assert [w["why"] for w in trace.withheld] == ["internal"]


def test_played_text_counts_whole_clauses_then_whole_words() -> None:
    clauses = ["The bridge opened", "in eighteen eighty three,", "so it is old."]
    samples = [300, 400, 400]
    assert played_text(clauses, samples, 0) == ""
    assert played_text(clauses, samples, 299) == "The bridge"  # 2.99 of 3 words: round down
    assert played_text(clauses, samples, 300) == "The bridge opened"
    assert played_text(clauses, samples, 500) == "The bridge opened in eighteen"
    assert played_text(clauses, samples, 10_000) == " ".join(clauses)
    # A clause still being synthesized (0 samples known) counts as not heard.
    assert played_text([*clauses, "More"], [*samples, 0], 10_000) == " ".join(clauses)


def test_conversation_is_bounded_and_merges_an_unanswered_question() -> None:
    conversation = Conversation(max_messages=4)
    conversation.commit("first question", "")  # interrupted before anything was heard
    assert conversation.with_user("second question")[-1] == Message("user", "First question second question")
    conversation.commit("second question", "an answer")
    conversation.commit("third", "another")
    conversation.commit("fourth", "more")
    messages = conversation.messages
    assert len(messages) == 4 and messages[0] == Message("user", "Third")
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]


class _FakeCall:
    """Implements the SIP layer's call audio interface over an array, paced like RTP."""

    call_id = "c1"
    sample_rate_hz = 16000

    def __init__(self, audio: np.ndarray) -> None:
        self.audio = audio
        self.queued: list[np.ndarray] = []
        self.flushed_s = 0.0
        self.keys_pressed: list[str] = []

    async def frames(self) -> AsyncIterator[np.ndarray]:
        async for frame in ArraySource(self.audio, realtime=True).frames():
            yield frame

    def play(self, audio: np.ndarray) -> None:
        self.queued.append(audio)

    def flush(self) -> float:
        dropped = sum(len(a) for a in self.queued) / self.sample_rate_hz
        self.flushed_s += dropped
        return dropped


def test_a_call_is_a_session_whose_reply_is_queued_for_the_caller() -> None:
    from appliance.audio.call import call_session_kwargs

    fakes = make_fakes("Thanks for calling.")
    call = _FakeCall(np.concatenate([tone(0.6), silence(2.0)]))  # the caller stays until the answer is out
    session = Session(config=SILENCE_ONLY, engines=fakes.engines, **call_session_kwargs(call))
    _run(session.run())
    assert session.session_id == "call-c1" and session.turns.done == 1
    assert sum(len(a) for a in call.queued) / 16000 == pytest.approx(3 * fakes.tts.word_s, abs=0.01)
    assert session.turns.traces[0].played_reply == "Thanks for calling."


def test_a_turn_still_playing_when_the_caller_hangs_up_is_stored_with_what_was_played(tmp_path) -> None:
    """The source ends (the call hung up) while the reply plays in real time, and the session is then
    stopped, as the SIP server does after its grace: the turn is logged and stored, outcome 'hangup',
    with only the words that were played."""
    fakes = make_fakes(REPLY)
    sink = MemorySink(16000, realtime=True)
    store = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    source = ArraySource(np.concatenate([silence(0.3), tone(1.0), silence(0.8)]), realtime=True)
    session = Session(
        config=SILENCE_ONLY, engines=fakes.engines, source=source, sink=sink, store=store, session_id="call-1"
    )

    async def hang_up() -> None:
        task = asyncio.create_task(session.run())
        await asyncio.sleep(3.0)  # the source ended at 2.1 s; the 3.8 s reply is still playing
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    _run(hang_up())
    (stored,) = store.recent(5)
    assert stored.outcome == "hangup" and stored.cancelled and stored.session_id == "call-1"
    assert stored.reply == REPLY
    played = stored.played_reply.split()
    assert 0 < len(played) < len(REPLY.split()) and REPLY.startswith(" ".join(played))
    store.close()


class _ScriptedDetector:
    """The turn detector's interface: a fixed answer (or a failure) after ``delay_s``."""

    def __init__(self, answer: float | Exception, delay_s: float = 0.0) -> None:
        self.answer, self.delay_s, self.calls = answer, delay_s, 0

    def load(self) -> None:
        return None

    def complete_probability(self, audio_16k: np.ndarray) -> float:
        self.calls += 1
        time.sleep(self.delay_s)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        return None


def _smart_session(detector: _ScriptedDetector, audio: np.ndarray, *, realtime: bool) -> Session:
    fakes = make_fakes(REPLY)
    engines = SessionEngines.create(vad=fakes.vad, asr=fakes.asr, llm=fakes.llm, tts=fakes.tts, turn=detector)
    params = EndpointerParams(turn_incomplete_threshold=0.1, judge_words=False)  # else as shipped
    return Session(
        engines=engines,
        source=ArraySource(audio, realtime=realtime),
        sink=MemorySink(16000),
        config=dataclasses.replace(SILENCE_ONLY, endpointer=params),
    )


def test_a_failing_turn_detector_ends_the_turn_on_silence(caplog) -> None:
    detector = _ScriptedDetector(RuntimeError("onnxruntime: bad allocation (injected)"))
    session = _smart_session(
        detector, np.concatenate([silence(0.3), tone(1.0), silence(1.5)]), realtime=False
    )
    _run(session.run())

    (trace,) = session.turns.traces
    assert trace.endpoint_by == "silence" and trace.turn_check_failed == 1 and detector.calls == 1
    assert trace.error is None and trace.reply == REPLY
    assert "the turn detector failed" in caplog.text


def test_a_verdict_still_out_when_speech_resumes_is_ignored() -> None:
    # The check at 160 ms of the first pause takes 0.4 s; speech resumes 0.3 s into the pause, so
    # the "finished" answer about the pause arrives after it is over and must not end the turn.
    detector = _ScriptedDetector(0.99, delay_s=0.4)
    audio = np.concatenate([silence(0.3), tone(0.8), silence(0.3), tone(0.8), silence(1.5)])
    session = _smart_session(detector, audio, realtime=True)
    _run(session.run())

    (trace,) = session.turns.traces
    assert session.turns.done == 1 and session.turns.dropped_speculative == 1
    assert trace.endpoint_by == "smart_turn" and trace.turn_checks == 2
    assert trace.audio_s > 1.8  # both halves reached the ASR


class _CallLikeSource(ArraySource):
    ends_with_listener = True  # as appliance.audio.call.CallSource: its end means the caller is gone


LONG_REPLY = " ".join(["word"] * 200) + "."


def _long_reply_session(tmp_path, source: ArraySource) -> tuple[Session, TraceStore]:
    """A session answering a 1 s question with a 200-word reply (~10 s of audio), turns stored."""
    store = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    fakes = make_fakes(LONG_REPLY, token_delay_s=0.05)
    sink = MemorySink(16000, realtime=True)
    return Session(config=SILENCE_ONLY, engines=fakes.engines, source=source, sink=sink, store=store), store


def test_stopping_a_session_mid_reply_cuts_the_turn_at_once_and_keeps_it(tmp_path) -> None:
    source = ArraySource(np.concatenate([silence(0.3), tone(1.0), silence(10.0)]), realtime=True)
    session, store = _long_reply_session(tmp_path, source)

    async def stop_while_speaking() -> float:
        task = asyncio.create_task(session.run())
        while not session.turns.playing:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        started = time.monotonic()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    took_s = asyncio.run(asyncio.wait_for(stop_while_speaking(), 30))
    (stored,) = store.recent(5)
    assert stored.outcome == "stopped" and stored.cancelled, stored
    assert 0 < len(stored.played_reply.split()) < 200
    assert took_s < 5.0  # not the ~10 s the rest of the reply would have taken to play
    store.close()


def test_a_call_that_ends_cuts_its_turn_at_once_instead_of_playing_to_nobody(tmp_path) -> None:
    source = _CallLikeSource(np.concatenate([silence(0.3), tone(1.0), silence(2.0)]), realtime=True)
    session, store = _long_reply_session(tmp_path, source)
    started = time.monotonic()
    _run(session.run())

    (stored,) = store.recent(5)
    assert stored.outcome == "hangup" and stored.cancelled, stored
    assert time.monotonic() - started < 6.0  # the source ended at 3.3 s; the reply would take ~10 s more
    store.close()


class _SuppressedSilenceSource(_CallLikeSource):
    """A phone with silence suppression: it sends the question, then nothing while the caller is
    quiet, and the call stays up."""

    def __init__(self, audio: np.ndarray) -> None:
        super().__init__(audio, realtime=True)
        self.hung_up = asyncio.Event()

    async def frames(self) -> AsyncIterator[np.ndarray]:
        async for frame in super().frames():
            yield frame
        await self.hung_up.wait()


def test_a_turn_is_finished_and_stored_while_a_quiet_caller_sends_no_audio(tmp_path) -> None:
    """No frames after the question: the reply plays out and the turn is recorded then, not when the
    caller next speaks or hangs up."""
    source = _SuppressedSilenceSource(np.concatenate([silence(0.3), tone(1.0), silence(0.8)]))
    store = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    session = Session(
        config=SILENCE_ONLY,
        engines=make_fakes(REPLY).engines,
        source=source,
        sink=MemorySink(16000, realtime=True),
        store=store,
    )

    async def call() -> int:
        task = asyncio.create_task(session.run())
        for _ in range(200):  # the reply takes ~4 s to play
            if store.count():
                break
            await asyncio.sleep(0.05)
        stored_while_up = store.count()
        source.hung_up.set()
        await task
        return stored_while_up

    assert asyncio.run(asyncio.wait_for(call(), 30)) == 1
    (stored,) = store.recent(5)
    assert stored.outcome == "" and not stored.cancelled and stored.played_reply == REPLY
    store.close()


# --- the words' verdict from the reply LLM --------------------------------------------------------


def _words_session(
    detector: _ScriptedDetector, llm_p: float | None, *, busy: bool = False, first_token_s: float = 0.1
) -> tuple[Session, Fakes]:
    fakes = make_fakes(REPLY, end_of_message_p=llm_p, first_token_s=first_token_s)
    fakes.llm.full = busy  # as if another call's reply held the only slot
    engines = SessionEngines.create(vad=fakes.vad, asr=fakes.asr, llm=fakes.llm, tts=fakes.tts, turn=detector)
    # As shipped (smart_turn, the words judged, 0.9 / 0.35 / 0.02, words waited for 1 s) but for these:
    params = EndpointerParams(
        turn_incomplete_threshold=0.1,
        incomplete_silence_ms=1200,
        words_incomplete_silence_ms=1200,
        words_unsure_silence_ms=500,
    )
    audio = np.concatenate([silence(0.3), tone(1.0), silence(2.0)])
    session = Session(
        engines=engines,
        source=ArraySource(audio, realtime=True),
        sink=MemorySink(16000),
        config=dataclasses.replace(SILENCE_ONLY, endpointer=params),
    )
    return session, fakes


def test_unfinished_words_hold_a_turn_that_sounds_finished() -> None:
    """The sound says finished (0.99), the reply model's words say not (P = 0.001, "... out of the"):
    the turn waits the long silence instead of ending at the check."""
    session, _fakes = _words_session(_ScriptedDetector(0.99), 0.001)
    _run(session.run())
    (trace,) = session.turns.traces
    assert trace.endpoint_by == "incomplete_silence" and trace.words_complete_p == 0.001
    assert (trace.stage_s("endpoint_wait") or 0.0) > 1.1


def test_finished_words_and_sound_end_the_turn_together() -> None:
    session, _fakes = _words_session(_ScriptedDetector(0.99), 0.8)
    _run(session.run())
    (trace,) = session.turns.traces
    assert trace.endpoint_by == "fused" and trace.words_complete_p == 0.8 and trace.turn_complete_p == 0.99
    assert (trace.stage_s("endpoint_wait") or 9.0) < 0.6


def test_with_the_llm_busy_or_not_judging_the_sound_decides_alone_and_nothing_waits() -> None:
    """Another call's reply holds the model (its prompt would wait), or the model does not judge turns
    (a site server, a template of its own): exactly as without the words, the check ends the turn."""
    for busy, llm_p in ((True, 0.001), (False, None)):
        session, _fakes = _words_session(_ScriptedDetector(0.99), llm_p, busy=busy, first_token_s=0.8)
        _run(session.run())
        (trace,) = session.turns.traces
        assert trace.endpoint_by == "smart_turn" and trace.words_complete_p is None, (busy, trace)
        assert (trace.stage_s("endpoint_wait") or 9.0) < 0.5  # not held for the slow first token


class _KeypadSource(ArraySource):
    """Audio fed in real time; once the session speaks for ``after_s``, ``keys`` are pressed on the
    keypad, one each ``gap_s`` (a caller typing while the reply plays)."""

    def __init__(self, audio: np.ndarray, keys: str, *, after_s: float, gap_s: float = 0.1) -> None:
        super().__init__(audio, realtime=True)
        self.keys, self.after_s, self.gap_s = keys, after_s, gap_s
        self.session: Session | None = None
        self.started: float | None = None
        self.first_key_at: float | None = None

    async def transfer(self, uri: str) -> None:
        raise TransferFailed("no transfers here")

    def pressed(self) -> list[str]:
        assert self.session is not None
        now = time.monotonic()
        if self.started is None and self.session.turns.playing:
            self.started = now
        if self.started is None or now - self.started < self.after_s or not self.keys:
            return []
        if self.first_key_at is None:
            self.first_key_at = now
        pressed = self.keys[: 1 + int((now - self.first_key_at) / self.gap_s)]
        due, self.keys = pressed, self.keys[len(pressed) :]
        return list(due)


@pytest.mark.parametrize(("keys", "ended_by"), [("4719#", "#"), ("4719", "the pause")])
def test_keys_typed_during_a_reply_cut_it_and_are_answered_as_a_turn(keys: str, ended_by: str) -> None:
    fakes = make_fakes(REPLY)
    source = _KeypadSource(np.concatenate([tone(0.6), silence(5.0)]), keys, after_s=0.3)
    config = dataclasses.replace(SILENCE_ONLY, call=CallParams(keypad_timeout_ms=800))
    session = Session(
        engines=fakes.engines,
        source=source,
        sink=MemorySink(16000, realtime=True),
        config=config,
        call=source,
    )
    source.session = session
    _run(session.run(max_turns=2))

    spoken, typed = session.turns.traces
    assert spoken.cancelled and session.turns.barge_ins == 1  # the first key cut the reply
    assert typed.transcript == "Typed on the phone's keypad: 4719" and typed.endpoint_by == "keypad"
    assert typed.reply == REPLY and not typed.cancelled and len(fakes.asr.calls) == 1  # no ASR for keys
    waited = typed.stage_s("turn_latency")
    assert waited is not None  # from the # (or the end of the pause) to the reply's first audio
    assert session.conversation.messages[-2].content == "Typed on the phone's keypad: 4719"
    # The model read the number while it was typed: the prompt so far, one prefill at a time.
    typed_so_far = [history[-1].content for history in fakes.llm.prefills]
    assert typed_so_far and typed_so_far[0] == "Typed on the phone's keypad: 4", typed_so_far
    assert all("4719".startswith(text.rsplit(" ", 1)[1]) for text in typed_so_far), typed_so_far


class _CallAudioArray(ArraySource):
    """Audio fed in real time whose end would be the caller hanging up (a call's source), and the
    call's line: no keys pressed, no transfer answered."""

    ends_with_listener = True

    def pressed(self) -> list[str]:
        return []

    async def transfer(self, uri: str) -> None:
        raise TransferFailed("no transfers here")


def test_a_silent_caller_is_asked_once_whether_they_are_there_then_the_call_ends() -> None:
    fakes = make_fakes(REPLY)
    source = _CallAudioArray(np.concatenate([tone(0.6), silence(30.0)]), realtime=True)
    call = CallParams(silence_prompt_s=1.0, silence_hangup_s=1.0, silence_prompt="Hello, are you there?")
    session = Session(
        engines=fakes.engines,
        source=source,
        sink=MemorySink(16000, realtime=True),
        config=dataclasses.replace(SILENCE_ONLY, call=call),
        call=source,
    )
    started = time.monotonic()
    _run(session.run())  # ends by itself, long before the 30 s of silence
    took = time.monotonic() - started

    answered, prompt = session.turns.traces
    assert answered.reply == REPLY
    assert prompt.endpoint_by == "silence_prompt" and prompt.reply == "Hello, are you there?"
    assert prompt.transcript == "" and prompt.reply_audio_s > 0  # said, nothing heard
    assert took < 15.0 and len(fakes.llm.calls) == 1  # the prompt is no model turn


@pytest.mark.parametrize("on_call", [True, False])
def test_the_model_ends_a_call_after_its_goodbye_and_a_kiosk_keeps_listening(on_call: bool) -> None:
    fakes = tool_calling_fakes(
        '{"name": "end_call", "arguments": {}}',
        "Goodbye, and have a nice day.",
        ToolConfig(name="end_call", kind="end_call", description="end the phone call after a goodbye"),
    )
    audio = np.concatenate([tone(0.6), silence(8.0)])
    source = _CallAudioArray(audio, realtime=True) if on_call else ArraySource(audio, realtime=True)
    session = Session(
        engines=fakes.engines,
        source=source,
        sink=MemorySink(16000, realtime=True),
        config=SILENCE_ONLY,
        call=source if isinstance(source, _CallAudioArray) else None,
    )
    started = time.monotonic()
    _run(session.run(max_turns=None if on_call else 1))
    (trace,) = session.turns.traces
    assert trace.tool_calls == ["end_call"] and trace.reply == AgentParams().goodbye_reply  # not the model's
    assert not trace.cancelled and trace.reply_audio_s > 0  # the goodbye was played before the end
    if on_call:
        assert time.monotonic() - started < 6.0  # ended by the agent, not by the end of the audio


class _TransferringCall(_CallAudioArray):
    """A call's source whose transfers go to ``transfers`` and answer ``why`` (None: done)."""

    def __init__(self, audio: np.ndarray, why: str | None) -> None:
        super().__init__(audio, realtime=True)
        self.why = why
        self.transfers: list[str] = []

    async def transfer(self, uri: str) -> None:
        self.transfers.append(uri)
        if self.why is not None:
            raise TransferFailed(self.why)


def _transfer_session(
    heard: str, then: str, why: str | None, *, seconds: float
) -> tuple[Session, _TransferringCall, Fakes]:
    """A call whose person said ``heard`` and whose model calls the transfer tool, then says ``then``."""
    fakes = tool_calling_fakes(
        '{"name": "transfer_call", "arguments": {"destination": "front desk"}}',
        then,
        ToolConfig(name="transfer_call", kind="transfer", description="put the caller through to a person"),
        transfer_targets=("front desk",),
        heard=heard,
    )
    source = _TransferringCall(np.concatenate([tone(0.6), silence(seconds)]), why)
    call = CallParams(transfer_targets={"front desk": "sip:2000@10.20.0.2"})
    session = Session(
        engines=fakes.engines,
        source=source,
        sink=MemorySink(16000, realtime=True),
        config=dataclasses.replace(SILENCE_ONLY, call=call),
        call=source,
    )
    return session, source, fakes


def test_a_transfer_the_person_did_not_ask_for_is_not_made() -> None:
    """Asked "What tools can you call? Answer in JSON.", a model called the transfer tool and a real
    REFER went out. The product, not the prompt, decides: no transfer, the call goes on."""
    session, source, fakes = _transfer_session(
        "What tools can you call? Answer in JSON.",
        "I can answer questions about the site.",
        None,
        seconds=4.0,
    )
    _run(session.run(max_turns=1))
    (trace,) = session.turns.traces
    assert source.transfers == []
    assert trace.tool_calls == ["refused:not_asked:transfer_call"]
    assert trace.reply == "I can answer questions about the site."
    model = fakes.engines.llm
    assert isinstance(model, FakeLlm)
    assert "did not ask to be put through" in model.calls[1].history[-1].content


@pytest.mark.parametrize("why", [None, "the phone system refused the transfer (403 Forbidden)"])
def test_the_model_puts_the_caller_through_after_saying_so(why: str | None) -> None:
    session, source, _ = _transfer_session(
        "Could you put me through to the front desk, please?",
        "I will put you through to the front desk.",
        why,
        seconds=6.0,
    )
    _run(session.run(max_turns=None if why is None else 2))
    asked = session.turns.traces[0]
    assert (
        asked.tool_calls == ["transfer_call"] and asked.reply == "I'll put you through to the front desk."
    )  # call.transfer_preamble, not the model
    assert source.transfers == ["sip:2000@10.20.0.2"]
    if why is None:
        assert len(session.turns.traces) == 1  # put through: the session ended the call
    else:
        assert (
            session.turns.traces[1].reply == "Sorry, I could not put you through to the front desk just now."
        )
