"""Transcript normalisation for scoring (word error rate), applied the same way to every engine.

Lower case, punctuation removed, hyphens split, numbers spelled out (0-20 and tens as words, longer
digit strings digit by digit, as the recordings' references read them), "oh" read as zero.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_SMALL = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
_TENS = {30: "thirty", 40: "forty", 50: "fifty", 60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety"}
_SPELLING = {"oh": "zero", "flavour": "flavor", "colour": "color", "okay": "ok", "mr": "mister"}


def _number_words(digits: str) -> str:
    if len(digits) > 2:  # never int() of a long run: Python refuses more than 4300 digits
        return " ".join(_SMALL[int(d)] for d in digits)
    value = int(digits)
    if value <= 20:
        return _SMALL[value]
    if len(digits) == 2 and value in _TENS:
        return _TENS[value]
    if len(digits) == 2 and value // 10 * 10 in _TENS:
        return f"{_TENS[value // 10 * 10]} {_SMALL[value % 10]}"
    return " ".join(_SMALL[int(d)] for d in digits)


def normalize_text(text: str) -> str:
    text = text.lower().replace("-", " ")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    text = re.sub(r"[^\w\s']", " ", text)
    text = text.replace("'", "")
    text = re.sub(r"\d+", lambda m: f" {_number_words(m.group(0))} ", text)
    return " ".join(_SPELLING.get(word, word) for word in text.split())


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus word error rate (0.0-1.0+) after normalisation: edits over reference words."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    errors = words = 0
    for ref, hyp in zip(references, hypotheses, strict=True):
        ref_words, hyp_words = normalize_text(ref).split(), normalize_text(hyp).split()
        errors += edit_distance(ref_words, hyp_words)
        words += len(ref_words)
    return errors / max(1, words)


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two sequences (words, or the characters of a string)."""
    previous = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, start=1):
        current = [i]
        for j, hyp_word in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word)))
        previous = current
    return previous[-1]
