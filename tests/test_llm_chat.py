"""appliance chat TEXT: a streamed reply from the configured model (Gemma 270M here, for speed)."""

from __future__ import annotations

import json

import pytest

from appliance.cli import main


def test_chat_streams_a_reply_with_its_stats(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("APPLIANCE_LLM__MODEL", "gemma-270m")
    monkeypatch.setenv("APPLIANCE_LLM__MAX_REPLY_TOKENS", "8")
    assert main(["chat", "--json", "Hello, where is the exit?"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["generated_tokens"] > 0
    assert 0 < record["evaluated_prompt_tokens"] < record["prompt_tokens"]  # system prompt was cached at load
    assert record["stop_reason"] in ("end_of_turn", "stop_string", "max_tokens")


def test_chat_with_an_unknown_model_names_the_choices(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chat", "--model", "gpt-9", "Hello"]) == 1
    err = capsys.readouterr().err
    assert "gpt-9" in err and "gemma-270m" in err and "qwen-1.5b" in err


def test_chat_with_empty_text_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "   "]) == 1
    assert "empty" in capsys.readouterr().err
