"""Turn trace: every timestamp of every turn, a bounded SQLite store, percentiles per stage."""

from __future__ import annotations

from appliance.trace.record import STAGES, TIMESTAMPS, TurnTrace
from appliance.trace.stats import StageSummary, percentile, summarize
from appliance.trace.store import TraceStore

__all__ = [
    "STAGES",
    "TIMESTAMPS",
    "StageSummary",
    "TraceStore",
    "TurnTrace",
    "percentile",
    "summarize",
]
