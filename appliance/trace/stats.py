"""Percentiles per stage (pure functions over plain values)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from appliance.trace.record import STAGES, TurnTrace


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


@dataclass(frozen=True)
class StageSummary:
    stage: str
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


def summarize(traces: Iterable[TurnTrace], *, include_cancelled: bool = False) -> dict[str, StageSummary]:
    """p50/p95/p99 of each stage over the turns that reached both ends of it."""
    samples: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for trace in traces:
        if trace.error or (trace.cancelled and not include_cancelled):
            continue
        for stage in STAGES:
            seconds = trace.stage_s(stage)
            if seconds is not None:
                samples[stage].append(seconds * 1000.0)
    summary: dict[str, StageSummary] = {}
    for stage, values in samples.items():
        if values:
            summary[stage] = StageSummary(
                stage=stage,
                count=len(values),
                p50_ms=round(percentile(values, 50), 1),
                p95_ms=round(percentile(values, 95), 1),
                p99_ms=round(percentile(values, 99), 1),
                max_ms=round(max(values), 1),
            )
    return summary
