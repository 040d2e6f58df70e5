"""The site's own words, heard as other words: "meeting room L" is "meeting room Elm".

Whisper writes a name it does not know as the nearest thing it does know ("Elm" as "L" or "Mel",
"park" as "spark", "lost" as "loss"), and no vocabulary prompt or larger model fixed those here
(docs/answers.md). A word of a transcript is read as a word of the site's facts when all of these hold:

- the heard word is not in the facts itself (a word the facts use is never replaced), and neither it
  nor the facts word is a function word, a number or a code ("where" is never "there", "four" never
  "floor", "M8" never "late" nor "N6" "M6");
- its neighbour in the transcript is that facts word's neighbour in the facts ("room L" and
  "room Elm"), so a word is only ever replaced in a place where the facts say it goes;
- they sound alike: the edit distance between their phonemes (espeak's, through the Piper voice) is
  at most ``MAX_DISTANCE`` of the longer one, and at most ``MAX_EDITS``.

The caller gets the phonemes of the words ``unknown`` names where espeak may run (the TTS worker:
espeak is not thread-safe) and hands them to ``learn``; ``SiteWords`` itself is pure and remembers
every word's phonemes.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engines.asr.text import edit_distance

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")
_CLAUSE_END = re.compile(r"[.!?;:,()\n]")
MAX_DISTANCE = 0.4
MAX_EDITS = 2
_FUNCTION_WORDS = frozenset(
    (  # noqa: SIM905 (a word list reads better as text)
        "a an the and or but nor so if then than that this these those there here where when what which "
        "who whom whose why how is are was were be been being am do does did done have has had having "
        "will would shall should can could may might must not no yes i me my mine you your yours he him "
        "his she her hers it its we us our ours they them their theirs of in on at to for from by with "
        "about into onto over under up down out off as per via all any some each every both either "
        "neither many much more most few less least zero one two three four five six seven eight nine "
        "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty "
        "forty fifty sixty seventy eighty ninety hundred thousand first second third half quarter please "
        "thanks okay"
    ).split()
)


@dataclass(frozen=True)
class Correction:
    heard: str
    meant: str
    distance: float  # phoneme edits over the longer word's phonemes

    def __str__(self) -> str:
        return f"{self.heard} -> {self.meant}"


class SiteWords:
    """The words of the facts, with the words each follows and precedes."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.vocabulary: set[str] = set()
        self._after: dict[str, set[str]] = defaultdict(set)  # word -> facts words that follow it
        self._before: dict[str, set[str]] = defaultdict(set)  # word -> facts words that precede it
        self._spelling: dict[str, str] = {}  # lower case -> as the facts write it
        self._phonemes: dict[str, str] = {}
        for text in texts:
            for clause in _CLAUSE_END.split(text):
                tokens = _TOKEN.findall(clause)
                for token in tokens:
                    self.vocabulary.add(token.lower())
                    self._spelling.setdefault(token.lower(), token)
                for left, right in itertools.pairwise(tokens):
                    if _replaceable(right):
                        self._after[left.lower()].add(right.lower())
                    if _replaceable(left):
                        self._before[right.lower()].add(left.lower())

    def _candidates(self, words: list[str], index: int) -> set[str]:
        """Facts words that stand beside the transcript's neighbours of ``words[index]``."""
        found: set[str] = set()
        if index > 0:
            found |= self._after.get(words[index - 1], set())
        if index + 1 < len(words):
            found |= self._before.get(words[index + 1], set())
        return found

    def _suspects(self, transcript: str) -> list[tuple[re.Match[str], set[str]]]:
        matches = list(_TOKEN.finditer(transcript))
        words = [m.group(0).lower() for m in matches]
        suspects = []
        for index, match in enumerate(matches):
            if words[index] in self.vocabulary or not _replaceable(words[index]):
                continue
            candidates = self._candidates(words, index)
            if candidates:
                suspects.append((match, candidates))
        return suspects

    def unknown(self, transcript: str) -> list[str]:
        """The words whose phonemes ``correct`` needs and does not have yet."""
        needed: set[str] = set()
        for match, candidates in self._suspects(transcript):
            needed |= {match.group(0).lower(), *candidates}
        return sorted(needed - self._phonemes.keys())

    def learn(self, words: Sequence[str], phonemes: Sequence[str]) -> None:
        for word, sounds in zip(words, phonemes, strict=True):
            self._phonemes[word] = sounds

    def correct(self, transcript: str) -> tuple[str, list[Correction]]:
        """``transcript`` with each heard word that is a facts word's sound-alike in its place replaced
        (``learn`` the ``unknown`` words' phonemes first; a word without them is left as heard)."""
        corrections: list[Correction] = []
        pieces: list[str] = []
        end = 0
        for match, candidates in self._suspects(transcript):
            heard = match.group(0)
            best = self._closest(heard.lower(), candidates)
            if best is None:
                continue
            meant, distance = best
            corrections.append(Correction(heard, self._spelling[meant], round(distance, 2)))
            pieces += [transcript[end : match.start()], self._spelling[meant]]
            end = match.end()
        return "".join([*pieces, transcript[end:]]), corrections

    def _closest(self, heard: str, candidates: set[str]) -> tuple[str, float] | None:
        sounds = self._phonemes.get(heard)
        if not sounds:
            return None
        known = {c: self._phonemes[c] for c in candidates if self._phonemes.get(c)}
        return closest_by_sound(sounds, known, max_distance=MAX_DISTANCE, max_edits=MAX_EDITS)


def closest_by_sound(
    sounds: str, candidates: Mapping[str, str], *, max_distance: float, max_edits: int | None = None
) -> tuple[str, float] | None:
    """The candidate (word -> its phonemes) that sounds nearest ``sounds``, with its distance: phoneme
    edits over the longer one's phonemes, at most ``max_distance`` (and at most ``max_edits``)."""
    scored = []
    for word, theirs in candidates.items():
        edits = edit_distance(sounds, theirs)
        distance = edits / max(len(sounds), len(theirs), 1)
        if distance <= max_distance and (max_edits is None or edits <= max_edits):
            scored.append((distance, word))
    if not scored:
        return None
    distance, word = min(scored)
    return word, distance


def _replaceable(word: str) -> bool:
    """A word that may be heard as another, or taken for one: a name or a thing, not "the" or "four"."""
    lower = word.lower()
    # A code or figure (M8, B12, 4711, line 2) is never replaced nor put in: "M8" heard right was once
    # read as "late", and the kiosk answered with another bolt's torque.
    return lower not in _FUNCTION_WORDS and not any(c.isdigit() for c in lower)
