"""One finished turn described for people: the summary dict (``--json``) and its text form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.trace.record import TurnTrace


def turn_summary(
    trace: TurnTrace, *, reply_wav: Path | None, reply_audio_s: float, fast: bool
) -> dict[str, Any]:
    latency_s = trace.stage_s("turn_latency")
    return {
        "turn_id": trace.turn_id,
        "transcript": trace.transcript,
        "heard": trace.heard or trace.transcript,  # as Whisper wrote it, before the site's words
        "heard_as": trace.heard_as,
        "chosen": trace.chosen,  # the facts' sentences the model chose (agent.answers = select)
        "answer_check": trace.answer_check,
        "declined": trace.declined,
        "withheld": trace.withheld,
        "reply": trace.reply,
        "played_reply": trace.played_reply,
        "error": trace.error,
        "cancelled": trace.cancelled,
        "speculative": trace.speculative,
        "turn_latency_s": None if latency_s is None else round(latency_s, 3),
        "stages_ms": trace.stages_ms(),
        "timestamps_s": trace.relative_s(),
        "audio_s": round(trace.audio_s, 3),
        "reply_audio_s": round(reply_audio_s, 3),
        "reply_wav": str(reply_wav) if reply_wav else None,
        "llm_tokens": trace.llm_tokens,
        "endpoint_by": trace.endpoint_by,
        "turn_checks": trace.turn_checks,
        "turn_complete_p": trace.turn_complete_p,
        "partials": trace.partials,
        "prefill_reused": trace.prefill_reused,
        "llm_prompt_tokens": trace.llm_prompt_tokens,
        "llm_evaluated_tokens": trace.llm_evaluated_tokens,
        "fast": fast,
    }


def describe_turn(summary: dict[str, Any]) -> str:
    said = summary["played_reply"] or summary["reply"]
    lines = [
        f"transcript: {summary['transcript'] or '(nothing recognised)'}",
        f"reply:      {said or '(none)'}",
    ]
    for withheld in summary["withheld"]:  # what the model wrote and the product did not say
        figures = ", ".join(withheld.get("figures") or [])
        why = f"{withheld.get('why', '')}" + (f": {figures} in no source" if figures else "")
        lines.append(f"not said:   {withheld.get('clause', '')!r} ({why})")
    if summary["error"]:
        lines.append(f"error:      {summary['error']} (the fallback reply was spoken)")
    latency = summary["turn_latency_s"]
    if latency is not None:
        note = "end of speech -> first reply audio, including the endpoint silence"
        if summary["fast"]:
            note += "; --fast compresses the audio's own time, so this is not a live figure"
        lines.append(f"latency:    {latency:.3f} s ({note})")
    if summary["endpoint_by"]:
        ended = f"end of turn: {summary['endpoint_by']}"
        if summary["turn_complete_p"] is not None:
            ended += f" (end-of-turn model: {summary['turn_complete_p']:.2f} finished, {summary['turn_checks']} check(s))"
        lines.append(ended)
    if summary["partials"]:
        lines.append(
            f"partials:   {summary['partials']} while speaking; the LLM found {summary['prefill_reused']}"
            f" prefilled prompt tokens and evaluated {summary['llm_evaluated_tokens']} of"
            f" {summary['llm_prompt_tokens']} after the end of speech"
        )
    stages = " | ".join(f"{k} {v:.0f}" for k, v in summary["stages_ms"].items() if v is not None)
    lines.append(f"stages ms:  {stages}")
    stamps = " | ".join(f"{k} {v:+.3f}" for k, v in summary["timestamps_s"].items() if v is not None)
    lines.append(f"times s:    {stamps}  (from speech start)")
    if summary["reply_wav"]:
        lines.append(f"reply wav:  {summary['reply_wav']} ({summary['reply_audio_s']:.2f} s)")
    return "\n".join(lines)
