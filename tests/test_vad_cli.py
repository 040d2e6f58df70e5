"""`appliance vad`: segments of real recordings, as text and JSON, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli import main


def test_json_gives_one_object_per_file(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text_file = tmp_path / "notes.wav"
    text_file.write_text("not audio", encoding="utf-8")
    files = [
        data_dir / "vad/speech/speechbrain_VAD_valid.wav",
        text_file,
        data_dir / "vad/noise/koala_noise.wav",
    ]
    code = main(["vad", "--json", *map(str, files)])
    out, err = capsys.readouterr()
    assert code == 1  # one file failed, the others were still processed
    speech, bad, noise = (json.loads(line) for line in out.splitlines())

    assert speech["audio_s"] == pytest.approx(9.66, abs=0.01)
    starts = [s["start_s"] for s in speech["segments"]]
    assert starts == pytest.approx([0.38, 4.1, 8.19], abs=0.1)
    assert speech["speech_s"] == pytest.approx(
        sum(s["end_s"] - s["start_s"] for s in speech["segments"]), abs=0.01
    )

    assert bad["code"] == "bad-input" and "notes.wav" in bad["error"]
    assert "notes.wav is not a readable audio file" in err

    assert noise["segments"] == [] and noise["speech_s"] == 0.0


@pytest.mark.usefixtures("torch_one_thread")
def test_text_output_and_the_torch_backend(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wav = data_dir / "vad/noisy_speech/voicebank_demand_p232_113.wav"  # 48 kHz speech in noise
    assert main(["vad", "--backend", "torch", str(wav)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{wav}: 1 segment(s)")
    start_s, _, end_s = out[1].split()[:3]
    assert 0.4 < float(start_s) < float(end_s) <= 1.4


def test_a_high_threshold_finds_less_speech(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wav = str(data_dir / "vad/speech_untranscribed/sms-tools_vignesh.wav")
    main(["vad", "--json", wav])
    main(["vad", "--json", "--threshold", "0.97", wav])
    default, strict = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert 0 < strict["speech_s"] < default["speech_s"]


def test_bad_threshold_is_a_usage_error(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vad", "--threshold", "2", str(data_dir / "vad/nonspeech/pyannote_empty.wav")]) == 2
    assert "vad.threshold: Input should be less than 1" in capsys.readouterr().err
