"""Light text clean-up before synthesis: what the voice should say, not what a screen would show."""

from __future__ import annotations

import re

__all__ = ["speakable"]

# espeak reads "Dr." as a whole sentence ("doctor." with a falling pitch and a pause); spelling the
# title out keeps it attached to the name.
_TITLES = {
    "dr": "Doctor",
    "mr": "Mister",
    "mrs": "Missus",
    "ms": "Miz",
    "prof": "Professor",
    "mt": "Mount",
}
_TITLE_RE = re.compile(r"\b(" + "|".join(_TITLES) + r")\.(?=\s+[A-Z])", re.IGNORECASE)
_BULLET_RE = re.compile(r"^\s*(?:[-*•+]|#+)\s+", re.MULTILINE)
# "1. Apples" at the start of a line is a list item, not the sentence "One."
_NUMBERED_RE = re.compile(r"^\s*(\d+)[.)]\s+", re.MULTILINE)
_MARKUP_RE = re.compile(r"(\*\*|__|\*|`+|~~)")
_SPACE_RE = re.compile(r"\s+")


def speakable(text: str) -> str:
    """``text`` without markdown bullets, headings or emphasis, titles spelt out, spaces collapsed.

    Returns "" when nothing speakable (no letter or digit) is left.
    """
    cleaned = _BULLET_RE.sub("", text)
    cleaned = _NUMBERED_RE.sub(r"\1, ", cleaned)
    cleaned = _MARKUP_RE.sub("", cleaned)
    cleaned = _TITLE_RE.sub(lambda m: _TITLES[m.group(1).lower()], cleaned)
    cleaned = _SPACE_RE.sub(" ", cleaned).strip()
    if not any(ch.isalnum() for ch in cleaned):
        return ""
    return cleaned
