"""[bundle]: where the engine bundle lives, how many versions are kept, when a version is rolled back,
and what a candidate must match to be activated."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from engines.bundle_store import DEFAULT_KEEP
from engines.params import Params


class BundleParams(Params):
    """The engine bundle: where it lives, the versions kept, when one is rolled back, and what a
    candidate must match."""

    dir: Path = Field(
        Path("~/.cache/appliance/bundle"),
        description="the engine bundle, built by `python -m build_scripts bundle --out DIR`",
    )
    keep: int = Field(
        DEFAULT_KEEP,
        ge=2,
        le=20,
        description="bundle versions kept on disk; an import or a build removes the oldest beyond this "
        "(never the active one nor the previous one, the rollback's target)",
    )
    verify_on_start: bool = Field(
        True,
        description="re-hash every bundle file when the daemon starts (false: presence and sizes only, "
        "as the other commands always do; `appliance bundle verify` re-hashes on demand)",
    )

    rollback_after_crashes: int = Field(
        3,
        ge=0,
        le=4,
        description="a bundle version whose daemon ended this many times in a crash or a missed watchdog "
        "ping within crash_window_min is rolled back at the next start (0: never); under appliance.service's "
        "StartLimitBurst (5), so that systemd still starts the daemon that rolls back",
    )
    crash_window_min: float = Field(
        10.0,
        gt=0.0,
        le=1440.0,
        description="... within this many minutes of each other (see rollback_after_crashes)",
    )

    canary_max_wer_increase: float = Field(
        0.02,
        ge=0.0,
        le=1.0,
        description="appliance bundle evaluate: a candidate's WER may be at most this much (0.02: two "
        "points) above the active bundle's",
    )
    canary_max_latency_ratio: float = Field(
        1.25,
        ge=1.0,
        le=10.0,
        description="... and its engines' p95 share of a turn (or under trace.budget_ms) and each stage's "
        "p50 (speech recognition, first clause, first audio) at most this many times the active one's",
    )
    canary_max_answer_drop: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="... and the share of the facts and tool calls the set expects that its answers have at "
        "most this much (0.1: ten points) below the active one's",
    )
    canary_max_memory_ratio: float = Field(
        1.5, ge=1.0, le=10.0, description="... and its peak memory at most this many times the active one's"
    )

    @field_validator("dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()
