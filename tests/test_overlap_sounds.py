"""Unsure words over a reply that sound like a stop word are that stop word: on the real voice's
phonemes, with what Whisper tiny.en wrote for Piper's overlaps in ``bench interruptions``."""

from __future__ import annotations

import pytest

from appliance.pipeline.overlap import Heard, OverlapKind, classify, closest_stop_word, only_unsure
from appliance.pipeline.params import OverlapParams
from engines.tts import TtsEngine

PARAMS = OverlapParams()


def _stop_sounds(tts: TtsEngine) -> dict[str, str]:
    return dict(zip(PARAMS.stop_words, tts.phonemes(PARAMS.stop_words), strict=True))


@pytest.mark.parametrize(
    ("heard", "stop_word"),
    [("Old one.", "hold on"), ("Whole one", "hold on"), ("Top.", "stop"), ("Weight", "wait"), ("Go.", "no")],
)
def test_unsure_words_that_sound_like_a_stop_word_are_that_stop_word(
    piper_tts: TtsEngine, heard: str, stop_word: str
) -> None:
    (sounds,) = piper_tts.phonemes([heard])
    assert closest_stop_word(sounds, _stop_sounds(piper_tts)) == stop_word
    unsure = Heard(heard, -0.9)
    assert only_unsure(unsure, PARAMS)
    assert classify(Heard(heard, -0.9, sounds_like=stop_word), PARAMS) is OverlapKind.STOP_WORD


@pytest.mark.parametrize(
    "heard", ["in my mom.", "MMO", "And I'm on.", "I'm Emma.", "in memo", "picture.", "NIMO", "What?", "Why?"]
)
def test_what_whisper_made_of_a_hum_or_a_short_question_is_not_a_stop_word(
    piper_tts: TtsEngine, heard: str
) -> None:
    (sounds,) = piper_tts.phonemes([heard])
    assert closest_stop_word(sounds, _stop_sounds(piper_tts)) == ""


def test_only_words_whisper_was_unsure_of_are_heard_for_their_sound() -> None:
    assert not only_unsure(Heard("Old one.", -0.3), PARAMS)  # sure: an interruption by its words
    assert not only_unsure(Heard("Hold on.", -0.9), PARAMS)  # a stop word by its words
    assert not only_unsure(Heard("Okay.", -0.9), PARAMS)  # a backchannel by its words
    assert not only_unsure(Heard("what time does it open", -0.9), PARAMS)  # too many words
    assert classify(Heard("Old one.", -0.3), PARAMS) is OverlapKind.INTERRUPTION
