"""Keys that moved to a section of their own: an older file, environment or script still works, says
so, and `appliance config migrate` (or the admin page's next write) moves them in the file."""

from __future__ import annotations

import io
import logging
import re
import tokenize
from pathlib import Path
from typing import Any

import pytest

from appliance import config_moves
from appliance.admin.config_file import apply_changes, environment_overrides
from appliance.cli import main
from appliance.commands.common import EXIT_CONFIG
from appliance.config import ConfigError, Settings, load_settings, override
from appliance.config_moves import MOVED
from engines.files import loads_toml

REPO = Path(__file__).resolve().parents[1]
SECTIONS = {name: set(field.annotation.model_fields) for name, field in Settings.model_fields.items()}  # type: ignore[union-attr]

OLD_FILE = """\
# the site's own notes
[endpointer]
end_silence_ms = 500
overlap = "interrupt"   # as before
stop_words = ["halt", "stop"]

[llm]
prefill = false
server_url = "http://10.20.0.5:8000/v1"
allowed_hosts = ["10.20.0.5"]

[agent]
site_name = "Plant 3"
busy_reply = "Just a moment."

[sip]
registrar = "10.20.0.2"
register_user = "2301"
greeting = "Plant 3 reception, how can I help?"
transfer_targets = { "front desk" = "2000" }
"""


@pytest.fixture(autouse=True)
def _notices_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_moves, "_noticed", set())


def _old(tmp_path: Path) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(OLD_FILE, encoding="utf-8")
    return path


def test_every_moved_key_has_a_new_place_and_no_old_one() -> None:
    for old, new in MOVED.items():
        old_section, old_key = old.split(".")
        new_section, new_key = new.split(".")
        assert new_key in SECTIONS[new_section], new
        assert old_key not in SECTIONS[old_section], (
            f"{old} is a key again: a file could not say which it means"
        )


def test_an_older_file_reads_as_its_moved_file_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="appliance.config_moves"):
        settings = load_settings(_old(tmp_path))
    assert settings.overlap.mode == "interrupt" and settings.overlap.stop_words == ("halt", "stop")
    assert settings.endpointer.end_silence_ms == 500 and not settings.partials.prefill
    assert settings.llm_server.server_url == "http://10.20.0.5:8000/v1"
    assert settings.conversation.busy_reply == "Just a moment." and settings.agent.site_name == "Plant 3"
    assert settings.call.transfer_uri("front desk", settings.sip.transfer_domain()) == "sip:2000@10.20.0.2"
    said = caplog.text
    assert (
        "endpointer.overlap is read as overlap.mode" in said
        and "sip.greeting is read as call.greeting" in said
    )
    assert "appliance config migrate FILE" in said


def test_a_key_at_both_places_is_a_problem_named_by_its_old_key(tmp_path: Path) -> None:
    path = tmp_path / "both.toml"
    path.write_text('[overlap]\nstop_words = ["a"]\n[endpointer]\nstop_words = ["b"]\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    (problem,) = caught.value.problems
    assert problem.key == "endpointer.stop_words"
    assert "moved to overlap.stop_words, which is set too" in problem.message


def test_an_old_environment_variable_is_read_under_its_new_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("APPLIANCE_ENDPOINTER__STOP_WORDS", '["halt"]')  # a list: parsed as its new key's type
    monkeypatch.setenv("APPLIANCE_ASR__PARTIAL_INTERVAL_MS", "900")
    with caplog.at_level(logging.WARNING, logger="appliance.config_moves"):
        settings = load_settings(None)
    assert settings.overlap.stop_words == ("halt",) and settings.partials.partial_interval_ms == 900
    assert "APPLIANCE_ENDPOINTER__STOP_WORDS is read as APPLIANCE_OVERLAP__STOP_WORDS" in caplog.text
    shown = environment_overrides()  # the admin page's "set by the environment", by the new names
    assert {"overlap.stop_words", "partials.partial_interval_ms"} <= set(shown)
    assert not {"endpointer.stop_words", "asr.partial_interval_ms"} & set(shown)
    monkeypatch.setenv("APPLIANCE_OVERLAP__STOP_WORDS", '["wait"]')
    with pytest.raises(ConfigError, match=r"endpointer\.stop_words: moved to overlap\.stop_words"):
        load_settings(None)


def test_a_script_of_an_older_version_overrides_the_moved_key() -> None:
    settings = override(
        load_settings(None), asr={"partial_interval_ms": 0}, endpointer={"overlap": "interrupt"}
    )
    assert settings.partials.partial_interval_ms == 0 and settings.overlap.mode == "interrupt"


def test_migrate_moves_the_keys_and_keeps_the_rest_of_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _old(tmp_path)
    before = load_settings(path)
    moves = len(config_moves.moves_in(_data(OLD_FILE)))
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{moves} key(s) of an older version" in out and "sip.greeting is now call.greeting" in out
    assert main(["config", "migrate", str(path)]) == 0
    assert f"{moves} key(s) moved" in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    assert (tmp_path / "site.toml.bak").read_text(encoding="utf-8") == OLD_FILE
    assert "# the site's own notes" in text and 'site_name = "Plant 3"' in text
    assert "[overlap]" in text and 'mode = "interrupt"' in text and "[call]" in text
    assert config_moves.moves_in(_data(text)) == []
    assert load_settings(path) == before
    assert main(["config", "migrate", str(path)]) == 0
    assert "nothing to move" in capsys.readouterr().out


def test_migrate_refuses_a_key_at_both_places_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "both.toml"
    text = "[partials]\nprefill = true\n[llm]\nprefill = false\n"
    path.write_text(text, encoding="utf-8")
    assert main(["config", "migrate", str(path)]) == EXIT_CONFIG
    assert "llm.prefill: moved to partials.prefill, which is set too" in capsys.readouterr().err
    assert path.read_text(encoding="utf-8") == text and not (tmp_path / "both.toml.bak").exists()


def test_the_admin_pages_write_moves_the_files_old_keys(tmp_path: Path) -> None:
    path = _old(tmp_path)
    settings, changed = apply_changes(
        path, {"overlap": {"stop_words": ["enough"]}, "tts": {"length_scale": 1.1}}
    )
    assert changed == ["overlap.stop_words", "tts.length_scale"]
    assert settings.overlap.stop_words == ("enough",) and settings.overlap.mode == "interrupt"
    text = path.read_text(encoding="utf-8")
    assert config_moves.moves_in(_data(text)) == [] and "# the site's own notes" in text
    assert load_settings(path).call.greeting == "Plant 3 reception, how can I help?"
    # A client that still names a key by its old place changes the key at its new one.
    settings, changed = apply_changes(path, {"sip": {"greeting": "Plant 3, good morning."}})
    assert changed == ["call.greeting"] and settings.call.greeting == "Plant 3, good morning."
    assert config_moves.moves_in(_data(path.read_text(encoding="utf-8"))) == []


def _data(text: str) -> dict[str, Any]:
    return loads_toml(text)


# "section.key" where a person reads it: docs, and the strings and comments of the code.
_OLD_NAME = re.compile(
    r"(?<![\w.$/-])("
    + "|".join(re.escape(k) for k in sorted(MOVED, key=len, reverse=True))
    + r")\b(?![(.\w/-])"
)


def _old_names(path: Path, root: Path = REPO) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        pieces = [
            (t.start[0], t.string)
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type in (tokenize.STRING, tokenize.COMMENT)
        ]
    else:  # the section that lists the moves names the old places
        text = re.sub(
            r"### Keys that moved\n.*?(?=\n#)", lambda m: "\n" * m.group().count("\n"), text, flags=re.S
        )
        pieces = list(enumerate(text.splitlines(), 1))
    where = path.relative_to(root)
    return [
        f"{where}:{line}: {m.group(1)}"
        for line, piece in pieces
        for m in _OLD_NAME.finditer(piece.replace("\\.", "."))  # a test's regex names keys too
    ]


def test_no_doc_message_or_comment_names_a_key_by_its_old_place() -> None:
    files = [*REPO.glob("*.md"), *(REPO / "docs").glob("*.md")]
    for package in ("appliance", "engines", "bench", "build_scripts", "provisioning", "hw_tests", "tests"):
        files += (REPO / package).rglob("*.py")
    allowed = {REPO / "appliance" / "config_moves.py", Path(__file__).resolve()}
    found = [hit for path in files if path.resolve() not in allowed for hit in _old_names(path)]
    assert not found, "\n".join(found)


def test_the_old_name_check_finds_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Set `sip.greeting`."""\nsettings.sip.greeting = 1  # not call.greeting, nor agent.busy_reply\n'
        'match = r"not in llm\\.allowed_hosts"\n',
        encoding="utf-8",
    )
    assert _old_names(sample, tmp_path) == [
        "sample.py:1: sip.greeting",
        "sample.py:2: agent.busy_reply",
        "sample.py:3: llm.allowed_hosts",
    ]
