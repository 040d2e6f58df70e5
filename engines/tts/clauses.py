"""Streamed reply text -> speakable pieces: a short first piece so speech starts early, then clauses.

Boundaries are only decided once the character after a punctuation mark is known, so "3.5", "1,000",
"10:30" and "example.com" are never split, and "Dr. Smith", "e.g. this" or "10 a.m. tomorrow" are not
taken for sentence ends. Cuts without punctuation fall at a word boundary, never right after an
article, preposition, conjunction or number ("at | nine" is avoided, "3.5 | million" too).
"""

from __future__ import annotations

from engines.tts.params import default_first_clause_words

__all__ = ["ClauseSplitter", "split_text"]

_SENTENCE_END = ".!?…"
_CLAUSE_END = ",;:—–"
_CLOSERS = "\"')]}”’»"
# Never the end of a sentence when followed by a space.
_ABBREVIATIONS = {"dr", "mr", "mrs", "ms", "prof", "mt", "vs", "e.g", "i.e", "approx", "fig", "cf", "ca"}
# A sentence end only when the next word starts with a capital letter ("No. 5" vs "No. I think").
_MAYBE_FINAL = {"etc", "a.m", "p.m", "inc", "ltd", "co", "jr", "sr", "st", "no", "u.s", "u.k"}
# Words a cut without punctuation should not fall right after.
_NO_END_WORDS = frozenset(
    (  # noqa: SIM905 (a word list reads better as text than as 80 quoted strings)
        "a an the of to in on at by for with from into onto over under about per via and or but nor so "
        "as than if that this these those is are was were be been am will would can could should may "
        "might must do does did has have had not no my your his her its our their very more most less "
        "point hundred thousand million billion trillion mister doctor dr mr mrs ms"
    ).split()
)
_FIRST_WORDS = default_first_clause_words()
_MAX_EXTRA_WORDS = 4  # how far a cut may move past the word limit to avoid a bad end word


def _word_key(token: str) -> str:
    return token.strip(_CLOSERS + "\"'([{“‘«" + _SENTENCE_END + _CLAUSE_END).lower()


def _good_last_word(token: str) -> bool:
    key = _word_key(token)
    return bool(key) and key not in _NO_END_WORDS and not any(ch.isdigit() for ch in key)


def _has_word(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


class ClauseSplitter:
    """Feed streamed text with ``push``; speak each returned piece; ``flush`` at the end of the reply.

    ``first_clause_words``: the first piece ends at the first punctuation mark or after about this many
    words. ``None`` treats the first piece like the others (for text that is not latency-critical).
    Later pieces end at sentence ends and line breaks, at a comma/semicolon/colon/dash once they have
    ``min_clause_words``, and at a word boundary after ``max_clause_words`` without punctuation.
    """

    def __init__(
        self,
        first_clause_words: int | None = _FIRST_WORDS,
        *,
        min_clause_words: int = 8,
        max_clause_words: int = 20,
    ) -> None:
        if first_clause_words is not None and first_clause_words < 1:
            raise ValueError(f"first_clause_words must be >= 1 or None, got {first_clause_words}")
        if not 1 <= min_clause_words <= max_clause_words:
            raise ValueError(
                f"need 1 <= min_clause_words <= max_clause_words, got {min_clause_words}, {max_clause_words}"
            )
        self.first_clause_words = first_clause_words
        self.min_clause_words = min_clause_words
        self.max_clause_words = max_clause_words
        self._buffer = ""
        self._pieces = 0
        self._line_start = True

    def push(self, text: str) -> list[str]:
        """Add streamed text; return the pieces completed so far (possibly none)."""
        self._buffer += text
        pieces: list[str] = []
        while (cut := self._find_cut()) is not None:
            self._emit(self._buffer[:cut], pieces)
            self._line_start = self._buffer[:cut].endswith("\n")
            self._buffer = self._buffer[cut:]
        return pieces

    def flush(self) -> list[str]:
        """The rest of the reply as a last piece (if it has a word); the splitter is then reset."""
        pieces: list[str] = []
        self._emit(self._buffer, pieces)
        self._buffer = ""
        self._pieces = 0
        self._line_start = True
        return pieces

    def _emit(self, text: str, pieces: list[str]) -> None:
        piece = " ".join(text.split())
        if _has_word(piece):
            pieces.append(piece)
            self._pieces += 1

    def _first(self) -> bool:
        return self._pieces == 0 and self.first_clause_words is not None

    def _find_cut(self) -> int | None:
        buf = self._buffer
        word_limit = self.first_clause_words if self._first() else self.max_clause_words
        assert word_limit is not None
        words = 0
        for i, ch in enumerate(buf):
            if ch == "\n" and _has_word(buf[:i]):
                return i + 1
            if ch in _SENTENCE_END or ch in _CLAUSE_END:
                end = i + 1
                while end < len(buf) and buf[end] in _CLOSERS:
                    end += 1
                if end == len(buf):
                    return None  # the next character decides ("3." may become "3.5")
                if buf[end].isspace():
                    verdict = self._punctuation_cut(buf, i, end, words)
                    if verdict == "wait":
                        return None
                    if verdict == "cut":
                        return end
            elif ch.isspace() and i > 0 and not buf[i - 1].isspace():
                token = buf[:i].split()[-1]
                if not _has_word(token):
                    continue
                words += 1
                if words >= word_limit and (_good_last_word(token) or words >= word_limit + _MAX_EXTRA_WORDS):
                    return i
        return None

    def _punctuation_cut(self, buf: str, i: int, end: int, words_before: int) -> str:
        """'cut', 'skip' or 'wait' for the punctuation mark at ``i`` followed by whitespace at ``end``."""
        ch = buf[i]
        if ch == ".":
            token_start = max(buf.rfind(sep, 0, i) for sep in " \t\n") + 1
            token = buf[token_start:i]
            key = _word_key(token)
            at_line_start = buf[:token_start].rstrip(" \t").endswith("\n") or (
                self._line_start and not buf[:token_start].strip()
            )
            if token.isdigit() and at_line_start:
                return "skip"  # "1. Apples": a list marker
            initial = len(key) == 1 and key.isalpha() and token.lstrip("(\"'").isupper()
            if key in _ABBREVIATIONS or initial:
                return "skip"  # a title or an initial
            if key in _MAYBE_FINAL:
                rest = buf[end:].lstrip()
                if not rest:
                    return "wait"
                if not rest[0].isupper():
                    return "skip"
        if not _has_word(buf[:end]):
            return "skip"
        if ch in _SENTENCE_END:
            return "cut"
        # A clause mark (, ; : dash) in the middle of a sentence.
        words = words_before + 1
        if self._first() or words >= self.min_clause_words:
            return "cut"
        return "skip"


def split_text(text: str, first_clause_words: int | None = None) -> list[str]:
    """All the pieces of a complete text (by default every piece follows the later-piece rules)."""
    splitter = ClauseSplitter(first_clause_words)
    return splitter.push(text) + splitter.flush()
