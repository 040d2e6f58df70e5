"""The benchmark's stage profile: each kind of engine work's milliseconds inside a stage, and the time
no engine ran (overlapping work counted once)."""

from __future__ import annotations

from appliance.trace.record import TurnTrace
from bench.engine_timeline import IDLE, EngineTimeline


def test_a_stage_is_split_into_the_work_inside_it_and_the_rest() -> None:
    trace = TurnTrace(turn_id="t", session_id="s")
    trace.mark("asr_start", 10.0)
    trace.mark("asr_done", 10.2)
    trace.mark("llm_first_token", 10.5)
    timeline = EngineTimeline()
    timeline.record("asr:transcribe", 10.0, 10.15)
    timeline.record("turn:complete_probability", 10.1, 10.3)  # across the two stages
    timeline.record("llm_prompt", 10.2, 10.45)
    timeline.record("tts:run", 11.0, 11.1)  # after both
    profile = timeline.profile(trace)
    asr, llm = profile["asr"], profile["llm_first_token"]
    assert asr["asr:transcribe"] == 150.0 and asr["turn:complete_probability"] == 100.0
    assert asr[IDLE] == 0.0  # 10.0-10.2 covered by the union of the two
    assert llm["llm_prompt"] == 250.0 and llm["turn:complete_probability"] == 100.0
    assert llm[IDLE] == 50.0  # 10.45-10.5: no engine ran
    assert "tts:run" not in asr and "tts:run" not in llm
    assert "first_clause" not in profile  # never reached
