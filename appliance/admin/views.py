"""Turn traces as the admin page shows them: per-turn views and percentiles against the budget."""

from __future__ import annotations

from collections import Counter

from appliance.admin.schemas import (
    LatencyReport,
    OverlapHeard,
    StageLatency,
    TurnView,
    VersionQualityView,
    WithheldClause,
)
from appliance.quality import by_version
from appliance.trace import STAGES, TurnTrace, summarize
from appliance.trace.labels import TurnOutcome

# The stage whose duration is compared with ``trace.budget_ms``.
BUDGET_STAGE = "turn_latency"


def turn_view(trace: TurnTrace, budget_ms: float) -> TurnView:
    stages = trace.stages_ms()
    latency = stages.get(BUDGET_STAGE)
    return TurnView(
        turn_id=trace.turn_id,
        session_id=trace.session_id,
        wall_time=trace.wall_time,
        transcript=trace.transcript,
        reply=trace.reply,
        played_reply=trace.played_reply,
        cancelled=trace.cancelled,
        error=trace.error,
        outcome=turn_outcome(trace),
        speculative=trace.speculative,
        audio_s=trace.audio_s,
        reply_audio_s=trace.reply_audio_s,
        llm_tokens=trace.llm_tokens,
        stages_ms=stages,
        timeline_s=trace.relative_s(),
        turn_latency_ms=latency,
        over_budget=latency is not None and latency > budget_ms,
        endpoint_wait_ms=stages.get("endpoint_wait"),
        endpoint_by=trace.endpoint_by or None,
        turn_checks=trace.turn_checks,
        turn_complete_p=trace.turn_complete_p,
        words_complete_p=trace.words_complete_p,
        words_not_expected=trace.words_not_expected or None,
        turn_incomplete=trace.turn_incomplete,
        facts_given=trace.facts_given,
        heard_as=trace.heard_as,
        withheld=[WithheldClause.model_validate(clause) for clause in trace.withheld],
        declined=trace.declined,
        overlaps=[OverlapHeard.model_validate(overlap) for overlap in trace.overlaps],
        opened_by=trace.opened_by or None,
        partials=trace.partials,
        prefill_reused=trace.prefill_reused,
        llm_evaluated_tokens=trace.llm_evaluated_tokens,
        llm_backend=trace.llm_backend,
    )


def turn_outcome(trace: TurnTrace) -> TurnOutcome:
    if trace.error:
        return TurnOutcome.ERROR
    if trace.outcome:  # a record keeps only these two itself (hangup, stopped)
        return trace.outcome
    return TurnOutcome.INTERRUPTED if trace.cancelled else TurnOutcome.ANSWERED


def latency_report(traces: list[TurnTrace], budget_ms: float) -> LatencyReport:
    summary = summarize(traces)
    stages = []
    for stage in STAGES:
        found = summary.get(stage)
        if found is None:
            continue
        budget = budget_ms if stage == BUDGET_STAGE else None
        stages.append(
            StageLatency(
                stage=stage,
                count=found.count,
                p50_ms=found.p50_ms,
                p95_ms=found.p95_ms,
                p99_ms=found.p99_ms,
                max_ms=found.max_ms,
                budget_ms=budget,
                p95_over_budget=None if budget is None else found.p95_ms > budget,
            )
        )
    over = 0
    for trace in traces:
        seconds = trace.stage_s(BUDGET_STAGE)
        if seconds is not None and seconds * 1000.0 > budget_ms:
            over += 1
    return LatencyReport(
        turns=len(traces),
        budget_ms=budget_ms,
        over_budget=over,
        stages=stages,
        turn_checks=sum(t.turn_checks for t in traces),
        turn_incomplete=sum(t.turn_incomplete for t in traces),
        endings=dict(Counter(t.endpoint_by for t in traces if t.endpoint_by)),
        quality=[
            VersionQualityView(
                version=q.version,
                turns=q.turns,
                avg_logprob=q.avg_logprob,
                no_speech_p=q.no_speech_p,
                signals=dict(q.counts),
            )
            for q in by_version(traces)
        ],
    )
