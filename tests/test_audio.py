"""engines.audio: reading real recordings as float32 mono and resampling them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from engines.audio import load_audio, load_audio_16k, resample, to_mono_float32
from engines.errors import InputError

PIANO_44K = "vad/music/sms-tools_piano.wav"
SPEECH_44K = "vad/speech_untranscribed/sms-tools_vignesh.wav"
SPEECH_8K = "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav"
SPEECH_16K = "speech/en/deepspeech_LDC93S1.wav"
FLAC_16K = "speech/en/speechbrain_single-mic_example2.flac"


def _dominant_hz(audio: np.ndarray, sample_rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.size)))
    return float(np.fft.rfftfreq(audio.size, 1.0 / sample_rate_hz)[int(np.argmax(spectrum))])


def test_load_audio_keeps_native_rate_and_scales_pcm(data_dir: Path) -> None:
    audio, rate = load_audio(data_dir / SPEECH_44K)
    raw, raw_rate = sf.read(str(data_dir / SPEECH_44K), dtype="int16")
    assert rate == raw_rate == 44100
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size == raw.size
    np.testing.assert_allclose(audio, raw.astype(np.float32) / 32768.0, atol=1e-6)


def test_stereo_44k_is_mixed_to_mono_and_resampled(data_dir: Path, tmp_path: Path) -> None:
    mono, rate = load_audio(data_dir / SPEECH_44K)
    # Left = the recording, right = silence: the mix is half the recording.
    stereo = np.stack([mono, np.zeros_like(mono)], axis=1)
    path = tmp_path / "stereo.wav"
    sf.write(str(path), stereo, rate, subtype="FLOAT")

    mixed, mixed_rate = load_audio(path)
    assert mixed_rate == 44100 and mixed.ndim == 1
    np.testing.assert_allclose(mixed, mono / 2, atol=1e-6)

    at_16k = load_audio_16k(path)
    assert at_16k.dtype == np.float32 and at_16k.ndim == 1
    assert abs(at_16k.size - round(mono.size * 16000 / 44100)) <= 1
    # Energy is kept through resampling (speech is well below 8 kHz).
    rms_in = float(np.sqrt(np.mean((mono / 2) ** 2)))
    rms_out = float(np.sqrt(np.mean(at_16k**2)))
    assert rms_out == pytest.approx(rms_in, rel=0.05)


def test_8k_telephony_upsampled_matches_the_16k_original(data_dir: Path) -> None:
    up = load_audio_16k(data_dir / SPEECH_8K)
    wide, rate = load_audio(data_dir / SPEECH_16K)
    assert rate == 16000
    assert abs(up.size - wide.size) <= 2
    n = min(up.size, wide.size)
    # Same recording: the narrow-band version, upsampled, follows the wide-band one closely.
    corr = float(np.corrcoef(up[:n], wide[:n])[0, 1])
    assert corr > 0.9, corr


def test_flac_reads_like_wav(data_dir: Path) -> None:
    audio = load_audio_16k(data_dir / FLAC_16K)
    info = sf.info(str(data_dir / FLAC_16K))
    assert audio.size == info.frames
    assert 0.01 < float(np.max(np.abs(audio))) <= 1.0


def test_resample_keeps_pitch_and_length() -> None:
    rate = 22050
    t = np.arange(rate) / rate
    tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    for target in (8000, 16000, 48000):
        out = resample(tone, rate, target)
        assert out.dtype == np.float32
        assert abs(out.size - target) <= 1
        assert _dominant_hz(out, target) == pytest.approx(440.0, abs=2.0)


def test_resample_removes_content_above_the_new_nyquist() -> None:
    rate = 16000
    t = np.arange(rate) / rate
    high = (0.5 * np.sin(2 * np.pi * 6000.0 * t)).astype(np.float32)
    out = resample(high, rate, 8000)
    # 6 kHz cannot exist at 8 kHz: it must be filtered, not folded back to 2 kHz.
    assert float(np.sqrt(np.mean(out**2))) < 0.01


def test_resample_same_rate_is_a_copy() -> None:
    audio = np.linspace(-1, 1, 100, dtype=np.float32)
    out = resample(audio, 16000, 16000)
    np.testing.assert_array_equal(out, audio)
    assert out is not audio


@pytest.mark.parametrize("bad", [0, -16000, 16000.5, True])
def test_resample_rejects_bad_rates(bad: object) -> None:
    with pytest.raises(InputError, match="positive whole number of hertz"):
        resample(np.zeros(10, dtype=np.float32), bad, 16000)  # type: ignore[arg-type]


def test_to_mono_rejects_3d() -> None:
    with pytest.raises(InputError, match="shape"):
        to_mono_float32(np.zeros((2, 2, 2)))


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.wav"
    with pytest.raises(InputError, match=r"nope\.wav does not exist"):
        load_audio(path)


def test_empty_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.wav is empty"):
        load_audio_16k(path)


def test_text_file_renamed_wav_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n" * 20, encoding="utf-8")
    with pytest.raises(InputError, match=r"notes\.wav is not a readable audio file") as info:
        load_audio(path)
    assert info.value.code == "bad-input"
    assert info.value.fix and "WAV" in info.value.fix


def test_header_without_samples_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "zero.wav"
    sf.write(str(path), np.zeros(0, dtype=np.float32), 16000)
    with pytest.raises(InputError, match="has no samples"):
        load_audio(path)


def test_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a file"):
        load_audio(tmp_path)


def test_a_wav_cut_short_is_refused_with_what_is_missing(data_dir: Path, tmp_path: Path) -> None:
    """libsndfile reads a WAV whose header claims more audio than is there without a word, so half a
    recording would be transcribed as if it were all of it."""
    whole = (data_dir / SPEECH_16K).read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match=r"cut\.wav is cut short: its header says \d+ bytes") as info:
        load_audio(cut)
    assert info.value.fix and "sox --ignore-length" in info.value.fix
    # A recorder that streamed the file leaves the length unknown (0xFFFFFFFF): that is read as is.
    data_at = whole.index(b"data") + 4
    streamed = tmp_path / "streamed.wav"
    streamed.write_bytes(whole[:data_at] + b"\xff\xff\xff\xff" + whole[data_at + 4 :])
    assert load_audio(streamed)[0].size == load_audio(data_dir / SPEECH_16K)[0].size
