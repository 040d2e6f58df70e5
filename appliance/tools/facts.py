"""The site's facts: a Markdown or question-and-answer file the technician provisions, searched
locally with BM25 (no model, no network: a few milliseconds for a few hundred entries).

A Markdown file is cut at its headings (each section one entry, the heading part of its text); a file
without headings is cut at blank lines (a question and its answer on adjacent lines stay together).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from engines.errors import InputError
from engines.setting_files import FACTS, SettingFileError, read_setting_text

_WORD = re.compile(r"[a-z0-9]+")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")
# Words that say nothing about which entry is meant.
_STOP_WORDS = (
    "a an and are at be can could do does for from how i in is it me my of on or please tell the "
    "there this to was we what when where which who why will with you your"
)
_STOP = frozenset(_STOP_WORDS.split())
K1, B = 1.5, 0.75


@dataclass(frozen=True)
class Fact:
    title: str
    text: str


CHARS_PER_TOKEN = 4  # English text in the models' tokenizers, near enough to choose by


def as_text(facts: list[Fact]) -> str:
    """The facts as the model reads them: each section under its title."""
    return "\n".join(f"{fact.title}: {fact.text}" if fact.title else fact.text for fact in facts)


def estimated_tokens(facts: list[Fact]) -> int:
    return len(as_text(facts)) // CHARS_PER_TOKEN + 1


class FactsFileError(InputError):
    """The facts file cannot be read or holds nothing; the message names the file and the fix."""


def words(text: str) -> list[str]:
    """The words that can tell entries apart, their plain endings cut ("opens", "opening" -> "open")."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


def _stem(word: str) -> str:
    """A crude stem that gives the forms of a word one spelling: close, closes, closed -> clos."""
    for ending in ("ing", "ers", "ed", "es", "er", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)]
            break
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word


def read_facts(path: Path) -> list[Fact]:
    try:
        text = read_setting_text(path, FACTS)
    except FileNotFoundError as err:
        raise FactsFileError(
            f"cannot read the facts file {path}: it does not exist",
            fix="provision a UTF-8 text or Markdown file there",
        ) from err
    except SettingFileError as err:
        raise FactsFileError(str(err)) from err
    return facts_in(text, str(path))


def facts_in(text: str, where: str) -> list[Fact]:
    """The entries of a facts file's text (``where`` names it in the error when it holds none)."""
    facts = _sections(text) if any(_HEADING.match(line) for line in text.splitlines()) else _paragraphs(text)
    if not facts:
        raise FactsFileError(f"the facts file {where} holds no text", fix="write the site's facts into it")
    return facts


def _sections(text: str) -> list[Fact]:
    facts: list[Fact] = []
    title, lines = "", list[str]()
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            if "".join(lines).strip():
                facts.append(Fact(title, " ".join(" ".join(lines).split())))
            title, lines = heading.group(1).strip(), []
        else:
            lines.append(line)
    if "".join(lines).strip():
        facts.append(Fact(title, " ".join(" ".join(lines).split())))
    return facts


def _paragraphs(text: str) -> list[Fact]:
    blocks = [" ".join(block.split()) for block in re.split(r"\n\s*\n", text)]
    return [Fact("", block) for block in blocks if block]


class FactsIndex:
    def __init__(self, facts: list[Fact]) -> None:
        self.facts = facts
        self._terms = [Counter(words(f"{fact.title} {fact.title} {fact.text}")) for fact in facts]
        self._lengths = [sum(terms.values()) for terms in self._terms]
        self._mean_length = sum(self._lengths) / max(len(self._lengths), 1)
        frequency: Counter[str] = Counter()
        for terms in self._terms:
            frequency.update(terms.keys())
        count = len(facts)
        self._idf = {w: math.log(1 + (count - n + 0.5) / (n + 0.5)) for w, n in frequency.items()}

    @classmethod
    def from_file(cls, path: Path) -> FactsIndex:
        return cls(read_facts(path))

    def search(self, query: str, *, limit: int = 2) -> list[Fact]:
        """The entries that best match ``query`` (none when no word of it occurs anywhere)."""
        asked = words(query)
        scored = []
        for index, terms in enumerate(self._terms):
            score = 0.0
            norm = K1 * (1 - B + B * self._lengths[index] / max(self._mean_length, 1e-9))
            for word in asked:
                count = terms.get(word, 0)
                if count:
                    score += self._idf[word] * count * (K1 + 1) / (count + norm)
            if score > 0:
                scored.append((score, index))
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [self.facts[index] for _, index in scored[:limit]]
