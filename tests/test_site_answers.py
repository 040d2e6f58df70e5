"""Answers a technician can read back (agent.answers = "select"): the model chooses one of the facts'
numbered sentences and the appliance says it as written, after checking that everything the person
named is in it; otherwise it declines, naming what the facts do know. The rules alone first, then Qwen
1.5B on a plant whose facts hold sibling items (M8/M10/M12 bolts, car parks P1/P2, extensions)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import load_settings, override
from appliance.grounding import figures
from appliance.tools import ToolBox
from appliance.tools.facts import Fact, read_facts
from appliance.tools.site_sentences import SiteSentences, selection_in, units_of
from appliance.tools.site_words import SiteWords
from engines.bundle import Bundle
from engines.llm import LlmEngine
from engines.tts import TtsEngine
from tests.test_agent_tools import _turn, site_llm

PLANT = Path(__file__).parent / "fixtures" / "site" / "plant.md"
DECLINE = {
    "not_known": "Sorry, I don't have that information here.",
    "unknown_item": "I have nothing on {item} here.",
}
KNOWN = "I know about {items}."


def _plant() -> SiteSentences:
    return SiteSentences(read_facts(PLANT))


def _answer(number: int, question: str) -> tuple[str, str, bool]:
    answer = _plant().answer(number, question, known_items=KNOWN, **DECLINE)
    return answer.text, answer.why, answer.declined


# --- the rules -------------------------------------------------------------------------------------
def test_a_sentence_that_leans_on_the_one_before_stays_with_it() -> None:
    units = units_of(
        [Fact("Canteen", "The canteen is in building B. It opens at 7:30. A meal costs 4.50 euros.")]
    )
    assert [u.text for u in units] == [
        "The canteen is in building B. It opens at 7:30.",
        "A meal costs 4.50 euros.",
    ]
    assert [u.number for u in units] == [1, 2]


@pytest.mark.parametrize(
    ("text", "chosen"),
    [
        ("[3]", 3),
        (" [12] because", 12),
        ("[0]", 0),
        ("[", None),
        ("[1", None),
        ("", None),
        ("The canteen", False),
    ],
)
def test_a_reply_is_read_as_a_choice_as_soon_as_it_can_be(text: str, chosen: int | bool | None) -> None:
    assert selection_in(text) == chosen


def test_an_item_the_facts_do_not_list_is_declined_with_its_siblings() -> None:
    text, why, declined = _answer(1, "What torque do the M6 bolts take?")
    assert declined and why.startswith("not named: M6")
    assert (
        text
        == "I have nothing on the M6 bolts here. I know about the M8 bolts, the M10 bolts and the M12 bolts."
    )
    text, _, declined = _answer(0, "How many spaces does car park P3 have?")
    assert declined and "car park P1" in text and "car park P2" in text and "60" not in text


def test_a_figure_comes_only_with_its_own_subject() -> None:
    """The model's neighbour (P1's sentence for a question about P2) is not said: the one sentence
    that holds what the person named is."""
    text, why, declined = _answer(4, "How many spaces are there in car park P2?")  # [4]: car park P1
    assert not declined and text == "Car park P2 has 40 spaces and is next to hall 3.", why
    text, _, declined = _answer(1, "What torque do the M8 bolts on line 2 need?")
    assert not declined and text == "The M8 bolts on line 2 are tightened to 25 newton metres."


def test_a_negative_fact_is_an_answer() -> None:
    text, _, declined = _answer(10, "When does the night shift start?")
    assert not declined and text.endswith("There is no night shift.")


@pytest.mark.parametrize(
    "question", ["What is the extension of the quality lab?", "How much does a coffee cost in the canteen?"]
)
def test_a_thing_the_facts_never_name_is_declined(question: str) -> None:
    sentences = _plant()
    for unit in sentences.units:  # whichever sentence the model chose
        answer = sentences.answer(unit.number, question, known_items=KNOWN, **DECLINE)
        assert answer.declined, (unit.text, answer.why)


def test_codes_and_figures_are_never_rewritten_by_their_sound() -> None:
    words = SiteWords(["Torque. The M8 bolts and the M12 bolts on line 2.", "Meeting room Elm is room 305."])
    assert words.unknown("What torque do the M8 bolts on line 2 need?") == []
    words.learn(["late", "m12"], ["leɪt", "ɛmtwɛlv"])
    assert words.correct("What torque do the late bolts need?")[0] == "What torque do the late bolts need?"


# --- the model's choice, through the turn, on Qwen 1.5B ----------------------------------------------
@pytest.fixture(scope="module")
def plant(bundle: Bundle) -> Iterator[tuple[LlmEngine, ToolBox]]:
    agent = {
        "site_name": "the Eastfield works",
        "tools": [
            {"name": "site_facts", "kind": "facts", "description": "the site's facts", "file": str(PLANT)}
        ],
    }
    settings = override(load_settings(None), agent=agent, llm={"model": "qwen-1.5b", "context_tokens": 1024})
    for engine, box in site_llm(settings, bundle):
        assert box.site_sentences is not None  # the shipped answers: selected
        yield engine, box


def test_an_answers_first_audio_is_the_facts_sentence(
    plant: tuple[LlmEngine, ToolBox], piper_tts: TtsEngine
) -> None:
    llm, box = plant
    spoken, trace, _ = _turn("What torque do the M8 bolts on line 2 need?", llm, piper_tts, box)
    assert " ".join(spoken) == "The M8 bolts on line 2 are tightened to 25 newton metres.", (
        spoken,
        trace.chosen,
    )
    assert not trace.declined and trace.chosen and trace.llm_tokens <= 6  # a few tokens, not a paraphrase


def test_an_unlisted_size_is_declined_with_the_siblings_and_no_fragment(
    plant: tuple[LlmEngine, ToolBox], piper_tts: TtsEngine
) -> None:
    llm, box = plant
    spoken, trace, _ = _turn("What torque do the M6 bolts take?", llm, piper_tts, box)
    said = " ".join(spoken)
    assert trace.declined and said.startswith("I have nothing on the M6 bolts here."), said
    assert all(code in said for code in ("M8", "M10", "M12"))
    assert not {"25", "45", "80"} & {v for f in figures(said) for v in map(str, f.values)}, said


def test_there_is_no_night_shift_is_said(plant: tuple[LlmEngine, ToolBox], piper_tts: TtsEngine) -> None:
    llm, box = plant
    spoken, trace, _ = _turn("When does the night shift start?", llm, piper_tts, box)
    assert "There is no night shift." in " ".join(spoken) and not trace.declined, spoken


def test_what_it_offers_comes_from_its_facts(plant: tuple[LlmEngine, ToolBox], piper_tts: TtsEngine) -> None:
    """Asked what it can do, it says its facts' titles, never "setting reminders, booking appointments"."""
    llm, box = plant
    spoken, _, _ = _turn("What can you help me with here?", llm, piper_tts, box)
    said = " ".join(spoken).lower()
    assert "reminder" not in said and "appointment" not in said and "message" not in said, said
    assert box.offer_sentence().startswith(
        "I can tell you about torque specifications, parking, phone extensions"
    )


def test_a_number_said_as_a_word_is_the_same_item() -> None:
    """Whisper writes "hall four" as often as "hall 4"; the kiosk said hall 2's sentence for it."""
    text, why, declined = _answer(4, "Which car park is next to hall three?")  # [4]: car park P1
    assert not declined and text == "Car park P2 has 40 spaces and is next to hall 3.", why
    text, _, declined = _answer(5, "Which car park is next to hall four?")
    assert declined and text.startswith("I have nothing on hall 4 here."), text


def test_a_question_that_names_none_of_several_is_not_answered_with_one() -> None:
    """Whisper dropped "Ash" of "How many people does meeting room Ash seat?"; the kiosk said Rowan's."""
    sentences = SiteSentences(
        [Fact("Meeting rooms", "Meeting room Pine seats 14 people. Meeting room Rowan seats 12 people.")]
    )
    answer = sentences.answer(2, "How many people does meeting room seat?", known_items=KNOWN, **DECLINE)
    assert answer.declined and answer.why.startswith("which one"), answer
    answer = sentences.answer(
        2, "How many people does meeting room Rowan seat?", known_items=KNOWN, **DECLINE
    )
    assert not answer.declined and answer.text == "Meeting room Rowan seats 12 people."
