"""The grounding check: a clause of a reply may state a figure (a number, a time, an extension, a room,
a price) only when the turn's sources gave it: the site's facts given for the turn, a tool's answer,
the conversation's own words, or the figures the site allows (``agent.allowed_figures``).

A figure is matched by value in any of its spoken or written forms ("twenty-five" = 25, "half past
seven" = "7:30" = "7.30 am", "2 pm" = "14:00") and by what it measures: the word after it in the
clause ("3 levels") must occur in the source sentence that gives the value ("valid for 3 days" does
not ground "3 levels"). A clause is also withheld when it repeats the product's own instructions to
the model. Pure and fast (a clause is checked in well under a millisecond): it runs in the clause
stream between the model and the voice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

_SMALL = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
}  # fmt: skip
_NUMBER_WORDS = {**_SMALL, **_TENS, **_SCALES}
# Words that are numbers but say no figure on their own ("one of them", "a second").
_NOT_FIGURES = {"one", "zero", "first", "second"}
# Written units and symbols, as the word they are said with.
_UNIT_SYNONYMS = {
    "nm": "newton", "newtonmetr": "newton", "kg": "kilogram", "kilo": "kilogram", "g": "gram",
    "km": "kilometr", "m": "metr", "meter": "metr", "cm": "centimetr", "mm": "millimetr",
    "h": "hour", "hr": "hour", "min": "minut", "sec": "second", "s": "second", "%": "percent",
    "cent": "percent", "€": "euro", "eur": "euro", "$": "dollar", "usd": "dollar", "£": "pound",
    "gbp": "pound", "°": "degre", "°c": "degre", "c": "degre", "kph": "kilometr", "km/h": "kilometr",
    "mph": "mile", "l": "litr", "liter": "litr", "ext": "extension", "no": "number", "nr": "number",
}  # fmt: skip
# Words after a figure that do not say what it measures.
_FILLER = frozenset(
    (  # noqa: SIM905 (a word list reads better as text)
        "a an and are as at be but by for from in into is it of on or so than that the then this to up "
        "until was were which with till through via each every per o'clock oclock need needs must should can could will would "
        "may might has have had do does did get gets take takes you it they we he she i"
    ).split()
)
_TOKEN = re.compile(
    r"[€$£]?\d+(?:[.,:]\d+)*(?:st|nd|rd|th)?%?"  # 25, 1,200, 3.5, 7:30, 3rd, 40%, €4.50
    r"|[A-Za-z]+\d[\w-]*"  # B12, A3-2
    r"|[A-Za-z°€$£%]+(?:[-'][A-Za-z]+)*"  # words, twenty-five, o'clock
    r"|[,;:.!?()]"  # kept so that what a figure measures is not read across a comma
)
_CLAUSE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_CURRENCIES = frozenset({"euro", "dollar", "pound"})
# The words of a question that say what kind of answer is wanted, not what it is about.
_ASKING = frozenset(
    (  # noqa: SIM905 (a word list reads better as text)
        "how many much what when where who whom whose which why there here please tell me my our your "
        "us know about any anything something time long often again and also still now today"
    ).split()
)
_BEFORE_TIMES = frozenset({"at", "from", "until", "till", "before", "after", "by", "to"})
_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# A day is a figure too: "opens at 7:30 on Saturdays" is not what "on weekdays" says.
_DAY: dict[str, frozenset[str]] = {
    **{name: frozenset({f"d:{name[:3]}"}) for name in _DAY_NAMES},
    "weekday": frozenset(f"d:{name[:3]}" for name in _DAY_NAMES[:5]),
    "weekend": frozenset({"d:sat", "d:sun"}),
}
_DAYS = {**_DAY, **{name + "s": days for name, days in _DAY.items()}}  # "Saturdays", "weekdays"
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_MERIDIEM = {"am": 0, "a.m": 0, "a.m.": 0, "pm": 12, "p.m": 12, "p.m.": 12}


class WithheldWhy(str, Enum):
    """Why a clause was not spoken (the trace, /metrics)."""

    FIGURE = "figure"  # states a figure no source gave
    OFF_SUBJECT = "off_subject"  # a source's figure about something the person did not ask about
    INTERNAL = "internal"  # repeats the product's instructions to the model

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Figure:
    text: str  # as the clause writes it
    values: frozenset[str]  # every canonical value it may mean: "25", "t:450" (7:30 as minutes)
    unit: str  # what it measures: the stem of the word after it ("level"), or ""


@dataclass
class _Occurrence:
    values: frozenset[str]
    context: frozenset[str]  # the stems of the words of its sentence (and the section's title)
    sentence: int  # which source sentence
    said: bool  # the conversation's words (the person's own figures), not a fact or a tool's answer
    any_subject: bool = False  # the site's allowed figures and name: an answer to anything
    moment: bool = False  # the clock's line: true of now, says nothing of the site's figures

    @property
    def of_the_site(self) -> bool:
        return not (self.said or self.moment)


@dataclass
class Verdict:
    ungrounded: list[str] = field(default_factory=list)  # the figures no source gave, as written
    why: WithheldWhy | None = None

    @property
    def ok(self) -> bool:
        return self.why is None


def stem(word: str) -> str:
    word = word.lower().strip(".'’")
    word = _UNIT_SYNONYMS.get(word, word)
    for ending in ("ies", "ing", "es", "ed", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)] + ("y" if ending == "ies" else "")
            break
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word


def _tokens(text: str) -> list[str]:
    text = re.sub(r"\b([ap])\.\s?m\.?(?=\W|$)", r"\1m", text, flags=re.IGNORECASE)
    return _TOKEN.findall(text.replace("\u2019", "'").replace("\u2013", " to ").replace("\u2014", " "))


def figures(text: str) -> list[Figure]:
    """The figures ``text`` states, each with the values it may mean and what it measures."""
    found, _ = _scan(text)
    return found


def _scan(text: str) -> tuple[list[Figure], list[str]]:
    tokens = _tokens(text)
    lowered = [t.lower() for t in tokens]
    out: list[Figure] = []
    index = 0
    while index < len(tokens):
        day = _DAYS.get(lowered[index])
        if day is not None:
            out.append(Figure(tokens[index], day, ""))
            index += 1
            continue
        timed = _time_at(lowered, index)
        taken = timed or _number_at(lowered, index)
        if taken is None:
            index += 1
            continue
        values, end = taken
        word = lowered[index]
        symbol = word[0] if word[0] in "€$£" else "%" if word.endswith("%") else ""
        if timed:
            unit = ""  # a time of day measures nothing else
        elif symbol:
            unit = stem(symbol)
        else:
            unit = _unit_after(lowered, end)
        if unit in _CURRENCIES and not symbol and end + 1 < len(lowered):
            cents = _number_at(lowered, end + 1)  # "four euros fifty": 4.50
            if cents is not None and len(values) == 1 and len(cents[0]) == 1:
                whole, part = next(iter(values)), next(iter(cents[0]))
                if whole.isdigit() and part.isdigit() and int(part) < 100:
                    values = frozenset({_number_value(f"{whole}.{int(part):02d}") or whole})
                    end = cents[1]
        if index and lowered[index - 1] in _BEFORE_TIMES and len(values) == 1:
            hour = _hour_word(next(iter(values)))
            if hour is not None and end - index == 1:
                values = values | _hours(hour)  # "opens at seven": a time too
        out.append(Figure(" ".join(tokens[index:end]), values, unit))
        index = end
    return out, lowered


def _unit_after(lowered: list[str], end: int) -> str:
    if end >= len(lowered):
        return ""
    word = lowered[end]
    if not word[0].isalnum() or word in _FILLER or word in _NUMBER_WORDS or any(ch.isdigit() for ch in word):
        return ""
    return stem(word)


def _number_value(token: str) -> str | None:
    """A written number's canonical value ("1,200" -> "1200", "3.50" -> "3.5", "3rd" -> "3")."""
    token = token.lstrip("€$£").rstrip("%")
    token = re.sub(r"(st|nd|rd|th)$", "", token)
    if re.fullmatch(r"\d{1,3}(,\d{3})+", token):
        token = token.replace(",", "")
    token = token.replace(",", ".")
    if not re.fullmatch(r"\d+(\.\d+)?", token):
        return None
    if "." in token:
        token = token.rstrip("0").rstrip(".")
    return token.lstrip("0") or "0"


def _number_at(lowered: list[str], index: int) -> tuple[frozenset[str], int] | None:
    word = lowered[index]
    if word[0].isdigit() or word[0] in "€$£":
        if ":" in word:
            return None  # a time, handled by _time_at; anything else with a colon is not a figure
        value = _number_value(word)
        return (frozenset({value}), index + 1) if value is not None else None
    if re.fullmatch(r"[a-z]+\d[\w-]*", word):
        return frozenset({word.replace("-", "")}), index + 1  # B12: a room, a machine
    if word in _ORDINALS and word not in _NOT_FIGURES:
        return frozenset({str(_ORDINALS[word])}), index + 1
    spelled = _spelled_at(lowered, index)
    if spelled is None:
        return None
    number, end = spelled
    if end == index + 1 and word in _NOT_FIGURES:
        return None
    return frozenset({str(number)}), end


def _spelled_at(lowered: list[str], index: int) -> tuple[int, int] | None:
    """A spelled-out number from ``index``: "twenty-five", "one hundred and twenty", "two thousand"."""
    total, current, end, seen = 0, 0, index, False
    while end < len(lowered):
        parts = lowered[end].split("-")
        if not all(p in _NUMBER_WORDS for p in parts):
            if (
                lowered[end] == "and"
                and seen
                and end + 1 < len(lowered)
                and lowered[end + 1] in _NUMBER_WORDS
            ):
                end += 1
                continue
            break
        for part in parts:
            number = _NUMBER_WORDS[part]
            if number in (100,):
                current = max(current, 1) * 100
            elif number >= 1000:
                total += max(current, 1) * number
                current = 0
            else:
                current += number
        seen = True
        end += 1
    if not seen:
        return None
    return total + current, end


def _time_at(lowered: list[str], index: int) -> tuple[frozenset[str], int] | None:
    """A time of day: "7:30", "14:00", "7.30 am", "7 pm", "noon", "half past seven", "quarter to
    eight", "seven thirty am". Its values are minutes after midnight ("t:450"); without am or pm both
    halves of the day are meant."""
    word = lowered[index]
    if word in ("noon", "midday"):
        return frozenset({"t:720"}), index + 1
    if word == "midnight":
        return frozenset({"t:0"}), index + 1
    if word in ("half", "quarter") and index + 2 < len(lowered) and lowered[index + 1] in ("past", "to"):
        hour = _hour_word(lowered[index + 2])
        if hour is None:
            return None
        minutes = 30 if word == "half" else 15
        hours, mins = (hour, minutes) if lowered[index + 1] == "past" else (hour - 1, 60 - minutes)
        return _clock(hours % 24, mins, lowered, index + 3)
    match = re.fullmatch(r"(\d{1,2})([:.])(\d{2})", word)
    after = lowered[index + 1] if index + 1 < len(lowered) else ""
    if match and (match.group(2) == ":" or after in _MERIDIEM):  # 3.50 is a price, 3.50 pm a time
        return _clock(int(match.group(1)), int(match.group(3)), lowered, index + 1)
    hour = _hour_word(word)
    if hour is None:
        return None
    if after in _MERIDIEM or after in ("o'clock", "oclock"):
        return _clock(hour, 0, lowered, index + 1)
    spoken = _minute_words(lowered, index + 1) if not word[0].isdigit() else None
    if spoken is not None:
        minutes, end = spoken
        if end < len(lowered) and lowered[end] in _MERIDIEM:
            return _clock(hour, minutes, lowered, end)
    return None


def _hour_word(word: str) -> int | None:
    if word.isdigit() and len(word) <= 2 and int(word) <= 24:
        return int(word)
    value = _SMALL.get(word)
    return value if value is not None and 1 <= value <= 12 else None


def _hours(hour: int) -> frozenset[str]:
    return frozenset({f"t:{hour % 24 * 60}"} | ({f"t:{(hour % 12 + 12) * 60}"} if hour <= 12 else set()))


def _minute_words(lowered: list[str], index: int) -> tuple[int, int] | None:
    spelled = _spelled_at(lowered, index)
    if spelled is None or not 10 <= spelled[0] <= 59:
        return None
    return spelled


def _clock(hours: int, minutes: int, lowered: list[str], end: int) -> tuple[frozenset[str], int] | None:
    if not (0 <= hours <= 24 and 0 <= minutes <= 59):
        return None
    meridiem = lowered[end] if end < len(lowered) else ""
    if meridiem in _MERIDIEM:
        base = hours % 12 + _MERIDIEM[meridiem]
        return frozenset({f"t:{base * 60 + minutes}"}), end + 1
    if meridiem in ("o'clock", "oclock"):
        end += 1
    candidates = {hours % 24 * 60 + minutes}
    if hours <= 12:
        candidates.add((hours % 12 + 12) * 60 + minutes)
    return frozenset(f"t:{c}" for c in candidates), end


class Sources:
    """What a turn may state figures from: facts and tools' answers (``add``), the conversation's
    words (``add(said=True)``) and the site's allowed figures."""

    def __init__(self, *, check_figures: bool = True) -> None:
        self.check_figures = check_figures  # False: only the instructions are checked
        self._occurrences: dict[str, list[_Occurrence]] = {}
        self._sentence_values: list[frozenset[str]] = []
        self._internal: dict[int, set[tuple[str, ...]]] = {}
        self._asked: set[str] = set()

    def add(
        self,
        text: str,
        *,
        title: str = "",
        said: bool = False,
        any_subject: bool = False,
        moment: bool = False,
    ) -> None:
        """A source text: a facts section with its ``title``, a tool's answer, (``said``) a message
        of the conversation, (``any_subject``) a figure the site allows in any answer, or
        (``moment``) the clock: today's day grounds "today is Saturday", not "opens on Saturdays"."""
        heading = {stem(w) for w in _tokens(title) if _is_word(w) and not _is_filler(w)}
        for sentence in _CLAUSE_END.split(text):
            found, lowered = _scan(sentence)
            if not found:
                continue
            context = frozenset({stem(w) for w in lowered if _is_word(w) and not _is_filler(w)} | heading)
            number = len(self._sentence_values)
            self._sentence_values.append(frozenset(v for figure in found for v in figure.values))
            for figure in found:
                occurrence = _Occurrence(figure.values, context, number, said, any_subject, moment)
                for value in figure.values:
                    self._occurrences.setdefault(value, []).append(occurrence)

    def ask(self, text: str) -> None:
        """What the person said in this conversation: a figure from the sources must come from a
        sentence (or section) about one of its subjects ("How many lockers?" is not answered with
        the visitor spaces' 40)."""
        self._asked.update(
            stem(w) for w in _tokens(text) if _is_word(w) and not _is_filler(w) and w.lower() not in _ASKING
        )

    def add_all(self, texts: Iterable[str], *, said: bool = False) -> None:
        for text in texts:
            self.add(text, said=said)

    def add_internal(self, text: str, *, run: int = 5) -> None:
        """An instruction of the product's to the model, which no reply may repeat: no ``run`` words
        of it in a row (a persona's phrases need a longer run than a tool's notes, since a reply may
        fairly say what the device is)."""
        words = tuple(_plain_words(text))
        runs = self._internal.setdefault(run, set())
        runs.update(words[start : start + run] for start in range(len(words) - run + 1))

    def _repeats_instructions(self, words: list[str], new_from: int) -> bool:
        """A run of an instruction's words that ends in ``words[new_from:]``."""
        return any(
            tuple(words[end - run : end]) in runs
            for run, runs in self._internal.items()
            for end in range(max(new_from + 1, run), len(words) + 1)
        )

    def _found(self, figure: Figure) -> list[_Occurrence]:
        return [
            occurrence
            for value in figure.values
            for occurrence in self._occurrences.get(value, ())
            if not figure.unit or figure.unit in occurrence.context
        ]

    def grounds(self, figure: Figure) -> bool:
        return bool(self._found(figure))

    def check(self, clause: str, *, after: str = "") -> Verdict:
        """Whether ``clause`` may be spoken, ``after`` the reply's words so far (a reply is spoken in
        short clauses: an instruction read out runs across them). Besides each figure's own source:
        a figure from the facts said together with one only the person said ("the M8 bolts on line 5
        need 45 Nm", "opens at 7:30 on Saturdays"), in the same sentence of the reply, must come from a
        source sentence that holds the person's figure too, or it answers what was not asked."""
        back = max(self._internal, default=1) - 1  # enough words of ``after`` for the longest run
        before = _plain_words(after)[-back:] if back else []
        if self._repeats_instructions([*before, *_plain_words(clause)], len(before)):
            return Verdict(why=WithheldWhy.INTERNAL)
        if not self.check_figures:
            return Verdict()
        stated = [(figure, self._found(figure)) for figure in figures(clause)]
        missing = [figure.text for figure, found in stated if not found]
        if missing:
            return Verdict(missing, WithheldWhy.FIGURE)
        off_subject = [
            figure.text
            for figure, found in stated
            if self._asked and not any(o.said or o.any_subject or o.context & self._asked for o in found)
        ]
        if off_subject:
            return Verdict(off_subject, WithheldWhy.OFF_SUBJECT)
        # The person's figures (or the clock's) stated earlier in the same sentence of the reply count:
        # a reply is checked in clauses ("The M8 bolts on press" / "line 2 need 45 newton metres").
        started = _SENTENCE_END.split(after)[-1] if after else ""
        earlier = [(figure, self._found(figure)) for figure in figures(started)]
        theirs = [figure for figure, found in [*earlier, *stated] if all(not o.of_the_site for o in found)]
        for figure, found in stated:
            sentences = [o.sentence for o in found if o.of_the_site]
            if (
                theirs
                and sentences
                and not any(
                    all(other.values & self._sentence_values[s] for other in theirs) for s in sentences
                )
            ):
                missing.append(figure.text)
        return Verdict(missing, WithheldWhy.FIGURE) if missing else Verdict()


def _is_filler(word: str) -> bool:
    return word.lower() in _FILLER


def _is_word(token: str) -> bool:
    return token[0].isalnum()


def _plain_words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())
