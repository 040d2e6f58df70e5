"""Turn-taking with the shipped endpointer (smart_turn, the words judged by the reply LLM) on the real
engines and real speech: a finished question ends at the first check, a pause after "the" or in the
middle of a sentence is answered once, as a whole; without the words the sound decides alone; silence
mode still ends turns on silence alone."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from appliance.audio import ArraySource, MemorySink
from appliance.config import load_settings, override
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from bench.turn_set import background, quietest_near
from engines.audio import load_audio_16k
from engines.llm import LlmEngine, Message

SENTENCE = "speech/en/speechbrain_spk1_snt2.wav"  # "DROP THE TWO WHEN | YOU ADD THE FIGURES"
HOW_OLD = "speech/en/google_audio.wav"  # "How old is the Brooklyn Bridge?"
SUNDAY = "speech/en/speechbrain_spk1_snt5.wav"  # "Sunday is the | best part of the week"
SUNDAY_THE_ENDS_S = 1.06  # Whisper's end of "the"
CARDS = "speech/en/pocketsphinx_cards_005.wav"  # "8 of spades, 4 of | clubs, 7 of hearts"
CARDS_OF_ENDS_S = 1.62  # Whisper's end of the second "of"
CUT_S = 1.56  # the word boundary after "when" (Whisper's word times, see tests/test_turn_detector.py)


def _run(
    engines: SessionEngines,
    audio: np.ndarray,
    mode: str = "smart_turn",
    *,
    realtime: bool = False,
    **endpointer: object,
) -> Session:
    """A session over ``audio``: as fast as it is taken (each pause's verdicts come before the next
    frame), or ``realtime`` as a microphone feeds it (the verdicts come when this machine gives them)."""
    settings = override(load_settings(None), endpointer={"mode": mode, **endpointer})
    session = Session(
        engines=engines,
        source=ArraySource(audio, realtime=realtime),
        sink=MemorySink(engines.tts.sample_rate_hz),
        config=session_config(settings),
    )
    asyncio.run(asyncio.wait_for(session.run(), 300))
    return session


def _sentence(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    speech = load_audio_16k(data_dir / SENTENCE)
    return speech, background(speech, 2.5, np.random.default_rng(0))


def test_a_finished_sentence_ends_at_the_first_check(real_engines: SessionEngines, data_dir: Path) -> None:
    """ "How old is the Brooklyn Bridge?": the words say finished (the reply model's P about 0.9) and the
    turn ends at the sound's first check, by both verdicts."""
    speech = load_audio_16k(data_dir / HOW_OLD)
    _, quiet = _sentence(data_dir)  # a quiet room (this recording's own background starts a turn)
    session = _run(real_engines, np.concatenate([quiet[:8000], speech, quiet]))

    (trace,) = session.turns.traces
    assert trace.endpoint_by == "fused", trace
    assert (trace.turn_checks, trace.turn_check_failed) == (1, 0)
    assert trace.turn_complete_p is not None and trace.turn_check_ms is not None and trace.turn_check_ms > 0
    assert trace.words_complete_p is not None and trace.words_complete_p >= 0.35, trace
    assert "brooklyn" in trace.transcript.lower(), trace.transcript


def test_the_sound_decides_alone_when_the_words_are_not_judged(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    """judge_words = false (as with a site server or a model without its own template): exactly the
    sound's rule, and no words' verdict on the trace."""
    speech, quiet = _sentence(data_dir)
    session = _run(real_engines, np.concatenate([quiet[:8000], speech, quiet]), judge_words=False)

    (trace,) = session.turns.traces
    assert trace.endpoint_by == "smart_turn" and trace.words_complete_p is None, trace
    assert trace.turn_complete_p is not None and trace.turn_complete_p >= 0.9
    assert "figures" in trace.transcript.lower(), trace.transcript


def test_a_pause_in_the_middle_is_not_taken_for_the_end(real_engines: SessionEngines, data_dir: Path) -> None:
    speech, quiet = _sentence(data_dir)
    cut = round(CUT_S * 16000)
    pause = quiet[:11200]  # 0.7 s of the recording's own background: longer than end_silence_ms
    session = _run(real_engines, np.concatenate([quiet[:8000], speech[:cut], pause, speech[cut:], quiet]))

    (trace,) = session.turns.traces  # one turn: the sentence was answered once, as a whole
    assert session.turns.done == 1
    assert (
        session.turns.dropped_speculative >= 1
    )  # the turn started at the pause was dropped when speech resumed
    words = trace.transcript.lower()
    assert "drop" in words and "figures" in words, trace.transcript
    # The whole sentence then ends on the second pause's verdicts: at once when sure, else after a silence.
    assert trace.turn_checks >= 2 and trace.endpoint_by in {"fused", "silence"}, trace


def test_silence_mode_ends_the_pause_as_a_turn(real_engines: SessionEngines, data_dir: Path) -> None:
    speech, quiet = _sentence(data_dir)
    cut = round(CUT_S * 16000)
    pause = quiet[:11200]
    session = _run(
        real_engines, np.concatenate([quiet[:8000], speech[:cut], pause, speech[cut:], quiet]), mode="silence"
    )

    assert session.turns.done == 2  # what the fixed 500 ms does to a 0.7 s pause: two turns
    assert all(t.endpoint_by == "silence" and t.turn_checks == 0 for t in session.turns.traces)


def _paused(data_dir: Path, recording: str, cut_s: float) -> np.ndarray:
    """``recording`` with 0.8 s of a quiet room inserted at ``cut_s`` (moved to the quietest 10 ms near)."""
    speech = load_audio_16k(data_dir / recording)
    _, quiet = _sentence(data_dir)
    cut = quietest_near(speech, cut_s)
    return np.concatenate([quiet[:8000], speech[:cut], quiet[:12800], speech[cut:], quiet])


def test_a_pause_after_the_is_answered_once_as_a_whole(real_engines: SessionEngines, data_dir: Path) -> None:
    """ "Sunday is the ... best part of the week" with 0.8 s after "the": the reply model's P that the
    words "Sunday is the" end the message is tiny, the turn is held, the sentence answered once."""
    session = _run(real_engines, _paused(data_dir, SUNDAY, SUNDAY_THE_ENDS_S))

    assert len(session.turns.traces) == 1, [
        (t.transcript, t.endpoint_by, t.words_complete_p) for t in session.turns.traces
    ]
    (trace,) = session.turns.traces
    assert session.turns.dropped_speculative >= 1
    words = trace.transcript.lower()
    assert "sunday" in words and "week" in words, trace.transcript
    assert trace.words_complete_p is not None, trace


def test_the_words_hold_a_pause_the_sound_alone_ends(real_engines: SessionEngines, data_dir: Path) -> None:
    """ "Eight of spades, four of ... clubs": Smart Turn hears the falling voice before the pause as
    finished, so the sound alone answers "Eight of spades, four of"; with the words the list is
    answered once, as a whole."""
    audio = _paused(data_dir, CARDS, CARDS_OF_ENDS_S)
    alone = _run(real_engines, audio, judge_words=False)
    both = _run(real_engines, audio)

    assert alone.turns.done == 2, [(t.transcript, t.endpoint_by) for t in alone.turns.traces]
    assert both.turns.done == 1, [
        (t.transcript, t.endpoint_by, t.words_complete_p) for t in both.turns.traces
    ]
    assert "hearts" in both.turns.traces[0].transcript.lower(), both.turns.traces[0].transcript


class _SlowPromptPass:
    """The reply model of a slower or busier machine: each reply's prompt pass (which gives the words'
    verdict) starts ``delay_s`` later, longer than endpointer.end_silence_ms."""

    def __init__(self, llm: LlmEngine, delay_s: float) -> None:
        self._llm = llm
        self._delay_s = delay_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def stream(self, history: Sequence[Message], **options: Any) -> Iterator[str]:
        time.sleep(self._delay_s)  # on the LLM's worker, where the pass itself runs
        yield from self._llm.stream(history, **options)


def _live(
    engines: SessionEngines, audio: np.ndarray, *, delay_s: float, words_wait_ms: int = 1000
) -> Session:
    """In real time, the words' verdict arriving after end_silence_ms."""
    slow = dataclasses.replace(engines, llm=_SlowPromptPass(engines.llm, delay_s))
    return _run(slow, audio, realtime=True, words_wait_ms=words_wait_ms)


def test_live_with_slow_words_a_pause_after_the_is_still_answered_once(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    """The words come 0.7 s after the prompt pass would start (after Whisper too): later than the 500 ms
    of end_silence_ms. The pause after "the" waits for them instead of ending on the sound's timer."""
    session = _live(real_engines, _paused(data_dir, SUNDAY, SUNDAY_THE_ENDS_S), delay_s=0.7)

    summary = [
        (t.transcript, t.endpoint_by, t.turn_complete_p, t.words_complete_p) for t in session.turns.traces
    ]
    assert len(session.turns.traces) == 1, summary
    assert "week" in session.turns.traces[0].transcript.lower(), summary


def test_live_with_slow_words_a_finished_sentence_ends_when_they_arrive(
    real_engines: SessionEngines, data_dir: Path
) -> None:
    speech = load_audio_16k(data_dir / HOW_OLD)
    _, quiet = _sentence(data_dir)
    # words_wait_ms at its longest: the words come within it on a loaded machine too (the test is of
    # what decides the pause, not of this machine's speed)
    audio = np.concatenate([quiet[:8000], speech, quiet, quiet])
    session = _live(real_engines, audio, delay_s=0.7, words_wait_ms=2000)

    (trace,) = session.turns.traces
    assert trace.endpoint_by == "fused" and trace.words_complete_p is not None, trace
    assert trace.words_not_expected == ""
    waited = trace.stage_s("endpoint_wait")
    assert waited is not None and waited < 2.5, trace  # it ended on the words, not on a silence


def test_when_the_words_cannot_judge_the_trace_says_why(real_engines: SessionEngines, data_dir: Path) -> None:
    speech, quiet = _sentence(data_dir)
    session = _run(real_engines, np.concatenate([quiet[:8000], speech, quiet]), judge_words=False)

    (trace,) = session.turns.traces
    assert trace.words_not_expected == "off" and trace.words_complete_p is None, trace
    assert '"words":"not expected, off"' in trace.log_line()


def test_a_pause_is_counted_cut_only_when_a_turn_ends_inside_it() -> None:
    from bench.turn_live import cut_inside
    from bench.turn_set import Clip

    clip = Clip(
        "c.wav", "pause_function", np.zeros(16000, np.float32), 6.0, pause_start_s=3.0, pause_end_s=3.8
    )
    assert cut_inside(clip, [2.9, 6.0])  # the VAD put the end a little before the pause
    assert cut_inside(clip, [3.5, 6.0])
    assert not cut_inside(clip, [1.4, 6.0])  # the recording's own pause between sentences
    assert not cut_inside(clip, [6.0])  # answered once
    assert not cut_inside(dataclasses.replace(clip, kind="complete", pause_start_s=None), [3.0, 6.0])
