"""`appliance talk`: bad input gets a clear error before any engine loads; the report's format.
The full real turn through `appliance talk` runs in tests/test_airgap.py (network blocked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance import cli
from appliance.trace import TIMESTAMPS, TurnTrace
from appliance.turn_report import describe_turn, turn_summary


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("missing.wav", None, "does not exist"),
        ("empty.wav", b"", "empty"),
        ("notes.wav", b"this is not audio at all, just text" * 20, "not a readable audio file"),
    ],
)
def test_bad_files_are_named_with_the_problem(
    tmp_path: Path, capsys: Any, name: str, content: bytes | None, problem: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code = cli.main(["talk", str(path)])
    err = capsys.readouterr().err
    assert code == 1
    assert str(path) in err and problem in err


def test_an_invalid_config_is_reported(tmp_path: Path, capsys: Any, data_dir: Path) -> None:
    config = tmp_path / "site.toml"
    config.write_text("[llm]\nmodel = 'gpt4'\n")
    code = cli.main(["talk", str(data_dir / "speech/en/google_audio.wav"), "--config", str(config)])
    assert code == 1
    assert "llm.model" in capsys.readouterr().err


def test_speech_without_the_wake_word_is_named_as_the_cause(data_dir: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "APPLIANCE_WAKE__ACTIVATION": "wake_word", "APPLIANCE_LLM__MODEL": "gemma-270m"}
    done = subprocess.run(
        [sys.executable, "-m", "appliance", "talk", str(data_dir / "speech/en/google_audio.wav"), "--fast"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 1
    assert "the wake word ('hey jarvis') was not heard" in done.stderr, done.stderr
    assert "recording level" not in done.stderr


def _finished_trace() -> TurnTrace:
    trace = TurnTrace(turn_id="t1", session_id="s1", transcript="how old is it", reply="Very old.")
    for offset, name in enumerate(TIMESTAMPS):
        trace.mark(name, 10.0 + offset * 0.1)
    trace.played_reply = "Very old."
    return trace


def test_the_report_shows_transcript_reply_latency_and_every_stage() -> None:
    summary = turn_summary(_finished_trace(), reply_wav=Path("/tmp/r.wav"), reply_audio_s=1.5, fast=False)
    text = describe_turn(summary)
    assert "transcript: how old is it" in text
    assert "reply:      Very old." in text
    assert "latency:    0.700 s" in text  # speech_end (10.1) -> playback_start (10.8)
    for stage in summary["stages_ms"]:
        assert stage in text
    assert "/tmp/r.wav (1.50 s)" in text
    fast_text = describe_turn(turn_summary(_finished_trace(), reply_wav=None, reply_audio_s=0, fast=True))
    assert "not a live figure" in fast_text
