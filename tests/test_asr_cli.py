"""appliance transcribe: one JSON line per file; a bad file is reported and the others still run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli import main
from appliance.commands.common import EXIT_CONFIG
from engines.asr.text import normalize_text


def test_transcribe_json_lines_and_bad_files(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("this is not audio\n")
    cut = tmp_path / "cut.wav"  # its header claims twice the audio that is there
    whole = (data_dir / "speech/en/pocketsphinx_cards_002.wav").read_bytes()
    cut.write_bytes(whole[: 44 + (len(whole) - 44) // 2])
    files = [
        data_dir / "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav",
        empty,
        not_audio,
        cut,
        data_dir / "speech/en/pocketsphinx_cards_002.wav",
    ]
    code = main(["transcribe", *map(str, files), "--json"])
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert code == 1  # some files failed
    assert [line["file"] for line in lines] == [str(f) for f in files]
    phone, bad_empty, bad_text, bad_cut, cards = lines
    assert set(phone) == {"file", "text", "audio_s", "asr_s"}
    assert normalize_text(phone["text"]).startswith("she had")
    assert phone["audio_s"] == pytest.approx(2.925, abs=0.01)
    assert phone["asr_s"] > 0
    assert normalize_text(cards["text"]).startswith("four queen")
    assert bad_empty["code"] == bad_text["code"] == "bad-input"
    assert "empty" in bad_empty["error"]
    assert "not a readable audio file" in bad_text["error"]
    assert "cut short" in bad_cut["error"] and "text" not in bad_cut
    assert str(empty) in captured.err and str(not_audio) in captured.err


def test_transcribe_plain_text_with_real_length(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = data_dir / "speech/en/google_audio.wav"
    assert main(["transcribe", str(path), "--real-length", "on"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: ")
    assert "brooklyn bridge" in normalize_text(out)


def test_transcribe_with_a_broken_config_exits_78_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "site.toml"
    config.write_text('[asr]\nprecision = "int4"\n')
    assert main(["transcribe", "x.wav", "--config", str(config)]) == EXIT_CONFIG
    assert "asr.precision" in capsys.readouterr().err
