"""The clause splitter on streamed reply text: short first piece, clean boundaries, nothing lost."""

from __future__ import annotations

import random

import pytest

from engines.tts.clauses import ClauseSplitter, split_text
from engines.tts.text import speakable


def stream(text: str, *, chunk_chars: int | None = None, seed: int = 0, first: int | None = 4) -> list[str]:
    """Push ``text`` like an LLM streams it: word by word (with spaces) or in random-sized chunks."""
    splitter = ClauseSplitter(first)
    if chunk_chars is None:
        tokens = [t for t in text.replace(" ", " \0").replace("\n", "\n\0").split("\0") if t]
    else:
        rng = random.Random(seed)
        tokens, i = [], 0
        while i < len(text):
            n = rng.randint(1, chunk_chars)
            tokens.append(text[i : i + n])
            i += n
    pieces: list[str] = []
    for token in tokens:
        pieces.extend(splitter.push(token))
    return pieces + splitter.flush()


def words(text: str) -> list[str]:
    return text.split()


TRICKY = [
    "Dr. Smith measured 3.5 liters of water at 10:30 a.m. today. It cost $1,250.75 in total! Is that right?",
    "Sure, the museum opens at nine, and the cafe closes at five, so plan ahead.",
    "You will need eggs, flour, sugar, butter, and milk for this recipe.",
    "Here is the list:\n1. Apples\n2. Pears\n3. Plums\n",
    "No. I do not think so. See item No. 5 please.",
    "the museum opens at nine tomorrow morning and the shop closes at five in the afternoon so you have "
    "plenty of time to see everything and grab a coffee before you leave the building",
    "Mr. J. R. R. Tolkien wrote it, e.g. The Hobbit. Visit example.com for 2.5 hours... Thanks!",
    'He said "Hello." Then he left (quietly). Version 3.10.2 is out; update now — it is free.',
]


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("chunk_chars", [None, 1, 3, 7])
def test_nothing_is_lost_or_reordered_and_chunking_does_not_matter(
    text: str, chunk_chars: int | None
) -> None:
    pieces = stream(text, chunk_chars=chunk_chars, seed=len(text))
    assert words(" ".join(pieces)) == words(text)
    # The split does not depend on how the text was cut into tokens.
    assert pieces == stream(text)


def test_first_piece_is_short_and_later_pieces_end_at_sentences() -> None:
    text = (
        "The north entrance opens at nine tomorrow morning for all visitors. "
        "The cafe on the second floor serves breakfast until eleven."
    )
    pieces = stream(text)
    assert pieces == [
        "The north entrance opens",
        "at nine tomorrow morning for all visitors.",
        "The cafe on the second floor serves breakfast until eleven.",
    ]


def test_first_piece_ends_at_an_early_comma() -> None:
    assert stream("Sure, the museum opens at nine, and the cafe closes at five, so plan ahead.") == [
        "Sure,",
        "the museum opens at nine, and the cafe closes at five,",
        "so plan ahead.",
    ]


def test_first_cut_avoids_ending_on_a_small_word_or_a_number() -> None:
    # Four words end on "at" and then on "9.5": the cut moves to "hours".
    assert stream("We are open at 9.5 hours a day for the whole season")[0] == "We are open at 9.5 hours"
    assert stream("It is 3.5 million dollars per year.")[0] == "It is 3.5 million dollars"


def test_numbers_and_decimals_are_never_split() -> None:
    text = "Pressure is 3.5 bar. The total is 1,250.75 dollars. Meet at 10:30. Version 3.10.2 works."
    assert split_text(text) == [
        "Pressure is 3.5 bar.",
        "The total is 1,250.75 dollars.",
        "Meet at 10:30.",
        "Version 3.10.2 works.",
    ]


def test_a_sentence_ending_in_a_number_is_still_a_sentence() -> None:
    assert split_text("The answer is 42. Next question please.") == [
        "The answer is 42.",
        "Next question please.",
    ]


def test_titles_initials_and_abbreviations() -> None:
    assert split_text("Dr. Smith and Mrs. Jones will see you. Ask for J. R. Brown, e.g. at the desk.") == [
        "Dr. Smith and Mrs. Jones will see you.",
        "Ask for J. R. Brown, e.g. at the desk.",
    ]
    # "No." and "a.m." end a sentence only when a capitalised word follows.
    assert split_text("No. I checked item No. 5 at 10 a.m. today. It opens at 9 a.m. Bring your badge.") == [
        "No.",
        "I checked item No. 5 at 10 a.m. today.",
        "It opens at 9 a.m.",
        "Bring your badge.",
    ]


def test_lists_split_by_line_and_short_comma_lists_stay_whole() -> None:
    assert split_text("Here is the list:\n1. Apples\n2. Pears\n- Plums\n") == [
        "Here is the list:",
        "1. Apples",
        "2. Pears",
        "- Plums",
    ]
    assert split_text("You need eggs, flour, sugar, butter, and milk.") == [
        "You need eggs, flour, sugar, butter, and milk."
    ]


def test_text_without_any_punctuation_is_cut_at_word_boundaries() -> None:
    text = " ".join(["the machine on line four stops when the red light comes on"] * 5)
    pieces = stream(text)
    assert len(pieces) >= 3
    assert len(pieces[0].split()) <= 8
    assert all(len(p.split()) <= 24 for p in pieces)
    assert all(p.split()[-1] not in {"the", "on", "when", "four"} for p in pieces[:-1])


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    assert split_text('Did he say "stop?" Yes (twice!) and then left.') == [
        'Did he say "stop?"',
        "Yes (twice!)",
        "and then left.",
    ]


def test_undecided_punctuation_waits_for_the_next_token() -> None:
    splitter = ClauseSplitter(first_clause_words=None)
    assert splitter.push("The value is 3.") == []
    assert splitter.push("5 today.") == []  # still waiting: "today." may be followed by more
    assert splitter.push(" Then") == ["The value is 3.5 today."]
    assert splitter.flush() == ["Then"]


def test_flush_resets_for_the_next_reply() -> None:
    splitter = ClauseSplitter(2)
    splitter.push("First reply with words")
    splitter.flush()
    assert splitter.push("Second reply starts here ") == ["Second reply"]


def test_pieces_without_words_are_dropped() -> None:
    assert split_text("... !!! ?") == []
    assert split_text("") == []
    assert ClauseSplitter().flush() == []


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="first_clause_words"):
        ClauseSplitter(0)
    with pytest.raises(ValueError, match="min_clause_words"):
        ClauseSplitter(4, min_clause_words=30, max_clause_words=20)


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        ("**Sure!** Here you go.", "Sure! Here you go."),
        ("- Plums", "Plums"),
        ("2. Pears", "2, Pears"),
        ("## Opening hours", "Opening hours"),
        ("Dr. Smith and Prof. Jones", "Doctor Smith and Professor Jones"),
        ("Call `reset` now", "Call reset now"),
        ("*** ...", ""),
    ],
)
def test_speakable_text(raw: str, spoken: str) -> None:
    assert speakable(raw) == spoken
