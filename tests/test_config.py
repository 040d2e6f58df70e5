"""The settings schema: shipped default, file errors reported by key, environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.cli import main
from appliance.commands.common import EXIT_CONFIG
from appliance.config import ConfigError, Settings, load_settings
from appliance.daemon.config_default import default_toml


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "appliance.toml"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return {p.key: p.message for p in info.value.problems}


def test_shipped_default_is_valid_and_matches_schema_defaults() -> None:
    assert load_settings(None) == Settings()
    assert "[llm]" in default_toml()


def test_unknown_key_is_named(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, "[llm]\nmodle = 'qwen-1.5b'\n"))
    assert found == {"llm.modle": "unknown key; remove it or check its spelling"}


def test_unknown_section_is_named(tmp_path: Path) -> None:
    assert "speaker" in problems_of(write(tmp_path, "[speaker]\nvolume = 3\n"))


def test_wrong_type_is_named(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, "[asr]\nthreads = 'two'\n"))
    assert "valid integer" in found["asr.threads"]


def test_out_of_range_value_names_the_limit(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, "[sip]\nport = 70000\n"))
    assert "less than or equal to 65535" in found["sip.port"]


def test_disallowed_choice_lists_allowed_values(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, "[asr]\nbackend = 'whisper.cpp'\n"))
    assert "'onnxruntime' or 'tensorrt'" in found["asr.backend"]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    found = problems_of(write(tmp_path, "[llm]\nthreads = 0\ntemperature = 9\nfoo = 1\n"))
    assert set(found) == {"llm.threads", "llm.temperature", "llm.foo"}


def test_broken_toml_and_missing_file(tmp_path: Path) -> None:
    assert "<toml>" in problems_of(write(tmp_path, "[llm\n"))
    assert problems_of(tmp_path / "absent.toml") == {"<file>": "file not found"}


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_LLM__MODEL", "gemma-270m")
    settings = load_settings(write(tmp_path, "[llm]\nmodel = 'qwen-1.5b'\nthreads = 1\n"))
    assert settings.llm.model == "gemma-270m"
    assert settings.llm.threads == 1


def test_bad_environment_value_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_VAD__THRESHOLD", "7")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert [p.key for p in info.value.problems] == ["vad.threshold"]


def test_config_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check"]) == 0
    bad = write(tmp_path, "[llm]\nmodel = 'gpt'\ncontext_tokens = 1\nextra = true\n")
    assert main(["config", "check", str(bad)]) == EXIT_CONFIG == 78
    err = capsys.readouterr().err
    assert "3 problem(s)" in err
    assert "llm.model: not in the bundle" in err and "it has: gemma-270m, qwen-1.5b" in err
    assert "llm.context_tokens: Input should be greater than or equal to 256" in err
    assert "llm.extra: unknown key" in err


def test_config_check_counts_the_personas_tokens_against_the_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = write(
        tmp_path,
        "[agent]\npersona = '" + "Answer about the depot. " * 400 + "'\n[llm]\ncontext_tokens = 1024\n",
    )
    assert main(["config", "check", str(long)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "agent.persona: the system prompt takes" in err and "llm.context_tokens = 1024" in err
    short = write(tmp_path, "[agent]\npersona = 'Answer about the depot.'\n[llm]\ncontext_tokens = 1024\n")
    assert main(["config", "check", str(short)]) == 0


def test_listening_addresses_are_ip_addresses_and_the_old_timeout_name_still_reads(tmp_path: Path) -> None:
    """The device resolves no names, so a listener on "pbx.local" would need a DNS query to bind."""
    found = problems_of(write(tmp_path, '[sip]\nbind_host = "pbx.local"\n[admin]\nbind_host = "localhost"\n'))
    assert "not an IP address" in found["sip.bind_host"] and "not an IP address" in found["admin.bind_host"]
    renamed = load_settings(write(tmp_path, "[admin]\nheader_timeout_s = 3.0\n"))
    assert renamed.admin.request_timeout_s == 3.0
