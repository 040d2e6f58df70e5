"""What of a reply was actually heard."""

from __future__ import annotations

from collections.abc import Sequence


def played_text(clauses: Sequence[str], clause_samples: Sequence[int], played_samples: int) -> str:
    """The words heard: whole clauses fully played, then the played fraction of the next one,
    rounded down to whole words."""
    words: list[str] = []
    remaining = max(0, played_samples)
    for clause, samples in zip(clauses, clause_samples, strict=False):
        clause_words = clause.split()
        if samples <= 0:
            break
        if remaining >= samples:
            words.extend(clause_words)
            remaining -= samples
            continue
        heard = int(len(clause_words) * remaining / samples)
        words.extend(clause_words[:heard])
        break
    return " ".join(words)
