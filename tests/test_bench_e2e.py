"""The end-to-end benchmark: a 2-utterance run with the small LLM, checked for its result schema (not
its timings), and its input checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.e2e import load_utterances

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_KEYS = {"count", "p50", "p95", "p99", "max"}


def _bench(*args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "bench", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)


def _is_summary(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == SUMMARY_KEYS and value["p50"] <= value["p99"]


def test_utterances_are_short_transcribed_english_sentences(data_dir: Path) -> None:
    utterances = load_utterances(data_dir)
    assert len(utterances) >= 8
    for utterance in utterances:
        assert utterance.path.is_file()
        assert utterance.path.parent == data_dir / "speech" / "en"
        assert 1.5 <= utterance.seconds <= 5.0
        assert len(utterance.transcript.split()) >= 4


def test_unknown_llm_is_refused_with_the_bundle_models(data_dir: Path) -> None:
    done = _bench("--llm", "no-such-model", "--turns", "1", "--data", str(data_dir), timeout_s=60)
    assert done.returncode == 2
    assert "unknown LLM no-such-model" in done.stderr
    assert "gemma-270m" in done.stderr


def test_two_turn_run_writes_a_result_with_the_full_schema(data_dir: Path, tmp_path: Path) -> None:
    done = _bench(
        "--llm", "gemma-270m", "--turns", "2", "--seed", "7", "--out", str(tmp_path), "--data", str(data_dir)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "turn latency (speech_end -> playback_start)" in done.stdout

    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["schema_version"] == 1 and result["benchmark"] == "e2e"
    machine = result["machine"]
    assert machine["cpu_cores_logical"] >= 1 and machine["memory_gb"] > 0
    assert {"onnxruntime", "llama_cpp_python", "torch"} <= set(machine["versions"])
    assert machine["python"] == ".".join(map(str, sys.version_info[:3]))
    assert len(result["load_average_before"]) == 3 and len(result["load_average_after"]) == 3

    assert sorted(result["plots"]) == ["latency_cdf.png", "latency_vs_sequential.png", "stages.png"]
    for name in result["plots"]:
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC

    [model] = result["models"]
    assert model["llm"] == "gemma-270m" and model["endpointer_mode"] == "smart_turn"
    assert set(model["engine_load_s"]) == {"vad", "asr", "llm", "tts", "turn"}
    cold = model["cold_start"]
    assert "error" not in cold, cold
    assert cold["ready_s"] > 0 and 100 < cold["peak_rss_mb"] <= cold["peak_rss_after_turn_mb"]
    # As appliance run starts: the checksum pass over the bundle and the smoke decode come first.
    daemon = model["cold_start_as_daemon"]
    assert "error" not in daemon, daemon
    assert daemon["as_daemon"] and not cold["as_daemon"]
    assert daemon["start_checks_s"] > cold["start_checks_s"]
    assert model["bench_process_peak_rss_mb"] > 100

    summary = model["summary"]
    assert summary["turns_ok"] == 2 and summary["turns_failed"] == 0
    for key in ("turn_latency_ms", "sequential_ms", "latency_over_floor", "latency_minus_floor_ms"):
        assert _is_summary(summary[key]), key
    assert _is_summary(summary["speedup_vs_sequential"])
    for stage in ("endpoint_wait", "asr", "llm_first_token", "first_clause", "tts_first_audio"):
        assert _is_summary(summary["stages_ms"][stage]), stage
    assert _is_summary(summary["floor_ms"]["floor_ms"])
    assert _is_summary(summary["floor_ms"]["endpoint_plus_floor_ms"])
    assert model["seed"] == 7 and 0 <= summary["same_reply_as_baseline"] <= 2

    assert len(model["turns"]) == 2
    for row in model["turns"]:
        assert row["error"] is None and row["transcript"] and row["reply"]
        floor = row["floor"]
        assert floor["floor_ms"] == pytest.approx(
            floor["asr_ms"] + floor["llm_first_clause_ms"] + floor["tts_first_chunk_ms"], abs=0.2
        )
        # The sequential baseline runs every stage to its end, so it cannot beat the floor's parts.
        assert floor["llm_total_ms"] >= floor["llm_first_clause_ms"]
        assert floor["sequential_ms"] > floor["floor_ms"]
        # The baselines transcribed the turn's own speech segment, not the whole file.
        assert floor["baseline_audio"] == "the turn's own"
        assert 0.5 < floor["baseline_audio_s"] == pytest.approx(row["audio_s_transcribed"], abs=0.01)
        assert floor["endpoint_plus_floor_ms"] == pytest.approx(
            floor["sequential_endpoint_wait_ms"] + floor["floor_ms"], abs=0.2
        )
        assert isinstance(row["same_reply"], bool)
        assert row["latency_ms"] == row["stages_ms"]["turn_latency"]
        assert row["bare_engines"]["first_clause"] and row["bare_engines"]["reply_audio_s"] > 0


def test_a_variant_names_settings_with_their_types() -> None:
    from bench.e2e import parse_variant

    assert parse_variant(
        "partials.partial_interval_ms=600,partials.partial_model=tiny-en,partials.prefill=false"
    ) == {
        "partials": {"partial_interval_ms": 600, "partial_model": "tiny-en", "prefill": False},
    }
    with pytest.raises(ValueError, match=r"expected section\.key=value"):
        parse_variant("partial_interval_ms=600")
