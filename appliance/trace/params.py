"""[trace]: where the turn traces are kept, how many, and the latency the admin page holds them to."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from engines.params import Params


class TraceParams(Params):
    """The turn traces: where they are kept, how many, and the latency the admin page holds them to."""

    db_path: Path = Field(
        Path("~/.local/state/appliance/turns.sqlite3"), description="the SQLite file of the turn traces"
    )
    max_turns: int = Field(10000, ge=10, le=10_000_000, description="the newest turns kept there")
    budget_ms: int = Field(800, ge=10, le=60000, description="turn latency budget for the admin page")

    @field_validator("db_path")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()
