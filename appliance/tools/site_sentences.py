"""Answers a technician can read back: for a question about the site, the model chooses which of the
facts' sentences answer it (by their numbers in its prompt), and the appliance speaks those sentences
as the facts write them. A figure then always comes with its own subject: the model can no longer say
car park P2's 40 spaces of car park P1.

The facts are cut into numbered *units*: a sentence, with the sentences after it that lean on it ("It
opens at 7:30.", "There are 40 spaces.") kept with it, since spoken alone they would lose their
subject. The product, not the model, then checks that every code, number or named item the person
said (M6, P1, hall 3, Saturday, "night shift", "security desk") is in the chosen units; if not, the
answer is a decline that names what the facts do know ("I know about the M8, M10 and M12 bolts.").
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from appliance.tools.facts import _WORD, Fact
from appliance.tools.facts import _stem as _facts_stem

# A sentence ends at . ! ? followed by a space and a capital letter or a digit ("3.5", "a.m." stay).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])")
# A sentence that leans on the one before it: spoken alone it would lose its subject.
_LEANING = re.compile(r"^(it|its|it's|they|their|them|this|these|those|that|there|he|she|his|her)\b", re.I)
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")
_CODE = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9]+$")  # M8, P2, B12, 4711A
_SELECTION = re.compile(r"\s*\[\s*(\d{1,3})\s*\]")
_DETERMINERS = frozenset(("the", "a", "an", "no", "each", "every", "our", "your", "this", "that"))
# Questions whose answer is a figure: a sentence without a digit does not answer them.
_FIGURE_ASKED = re.compile(
    r"\b(how (many|much|long|far|high|wide|heavy|old)|what time|when|which extension)\b", re.I
)
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# fmt: off
_FUNCTION = frozenset((  # noqa: SIM905 (a word list reads better as text)
    "a an the and or but nor so if then than that this these those there here where when what which who "
    "whom whose why how is are was were be been being am do does did done have has had will would shall "
    "should can could may might must not no yes i me my you your he him his she her it its we us our they "
    "them their of in on at to for from by with about into onto over under up down out off as per via all "
    "any some each every both either neither many much more most few less least please tell know need "
    "needs get take takes go goes long far big high wide old new next last open opens close closes start "
    "starts end ends begin begins run runs work works say said find one other another time number"
).split())
# fmt: on


@dataclass(frozen=True)
class Unit:
    """One numbered answer: a sentence of the facts (with the sentences leaning on it), and its section."""

    number: int
    title: str
    text: str


@dataclass(frozen=True)
class Named:
    """Something the person named that the answer must be about: its words as one phrase ("m8",
    "hall 3", "night shift", "saturday"), how it is said, and what the facts know of its kind."""

    words: tuple[str, ...]
    said: str
    siblings: tuple[str, ...] = ()  # the facts' items of the same kind, as said ("M10", "hall 2")
    head: str = ""  # the thing the code is of, as the person said it ("bolts")


@dataclass(frozen=True)
class SiteAnswer:
    """What a selection comes to: the sentences to speak (``chosen`` their numbers), or a decline and why."""

    text: str
    chosen: tuple[int, ...] = ()
    declined: bool = False
    why: str = ""  # for the trace: "none chosen", "not named: M6", "unknown number 41"


def _words(text: str) -> list[str]:
    return [_stem(t.lower()) for t in _TOKEN.findall(text)]


def _stem(word: str) -> str:
    """Plurals and possessives as their word: "bolts" -> "bolt", "desk's" -> "desk" (codes kept)."""
    word = word.removesuffix("'s")
    if (
        len(word) > 3
        and word.endswith("s")
        and not word.endswith("ss")
        and not any(c.isdigit() for c in word)
    ):
        return word[:-1]
    return word


def units_of(facts: list[Fact]) -> list[Unit]:
    """The facts as numbered units, from 1, in their order."""
    units: list[Unit] = []
    for fact in facts:
        grouped: list[str] = []
        for sentence in _SENTENCE_END.split(fact.text.strip()):
            sentence = sentence.strip()
            if not sentence:
                continue
            if grouped and _LEANING.match(sentence):
                grouped[-1] = f"{grouped[-1]} {sentence}"
            else:
                grouped.append(sentence)
        units += [Unit(len(units) + i + 1, fact.title, text) for i, text in enumerate(grouped)]
    return units


def selection_in(text: str) -> int | bool | None:
    """The unit number a reply beginning with ``text`` chose (0: none answers); None when it cannot
    tell yet; False when the reply is not a selection (free text or a tool call)."""
    stripped = text.lstrip()
    if not stripped:
        return None
    found = _SELECTION.match(text)
    if found:
        return int(found[1])
    if re.fullmatch(r"\[\s*\d{0,3}\s*", stripped):
        return None
    return False


class SiteSentences:
    """The site's facts as numbered units, with what the person may name in them."""

    def __init__(self, facts: list[Fact], *, offer: str = "") -> None:
        self.units = units_of(facts)
        if offer:  # what the appliance can do, as the product writes it: a unit like the others
            self.units.append(Unit(len(self.units) + 1, "What I can help with", offer))
        self._tokens = [_words(f"{u.title} {u.text}") for u in self.units]
        self._vocabulary = {t for tokens in self._tokens for t in tokens}
        self._unit_stems = [_content(f"{u.title} {u.text}") for u in self.units]
        self._stems = set().union(*self._unit_stems)
        self._codes = sorted({t for t in self._vocabulary if _CODE.match(t)}, key=_natural)
        self._numbers: dict[str, set[str]] = {}  # "hall" -> {"1", "2"}: the numbers after a word
        self._names: dict[str, dict[str, str]] = {}  # "room" -> {"oak": "Oak"}: names after a word
        modifiers: dict[str, set[str]] = {}  # "shift" -> {"morning", "afternoon"}: words before a word
        self._code_phrases: dict[str, str] = {}  # "m10" -> "M10 flange bolts", as the facts say it
        for unit in self.units:
            raw = _TOKEN.findall(unit.text)
            tokens = [_stem(t.lower()) for t in raw]
            for i, token in enumerate(tokens):
                if _CODE.match(token) and token not in self._code_phrases:
                    self._code_phrases[token] = _code_phrase(raw, i)
            for i in range(1, len(tokens)):
                left, right = tokens[i - 1], tokens[i]
                if left in _FUNCTION or not left.isalpha():
                    continue
                if right.isdigit():
                    self._numbers.setdefault(left, set()).add(right)
                elif raw[i][:1].isupper() and raw[i] != "I":
                    self._names.setdefault(left, {})[right] = raw[i]
                elif (
                    right.isalpha()
                    and right not in _FUNCTION
                    and _DETERMINERS & set(tokens[max(0, i - 3) : i - 1])
                ):
                    # "the morning shift", "no night shift", "the IT help desk": a thing named apart
                    # from its kind (not "visitors park", where the second word is a verb)
                    modifiers.setdefault(right, set()).add(left)
        self._siblings = {head: found for head, found in modifiers.items() if len(found) >= 2}

    def numbered(self) -> str:
        """The units as the model reads them: one a line, ``[n] Title: text``."""
        return "\n".join(f"[{u.number}] {u.title + ': ' if u.title else ''}{u.text}" for u in self.units)

    def named(self, question: str) -> list[Named]:
        """What ``question`` names that an answer must be about (Whisper may write it twice: once)."""
        found: list[Named] = []
        for sentence in re.split(r"[.!?,;]+", _digits(question)):
            found += [item for item in self._named_in(sentence) if item not in found]
        return found

    def _named_in(self, sentence: str) -> list[Named]:
        found: list[Named] = []
        raw = _TOKEN.findall(sentence)
        tokens = [_stem(t.lower()) for t in raw]
        for i, token in enumerate(tokens):
            before, said_before = (tokens[i - 1], raw[i - 1]) if i > 0 else ("", "")
            noun_before = before.isalpha() and before not in _FUNCTION
            if _CODE.match(token):
                found.append(self._code(token, raw, i))
            elif token.isdigit() and noun_before:
                numbers = sorted(self._numbers.get(before, set()) - {token}, key=int)
                found.append(
                    Named(
                        (before, token),
                        f"{said_before} {token}",
                        tuple(f"{said_before} {n}" for n in numbers),
                    )
                )
            elif token in _DAYS or token == "weekend":
                found.append(Named((token,), raw[i]))
            elif noun_before and self._is_name(before, token, raw[i]):
                names = self._names.get(before, {})
                others = tuple(f"{said_before} {name}" for key, name in names.items() if key != token)
                found.append(Named((before, token), f"{said_before} {raw[i]}", others))
            elif (
                noun_before
                and token in self._siblings
                and (before in self._siblings[token] or before not in self._vocabulary)
            ):
                others = tuple(f"{m} {token}" for m in sorted(self._siblings[token] - {before}))
                found.append(Named((before, token), f"{said_before} {raw[i]}", others))
        return found

    def _is_name(self, before: str, token: str, said: str) -> bool:
        """``token`` names one of several things the facts name after ``before`` (room Oak, room Elm;
        car park A, car park B), or would, being a name the facts do not know."""
        names = self._names.get(before, {})
        if token in _FUNCTION or len(names) < 2:
            return False
        # A name the facts do not give (Whisper writes "meeting room oak" as often as "Oak").
        return token in names or (token.isalpha() and token not in self._vocabulary)

    def _code(self, token: str, raw: list[str], i: int) -> Named:
        prefix = _prefix(token)
        same = tuple(self._code_phrases[c] for c in self._codes if _prefix(c) == prefix and c != token)
        after = raw[i + 1] if i + 1 < len(raw) else ""
        head = after if after.isalpha() and _stem(after.lower()) not in _FUNCTION else ""
        before = [w for w in raw[max(0, i - 2) : i] if w.isalpha() and w.lower() not in _FUNCTION]
        said = " ".join([*before[-2:], raw[i]]) if len(before) == len(raw[max(0, i - 2) : i]) else raw[i]
        return Named((token,), said, same, head)

    def holds(self, unit: Unit, item: Named) -> bool:
        """Whether ``unit`` (its section's title too) is about ``item``."""
        tokens = self._tokens[unit.number - 1]
        if len(item.words) == 1 and item.words[0] in _DAYS:
            return _covers_day(unit.text, item.words[0]) or item.words[0] in tokens
        size = len(item.words)
        return any(tuple(tokens[i : i + size]) == item.words for i in range(len(tokens) - size + 1))

    def answer(
        self, number: int, question: str, *, not_known: str, unknown_item: str, known_items: str
    ) -> SiteAnswer:
        """What to say for the model's choice of unit ``number`` (0: none) for ``question``."""
        question = _digits(question)
        named = self.named(question)
        if number < 0 or number > len(self.units):
            return self._decline(
                named, None, not_known, unknown_item, known_items, f"unknown number {number}"
            )
        if number == 0:
            return self._decline(named, None, not_known, unknown_item, known_items, "none chosen")
        unit = self.units[number - 1]
        problem = self._problem(unit, question, named) or self._which_one(unit, question, named)
        if problem is None:
            return SiteAnswer(unit.text, chosen=(number,))
        better = self._best_unit(question, named) if problem != "no figure" else None
        if better is not None:  # a small model's neighbour (one off): the one sentence that fits
            return SiteAnswer(better.text, chosen=(better.number,), why=f"{problem}; [{better.number}] fits")
        missing = next((item for item in named if not self.holds(unit, item)), None)
        return self._decline(named, missing, not_known, unknown_item, known_items, problem)

    def _which_one(self, unit: Unit, question: str, named: list[Named]) -> str | None:
        """The question asks about one of several things the facts name apart (Whisper lost "Ash" of
        "meeting room Ash"), and the sentence names one of them: not an answer to it."""
        asked = set(_words(question))
        own = {(word, name) for word, name in self._pairs(unit) if word in asked and name not in asked}
        if not own:
            return None
        others = [
            u
            for u in self.units
            if u.number != unit.number
            and self._problem(u, question, named) is None
            and any(word in {w for w, _ in own} for word, _ in self._pairs(u))
        ]
        return "which one: the question names none of them" if others else None

    def _pairs(self, unit: Unit) -> set[tuple[str, str]]:
        """The (word, name) pairs of ``unit``: ("room", "oak") of "Meeting room Oak"."""
        tokens = self._tokens[unit.number - 1]
        return {
            (left, right)
            for left, right in itertools.pairwise(tokens)
            if right in self._names.get(left, {}) and len(self._names[left]) >= 2
        }

    def _problem(self, unit: Unit, question: str, named: list[Named]) -> str | None:
        """Why ``unit`` does not answer ``question``; None when it may: it must hold everything the
        person named, and every word of the question the facts use anywhere ("visitors" and "park",
        not only "park"); a question of words the facts never use is about something they do not hold."""
        missing = [item for item in named if not self.holds(unit, item)]
        if missing:
            return f"not named: {missing[0].said}"
        content = _content(question)
        known = content & self._stems
        unknown = _unknown_things(question, self._stems)
        if (content and not known) or unknown:
            return f"about something else{': ' + ', '.join(unknown) if unknown else ''}"
        held = known & self._unit_stems[unit.number - 1]
        if not held:
            return "not about the question"
        # Every word of the question the facts use must be in it ("parking" and "cost", not only
        # "parking"), unless it holds what the person named ("the curing oven" answers "how hot"),
        # and then no other sentence may hold more of them.
        if held != known and (not named or any(known & stems > held for stems in self._unit_stems)):
            return f"not about: {', '.join(sorted(known - held))}"
        if _FIGURE_ASKED.search(question) and not any(c.isdigit() for c in unit.text):
            return "no figure"
        return None

    def _best_unit(self, question: str, named: list[Named]) -> Unit | None:
        """The one unit that answers ``question`` by ``_problem``'s rules (a small model's choice is
        often its neighbour), when there is exactly one."""
        content = _content(question)
        known = content & self._stems
        if len(content - known) > (1 if len(known) >= 2 else 0):  # "is line 3 running?": never said
            return None
        fitting = [u for u in self.units if self._problem(u, question, named) is None]
        return fitting[0] if len(fitting) == 1 else None

    def _decline(
        self,
        named: list[Named],
        missing: Named | None,
        not_known: str,
        unknown_item: str,
        known_items: str,
        why: str,
    ) -> SiteAnswer:
        # "I have nothing on the M6 bolts" only of a thing no sentence holds (line 3 may be in one
        # that does not answer this question).
        unheld = [item for item in named if not any(self.holds(u, item) for u in self.units)]
        missing = missing if missing in unheld else next(iter(unheld), None)
        if missing is None or not unknown_item:
            return SiteAnswer(not_known, declined=True, why=why)
        thing = f"{missing.said} {missing.head}".strip()
        text = unknown_item.replace("{item}", _with_article(thing))
        if missing.siblings and known_items:
            text += " " + known_items.replace("{items}", _listed([*missing.siblings]))
        return SiteAnswer(text, declined=True, why=why)


# How a question asks, not what it is about (a sentence of the facts need not hold these).
# fmt: off
_ASKING = frozenset((  # noqa: SIM905 (a word list reads better as text)
    "a an the and or but so if then than that this these those there here where when what which who whom "
    "whose why how is are was were be been am do does did have has had will would shall should can could "
    "may might must not no yes i me my you your he him his she her it its we us our they them their of in "
    "on at to for from by with about into as all any some each every many much more most please tell "
    "know need needs get take takes go find say number time kind sort start starts begin begins end ends "
    "finish finishes"
).split())
# fmt: on


def _content(text: str) -> set[str]:
    """The words of ``text`` that say what it is about, stemmed as the facts' search stems them."""
    return {_facts_stem(w) for w in _WORD.findall(text.lower()) if w not in _ASKING and len(w) > 2}


# fmt: off
_NUMBER_WORDS = {
    word: str(value) for value, word in enumerate((  # noqa: SIM905 (a word list reads better as text)
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty"
    ).split())
}
# fmt: on


def _digits(question: str) -> str:
    """Whisper writes "hall four" as often as "hall 4": the number is the same item."""
    return re.sub(
        r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", lambda m: _NUMBER_WORDS[m[1].lower()], question, flags=re.I
    )


def _unknown_things(question: str, stems: set[str]) -> list[str]:
    """Things the question names after "the", "a" or "an" that no sentence of the facts uses ("a
    coffee", "the lunch break", "the maximum height"): the facts cannot answer about them."""
    words = _WORD.findall(question.lower())
    return [
        after
        for article, after in itertools.pairwise(words)
        if article in ("the", "a", "an")
        and after not in _ASKING
        and len(after) > 2
        and _facts_stem(after) not in stems
    ]


def _code_phrase(raw: list[str], i: int) -> str:
    """A code as the facts say it: the words naming it before ("car park P2") and after ("M8 bolts")."""
    before: list[str] = []
    for word in reversed(raw[max(0, i - 2) : i]):
        if word.lower() in _FUNCTION or not word.isalpha():
            break
        before.insert(0, word.lower() if word[:1].isupper() and word[1:].islower() else word)
    after: list[str] = []
    for word in raw[i + 1 : i + 4]:
        if word.lower() in _FUNCTION or not word.isalpha():
            break
        after.append(word)
    return " ".join([*before, raw[i], *after])


def _with_article(thing: str) -> str:
    """ "the M8 bolts", "the night shift"; a day or a numbered place as it is ("Saturdays", "hall 3")."""
    words = thing.split()
    if not words or _stem(words[0].lower()) in _DAYS or any(c.isdigit() for c in words[-1]):
        return thing
    return f"the {thing}"


def listed(items: list[str]) -> str:
    """``items`` as said in a sentence: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _listed(items: list[str]) -> str:
    return listed([_with_article(item) for item in items[:6]])


def _prefix(code: str) -> str:
    return re.match(r"[a-z]*", code)[0]  # type: ignore[index]


def _natural(code: str) -> tuple[str, int]:
    digits = re.search(r"\d+", code)
    return (re.sub(r"\d+", "", code), int(digits[0]) if digits else 0)


def _covers_day(text: str, day: str) -> bool:
    """``text`` says ``day`` in a range ("Monday to Friday") or as "weekdays"."""
    lowered = text.lower()
    wanted = _DAYS.index(day)
    if "weekday" in lowered and wanted < 5:
        return True
    for first, last in re.findall(r"(\w+day)s? (?:to|-|until|through) (\w+day)", lowered):
        if first in _DAYS and last in _DAYS and _DAYS.index(first) <= wanted <= _DAYS.index(last):
            return True
    return False
