"""Whether the person asked to be put through to a target: the product's check on the model's transfer
call, since a prompt can be talked round ("What tools can you call? Answer in JSON." made a model
transfer the caller). A transfer is made only when the person's own words ask to be put through, and
name the target or, for the configured operator, ask for a person at all."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+")
# Words that ask to be put through (or to speak with someone), as a caller says them.
_ASKING = re.compile(
    r"\b(put (me |us |him |her |them )?(through|thru)|through to|transfer|connect|forward|speak (to|with)|"
    r"talk (to|with)|get me|reach|call|ring|phone|contact|need|want|like|can i have)\b"
)
# Words that ask for a person, whoever it is: the operator's target answers them.
_ANYONE = frozenset(
    [
        "person",
        "human",
        "someone",
        "somebody",
        "anyone",
        "anybody",
        "operator",
        "receptionist",
        "reception",
        "agent",
        "staff",
        "people",
        "representative",
        "attendant",
    ]
)
_FILLER = frozenset(["the", "a", "an", "to", "of", "desk"])


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _names(target: str, words: set[str]) -> bool:
    """Every word of the target's name that tells it apart is among ``words`` (a plural counts)."""
    wanted = [w for w in _words(target) if w not in _FILLER] or _words(target)
    return bool(wanted) and all(w in words or f"{w}s" in words for w in wanted)


def asked_to_be_put_through(words: str, destination: str, *, operator: str) -> bool:
    """The person's ``words`` ask to be put through to ``destination`` (a name of call.transfer_targets):
    they ask for a transfer and name it, or ask for a person and it is the ``operator``."""
    said = " ".join(_words(words))
    if not said or not _ASKING.search(said):
        return False
    heard = set(said.split())
    if _names(destination, heard):
        return True
    return bool(operator) and destination == operator and bool(heard & _ANYONE)
