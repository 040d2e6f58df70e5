"""Turn trace: record, percentiles, the bounded SQLite store."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from appliance.trace import STAGES, TIMESTAMPS, TraceStore, TurnTrace, percentile, summarize
from appliance.trace.labels import EndedBy, OpenedBy, TurnOutcome


def _trace(turn_id: str, latency_s: float, *, base: float = 100.0) -> TurnTrace:
    trace = TurnTrace(turn_id=turn_id, session_id="s1")
    for offset, name in enumerate(TIMESTAMPS):
        trace.mark(name, base + offset * 0.01)
    trace.playback_start = trace.speech_end + latency_s  # type: ignore[operator]
    trace.turn_done = trace.playback_start + 1.0
    return trace


def test_percentile_matches_numpy_linear_interpolation() -> None:
    rng = random.Random(7)
    for size in (1, 2, 5, 101, 1000):
        values = [rng.uniform(0, 900) for _ in range(size)]
        for q in (0, 50, 95, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_summary_per_stage_skips_failed_and_cancelled_turns() -> None:
    traces = [_trace(f"t{i}", latency_s=(i + 1) / 10) for i in range(100)]
    failed = _trace("bad", 50.0)
    failed.error = "llm-failed: boom"
    cancelled = _trace("cut", 40.0)
    cancelled.cancelled = True
    summary = summarize([*traces, failed, cancelled])
    latency = summary["turn_latency"]
    assert latency.count == 100
    expected = [(i + 1) * 100.0 for i in range(100)]
    assert latency.p50_ms == pytest.approx(np.percentile(expected, 50), abs=0.1)
    assert latency.p95_ms == pytest.approx(np.percentile(expected, 95), abs=0.1)
    assert latency.p99_ms == pytest.approx(np.percentile(expected, 99), abs=0.1)
    assert latency.max_ms == pytest.approx(10000.0)
    assert summary["asr"].p50_ms == pytest.approx(10.0, abs=0.1)  # asr_start -> asr_done, 10 ms apart
    assert set(summary) <= set(STAGES)


def test_mark_keeps_the_first_time_and_rejects_unknown_names() -> None:
    trace = TurnTrace(turn_id="t", session_id="s")
    trace.mark("endpoint", 5.0)
    trace.mark("endpoint", 9.0)
    assert trace.endpoint == 5.0
    with pytest.raises(ValueError, match="unknown trace timestamp 'endpiont'"):
        trace.mark("endpiont")


def test_log_line_is_one_json_line_with_stage_durations() -> None:
    trace = _trace("abc", 0.25)
    trace.transcript = 'say "hi"\nplease'
    line = trace.log_line()
    assert "\n" not in line
    payload = json.loads(line)
    assert payload["turn_id"] == "abc"
    assert payload["transcript"] == 'say "hi"\nplease'
    assert payload["stages_ms"]["turn_latency"] == pytest.approx(250.0)


def test_store_is_bounded_and_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "state" / "turns.sqlite3"
    store = TraceStore(db, max_turns=10)
    for i in range(25):
        store.add(_trace(f"t{i:02d}", 0.1 + i / 100))
    assert store.count() == 10
    store.close()

    reopened = TraceStore(db, max_turns=10)
    recent = reopened.recent(3)
    assert [t.turn_id for t in recent] == ["t24", "t23", "t22"]
    assert recent[0].to_dict() == _trace("t24", 0.1 + 24 / 100).to_dict() | {"wall_time": recent[0].wall_time}
    assert reopened.summary()["turn_latency"].count == 10
    reopened.add(_trace("t25", 0.5))
    assert reopened.count() == 10
    assert reopened.recent(10)[-1].turn_id == "t16"
    reopened.close()


def test_stored_labels_come_back_as_their_enums_and_unknown_ones_as_none(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "turns.db", max_turns=10)
    trace = TurnTrace(turn_id="t1", session_id="s", transcript="hello")
    trace.endpoint_by, trace.outcome, trace.opened_by = EndedBy.FUSED, TurnOutcome.HANGUP, OpenedBy.WAKE_WORD
    store.add(trace)
    store.close()
    (back,) = TraceStore(tmp_path / "turns.db", max_turns=10).recent(5)
    assert back.endpoint_by is EndedBy.FUSED and back.outcome is TurnOutcome.HANGUP
    assert back.opened_by is OpenedBy.WAKE_WORD and back.words_not_expected == ""
    newer = TurnTrace.from_dict(trace.to_dict() | {"endpoint_by": "a_later_rule", "opened_by": ""})
    assert newer.endpoint_by == "" and newer.opened_by == ""


def test_a_write_still_queued_when_its_session_is_stopped_is_kept(tmp_path: Path) -> None:
    """The daemon stopping as a call ends cancels the session awaiting its turn's write; the write
    waits behind another on the store's thread, and is still made."""
    store = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    busy = threading.Event()
    store._executor.submit(busy.wait, 5.0)  # the store's thread is writing something else

    async def stopped_while_waiting() -> None:
        writing = asyncio.create_task(store.add_async(_trace("last", 0.2)))
        await asyncio.sleep(0.05)
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing

    asyncio.run(stopped_while_waiting())
    busy.set()
    store.close()
    reopened = TraceStore(tmp_path / "turns.sqlite3", max_turns=10)
    assert [t.turn_id for t in reopened.recent(5)] == ["last"]
    reopened.close()


def test_store_names_the_fix_for_an_unwritable_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match=r"trace\.db_path"):
        TraceStore(blocker / "turns.sqlite3", max_turns=10)


def test_summary_command_prints_percentiles_per_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from appliance.trace.__main__ import main

    db = tmp_path / "turns.sqlite3"
    store = TraceStore(db, max_turns=100)
    for i in range(20):
        store.add(_trace(f"t{i}", 0.1 * (i + 1)))
    store.close()
    assert main(["--db", str(db)]) == 0
    out = capsys.readouterr().out
    latency_row = next(line for line in out.splitlines() if line.startswith("turn_latency"))
    assert latency_row.split()[-5:] == ["20", "1050.0", "1905.0", "1981.0", "2000.0"]
    assert main(["--db", str(tmp_path / "missing.sqlite3")]) == 1
    assert "no turn trace" in capsys.readouterr().err
