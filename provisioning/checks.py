"""A preflight check's result."""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # pass | warn | fail | skip (not applicable here)
    detail: str
    fix: str | None = None
