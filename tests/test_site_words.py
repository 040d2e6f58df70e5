"""The site's words heard as others, put back by their sound: on the real voice's phonemes, with what
Whisper tiny.en really wrote for Piper's questions about the site of ``bench answers``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from appliance.tools.facts import read_facts
from appliance.tools.site_words import SiteWords
from bench.answers import FACTS, QUESTIONS
from engines.asr.text import edit_distance
from engines.tts import TtsEngine


def _site() -> SiteWords:
    return SiteWords([f"{fact.title}. {fact.text}" for fact in read_facts(FACTS)])


def _corrected(words: SiteWords, tts: TtsEngine, heard: str) -> tuple[str, list[str]]:
    unknown = words.unknown(heard)
    words.learn(unknown, tts.phonemes(unknown))
    text, corrections = words.correct(heard)
    return text, [str(c) for c in corrections]


@pytest.mark.parametrize(
    ("heard", "meant", "corrections"),
    [
        ("Which room is meeting room L,", "Which room is meeting room Elm,", ["L -> Elm"]),
        ("How many people fit in Meeting Room L.", "How many people fit in Meeting Room Elm.", ["L -> Elm"]),
        ("Where do visitors spark?", "Where do visitors park?", ["spark -> park"]),
        ("Where do staff part?", "Where do staff park?", ["part -> park"]),
        ("How much does it cost to replace a loss locker key?",
         "How much does it cost to replace a lost locker key?", ["loss -> lost"]),
        ("How I must the I'll speak.", "How I must the aisles speak.", ["I'll -> aisles"]),
    ],
)  # fmt: skip
def test_what_whisper_heard_is_put_back_to_the_site_words(
    piper_tts: TtsEngine, heard: str, meant: str, corrections: list[str]
) -> None:
    assert _corrected(_site(), piper_tts, heard) == (meant, corrections)


def test_the_site_questions_said_right_are_left_alone(piper_tts: TtsEngine) -> None:
    words = _site()
    for question in QUESTIONS:
        assert _corrected(words, piper_tts, question.text) == (question.text, [])


def test_sentences_about_something_else_are_left_alone(piper_tts: TtsEngine, data_dir: Path) -> None:
    """Every transcript of the recordings: none is about the site, so any change would be wrong."""
    words = _site()
    with (data_dir / "MANIFEST.tsv").open(encoding="utf-8") as manifest:
        references = [row[3] for row in csv.reader(manifest, delimiter="\t") if len(row) > 3]
    sentences = [r for r in references if r not in ("-", "") and not r.startswith("[")]
    assert len(sentences) >= 20
    for sentence in sentences:
        assert _corrected(words, piper_tts, sentence)[1] == [], sentence


def test_function_words_and_numbers_are_never_replaced(piper_tts: TtsEngine) -> None:
    words = SiteWords(["There are 40 visitor spaces. Car park D is at the floor below."])
    for heard in ["Where are forty visitor spaces?", "Is four below?", "Car park the"]:
        assert _corrected(words, piper_tts, heard)[1] == [], heard


def test_a_word_without_phonemes_stays_as_heard() -> None:
    words = _site()
    assert words.unknown("meeting room L") == ["elm", "l", "oak"]
    assert words.correct("meeting room L") == ("meeting room L", [])


def test_edit_distance() -> None:
    assert edit_distance("ɛl", "ɛlm") == 1
    assert edit_distance("", "abc") == 3
    assert edit_distance("kitten", "sitting") == 3
