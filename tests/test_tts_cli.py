"""`appliance say`: a WAV file of the spoken text at the asked rate, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from appliance.cli import main


@pytest.mark.parametrize("rate", [None, 8000])
def test_say_writes_a_wav(tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: int | None) -> None:
    out = tmp_path / "reply.wav"
    argv = ["say", "Hello there. The desk is on your left.", "-o", str(out), "--json"]
    if rate:
        argv += ["--rate", str(rate)]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    info = sf.info(str(out))
    assert info.samplerate == (rate or 22050) == record["sample_rate_hz"]
    assert info.channels == 1 and info.subtype == "PCM_16"
    assert info.duration == pytest.approx(record["audio_s"], abs=0.01)
    assert 1.5 < info.duration < 5.0
    assert record["chunks"] == 2
    assert 0 < record["first_chunk_s"] <= record["tts_s"]
    assert not list(tmp_path.glob(".*partial"))


def test_say_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["say", " ... ", "-o", str(tmp_path / "x.wav")]) == 2
    assert "nothing to speak" in capsys.readouterr().err
    assert main(["say", "hi", "-o", str(tmp_path / "missing" / "x.wav")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["say", "hi", "-o", str(tmp_path / "x.wav"), "--rate", "100"]) == 2
    assert "--rate" in capsys.readouterr().err
    assert main(["say", "hi", "-o", str(tmp_path / "x.wav"), "--voice", "de_DE-nobody"]) == 1
    assert "en_US-joe-medium" in capsys.readouterr().err
    assert not (tmp_path / "x.wav").exists()
