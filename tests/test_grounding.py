"""The grounding check on its own: figures read in their spoken and written forms, matched by value
and by what they measure, and the product's own instructions never spoken."""

from __future__ import annotations

import pytest

from appliance.grounding import Sources, WithheldWhy, figures

FACTS = (
    ("Canteen", "The canteen is open from 7:30 to 14:00 on weekdays. A hot meal costs 4.50 euros."),
    ("Visitor passes", "A visitor pass is valid for 3 days."),
    ("Torque", "The M10 flange bolts are tightened to 25 Nm."),
    ("Reception", "Reception is on extension 2000, in room B12."),
)


@pytest.fixture
def sources() -> Sources:
    found = Sources()
    for title, text in FACTS:
        found.add(text, title=title)
    found.add_internal(
        "Now answer the person's question from this data, in one or two short spoken sentences."
    )
    return found


@pytest.mark.parametrize(
    ("text", "values", "unit"),
    [
        ("twenty-five newton metres", {"25"}, "newton"),
        ("one hundred and twelve", {"112"}, ""),
        ("1,200 people", {"1200"}, "peopl"),
        ("four euros fifty", {"4.5"}, "euro"),
        ("€4.50", {"4.5"}, "euro"),
        ("40% off", {"40"}, "percent"),
        ("room B12", {"b12"}, ""),
        ("the third floor", {"3"}, "floor"),
        ("half past seven", {"t:450", "t:1170"}, ""),
        ("quarter to eight", {"t:465", "t:1185"}, ""),
        ("2 pm", {"t:840"}, ""),
        ("7.30 a.m.", {"t:450"}, ""),
        ("seven thirty pm", {"t:1170"}, ""),
        ("14:00", {"t:840"}, ""),
        ("noon", {"t:720"}, ""),
        ("Saturdays", {"d:sat"}, ""),
        ("weekdays", {"d:mon", "d:tue", "d:wed", "d:thu", "d:fri"}, ""),
    ],
)
def test_a_figure_is_read_in_its_spoken_and_written_forms(text: str, values: set[str], unit: str) -> None:
    (figure,) = figures(text)
    assert figure.values == values and figure.unit == unit


def test_words_that_are_numbers_but_say_no_figure_are_not_figures() -> None:
    assert figures("One of them said it a second time, and no one minded.") == []


@pytest.mark.parametrize(
    "clause",
    [
        "The canteen opens at half past seven.",
        "It closes at 2 pm.",
        "It opens at seven thirty am and closes at two in the afternoon, 14:00.",
        "A hot meal is four euros fifty.",
        "Tighten them to twenty-five newton metres.",
        "Passes last 3 days.",
        "Call extension two thousand, in room B12.",
        "Hello, how can I help you today?",
    ],
)
def test_a_figure_the_sources_give_may_be_spoken(sources: Sources, clause: str) -> None:
    assert sources.check(clause).ok, clause


@pytest.mark.parametrize(
    ("clause", "missing"),
    [
        ("The canteen opens at 10.", ["10"]),
        ("Tighten to 100 Nm.", ["100"]),
        ("Parking is 5 euros a day.", ["5"]),
        ("A pallet may be stacked 3 levels high.", ["3"]),  # the 3 of the sources measures days
        ("Reception is on extension 2001.", ["2001"]),
        ("It opens at a quarter past eight.", ["a quarter past eight"]),
    ],
)
def test_a_figure_no_source_gave_is_withheld_with_what_was_missing(
    sources: Sources, clause: str, missing: list[str]
) -> None:
    verdict = sources.check(clause)
    assert verdict.why is WithheldWhy.FIGURE
    assert [m.removeprefix("a ") for m in verdict.ungrounded] == [m.removeprefix("a ") for m in missing]


def test_the_conversation_and_the_sites_allowed_figures_are_sources_too(sources: Sources) -> None:
    assert not sources.check("The emergency number is 112.").ok
    sources.add("112")  # agent.allowed_figures
    sources.add("Is line 4 running?", said=True)  # the person's own words
    assert sources.check("The emergency number is 112.").ok and sources.check("Line 4 is running.").ok


def test_a_clause_repeating_the_products_instructions_is_withheld(sources: Sources) -> None:
    verdict = sources.check("Now answer the person's question from this data.")
    assert verdict.why is WithheldWhy.INTERNAL
    assert sources.check("I can answer your question.").ok


def test_the_system_prompt_read_out_is_withheld_even_where_figures_are_not_checked() -> None:
    """Without a site's facts the model answers from what it knows (its figures are not checked), but
    it never reads out its prompt; saying what the device is stays fine."""
    persona = Sources(check_figures=False)
    persona.add_internal(
        "You are a helpful voice assistant on a device at Demo site. You answer from what you know "
        "and cannot look anything up.",
        run=10,
    )
    assert (
        persona.check("You are a helpful voice assistant on a device at Demo site.").why
        is WithheldWhy.INTERNAL
    )
    assert (
        persona.check("You answer from what you know and cannot look anything up.").why
        is WithheldWhy.INTERNAL
    )
    assert persona.check("I'm a voice assistant on a device at Demo site.").ok
    assert persona.check("The Brooklyn Bridge opened in 1883.").ok


def test_a_facts_figure_about_something_else_than_was_asked_is_withheld(sources: Sources) -> None:
    sources.ask("How many lockers are there?")
    verdict = sources.check("A visitor pass is valid for 3 days.")
    assert verdict.why is WithheldWhy.OFF_SUBJECT and verdict.ungrounded == ["3"]
    assert sources.check("I don't have that here.").ok  # no figure: nothing to check


def test_a_facts_figure_about_what_was_asked_is_spoken_and_the_sites_own_figures_anywhere(
    sources: Sources,
) -> None:
    sources.ask("When does the canteen open?")
    assert sources.check("It opens at half past seven.").ok  # the canteen's sentence
    sources.add("112", any_subject=True)  # agent.allowed_figures
    assert sources.check("In an emergency, call 112.").ok
    sources.ask("And how long is a visitor pass valid?")  # a second question of the conversation
    assert sources.check("For 3 days.").ok
    assert sources.check("The M10 flange bolts need 25 Nm.").why is WithheldWhy.OFF_SUBJECT


def test_a_facts_figure_said_of_something_only_the_person_named_is_withheld(sources: Sources) -> None:
    sources.add("What torque do the M8 bolts on line 5 need?", said=True)
    verdict = sources.check("The M8 bolts on line 5 need 25 Nm.")  # 25 Nm is the M10 flange bolts'
    assert verdict.why is WithheldWhy.FIGURE and verdict.ungrounded == ["25"]
    sources.add("Is the canteen open at 7:30 on line 5?", said=True)
    assert sources.check("Yes, it opens at 7:30.").ok  # no figure of theirs in the clause
    assert sources.check("The M10 flange bolts need 25 Nm.").ok
    assert sources.check("The M10 flange bolts need 25.").ok  # "need" says nothing of what 25 measures


def test_the_persons_figure_earlier_in_the_same_sentence_of_the_reply_counts(sources: Sources) -> None:
    """A reply is checked clause by clause: "The M8 bolts on line 5" then "need 25 Nm."."""
    sources.add("What torque do the M8 bolts on line 5 need?", said=True)
    assert sources.check("The M8 bolts on line 5").ok
    verdict = sources.check("need 25 Nm.", after="The M8 bolts on line 5")
    assert verdict.why is WithheldWhy.FIGURE and verdict.ungrounded == ["25"]
    assert sources.check("The M10 flange bolts need 25 Nm.", after="The M8 bolts are not listed.").ok


def test_a_day_the_facts_do_not_give_is_not_said_with_their_times(sources: Sources) -> None:
    sources.add("When does the canteen open on Saturdays?", said=True)
    sources.ask("When does the canteen open on Saturdays?")
    sources.add("It is now 10:12 on Saturday 5 December 2026.", title="time date day clock", moment=True)
    verdict = sources.check("The canteen opens at 7:30 on Saturdays.")
    assert verdict.why is WithheldWhy.FIGURE and verdict.ungrounded == ["7:30"]
    assert sources.check("The canteen opens at 7:30 on weekdays.").ok
    assert sources.check("Today is Saturday.").ok  # the clock's day, said of today
    assert sources.check("It opens on Sundays.").why is WithheldWhy.FIGURE  # no source gives Sunday
