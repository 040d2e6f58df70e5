"""Piper TTS on the real voice: intelligibility checked by Whisper, resampling to sink rates, errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest

from engines.audio import resample
from engines.bundle import Bundle
from engines.errors import InputError, ModelFileError
from engines.tts import TtsEngine, bundled_voices
from engines.tts.piper_voice import PiperTts
from tests.fixtures import build

SENTENCES = [
    "The museum opens at nine tomorrow morning.",
    "Please take the second door on your left.",
    "Dr. Smith will see you in 5 minutes.",
    "The package weighs 3.5 kilograms.",
    "Turn off the machine before you clean it.",
    "Your order will be ready in about ten minutes.",
    "The red button stops the conveyor belt.",
    "Station 12 needs more paper labels.",
]
MAX_WER = 0.10

_ONES = (  # noqa: SIM905 (reads better as text)
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()  # noqa: SIM905 (as above)
_SPOKEN = {"dr": "doctor", "mr": "mister", "mrs": "missus", "kg": "kilograms", "ok": "okay"}


def _int_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + _int_words(rest))
    rest = n % 1000
    return _int_words(n // 1000) + " thousand" + ("" if rest == 0 else " " + _int_words(rest))


def _number_words(match: re.Match[str]) -> str:
    whole, _, fraction = match.group(0).replace(",", "").partition(".")
    spoken = _int_words(int(whole))
    if fraction:
        spoken += " point " + " ".join(_ONES[int(d)] for d in fraction)
    return f" {spoken} "


def normalise(text: str) -> str:
    """Lower case, digits as spoken, no punctuation, a few abbreviations spelt out."""
    text = re.sub(r"\d[\d,]*(?:\.\d+)?", _number_words, text.lower())
    text = re.sub(r"[^a-z' ]+", " ", text).replace("'", "")
    return " ".join(_SPOKEN.get(word, word) for word in text.split())


def test_normaliser() -> None:
    assert normalise("Dr. Smith: 3.5 kg, 12 boxes; 1,250!") == (
        "doctor smith three point five kilograms twelve boxes one thousand two hundred fifty"
    )


def _transcribe(whisper: Any, audio_16k: np.ndarray) -> str:
    segments, _ = whisper.transcribe(
        audio_16k, language="en", beam_size=1, condition_on_previous_text=False, vad_filter=False
    )
    return " ".join(segment.text for segment in segments)


def test_spoken_sentences_are_transcribed_back(piper_tts: TtsEngine, tts_check_whisper: Any) -> None:
    """WER of faster-whisper base on the voice's output at 16 kHz, over all sentences, <= 10%.

    The sentences are spoken one call each and joined with 0.4 s of silence, so that Whisper runs once
    (its 30 s window) instead of once per sentence.
    """
    pause = np.zeros(int(0.4 * 16000), dtype=np.float32)
    parts = []
    for sentence in SENTENCES:
        parts += [*piper_tts.synthesize(sentence, sample_rate_hz=16000), pause]
    audio = np.concatenate(parts)
    assert audio.size / 16000 < 30.0
    reference = normalise(" ".join(SENTENCES))
    heard = normalise(_transcribe(tts_check_whisper, audio))
    wer = jiwer.wer(reference, heard)
    assert wer <= MAX_WER, f"WER {wer:.1%}:\n  {reference}\n  {heard}"


def test_telephony_rate_output_is_still_intelligible(piper_tts: TtsEngine, tts_check_whisper: Any) -> None:
    text = "Please hold the line while I check your order."
    audio_8k = np.concatenate(list(piper_tts.synthesize(text, sample_rate_hz=8000)))
    heard = normalise(_transcribe(tts_check_whisper, resample(audio_8k, 8000, 16000)))
    assert jiwer.wer(normalise(text), heard) <= 0.2, heard


@pytest.mark.parametrize("rate_hz", [8000, 16000, 48000])
def test_output_rate_sets_length_and_bandwidth(piper_tts: TtsEngine, rate_hz: int) -> None:
    text = "Welcome to the north entrance."
    chunks = list(piper_tts.synthesize(text, sample_rate_hz=rate_hz))
    audio = np.concatenate(chunks)
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    duration_s = audio.size / rate_hz
    assert 1.0 < duration_s < 3.5
    assert float(np.sqrt(np.mean(audio**2))) > 0.01 and float(np.max(np.abs(audio))) <= 1.0
    # Energy sits where speech is, and nothing is above the output's Nyquist frequency by construction;
    # at 48 kHz the voice's own 11 kHz band limit shows: almost no energy above 12 kHz.
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(audio.size, 1.0 / rate_hz)
    speech_band = spectrum[(freqs > 100) & (freqs < 3400)].sum() / spectrum.sum()
    assert speech_band > 0.6
    if rate_hz == 48000:
        assert spectrum[freqs > 12000].sum() / spectrum.sum() < 1e-3


def test_voice_rate_is_the_default(piper_tts: TtsEngine) -> None:
    assert piper_tts.sample_rate_hz == 22050
    audio = np.concatenate(list(piper_tts.synthesize("One moment please.")))
    assert 0.6 < audio.size / 22050 < 2.5


def test_one_chunk_per_clause_and_each_is_ready_before_the_next_is_made(piper_tts: TtsEngine) -> None:
    """Chunks come out lazily: the second clause is synthesized only after the first chunk is taken."""
    assert isinstance(piper_tts, PiperTts)
    voice = piper_tts._voice
    spoken: list[str] = []
    original = voice.synthesize

    def spy(text: str, *args: Any, **kwargs: Any) -> Any:
        spoken.append(text)
        return original(text, *args, **kwargs)

    voice.synthesize = spy
    try:
        chunks = piper_tts.synthesize("The door is open. Please come in. The desk is on the left.")
        first = next(chunks)
        assert spoken == ["The door is open."]
        rest = list(chunks)
    finally:
        del voice.synthesize
    assert spoken == ["The door is open.", "Please come in.", "The desk is on the left."]
    assert len(rest) == 2 and first.size > 0.5 * 22050


def test_titles_are_spoken_with_the_name(piper_tts: TtsEngine) -> None:
    # espeak would read "Dr." as a sentence of its own; the engine spells it out: one chunk, not two.
    assert len(list(piper_tts.synthesize("Dr. Smith is here."))) == 1


def test_length_scale_slows_speech(bundle: Bundle, piper_tts: TtsEngine) -> None:
    text = "The red button stops the conveyor belt."
    slow = build.tts(bundle, length_scale=1.6)
    slow.load()
    try:
        slow_s = sum(c.size for c in slow.synthesize(text)) / 22050
    finally:
        slow.close()
    normal_s = sum(c.size for c in piper_tts.synthesize(text)) / 22050
    assert slow_s > 1.3 * normal_s


@pytest.mark.parametrize("text", ["", "   ", "... !!"])
def test_nothing_to_speak_is_an_error(piper_tts: TtsEngine, text: str) -> None:
    with pytest.raises(InputError, match="nothing to speak"):
        list(piper_tts.synthesize(text))


def test_unknown_voice_names_the_bundled_ones(bundle: Bundle) -> None:
    assert "en_US-joe-medium" in bundled_voices(bundle)
    with pytest.raises(ModelFileError, match=r"'en_GB-alan-low'.*en_US-joe-medium"):
        build.tts(bundle, voice="en_GB-alan-low")


def test_synthesize_before_load_is_an_error(bundle: Bundle) -> None:
    with pytest.raises(RuntimeError, match="call load"):
        next(iter(build.tts(bundle).synthesize("Hello.")))


def test_broken_voice_files(bundle: Bundle, tmp_path: Path) -> None:
    config = bundle.path("tts/en_US-joe-medium/config")
    junk = tmp_path / "voice.onnx"
    junk.write_bytes(b"not a model" * 10)
    with pytest.raises(ModelFileError, match="cannot load Piper voice"):
        PiperTts(junk, config, length_scale=1.0, threads=1).load()
    with pytest.raises(ModelFileError, match="missing"):
        PiperTts(tmp_path / "absent.onnx", config, length_scale=1.0, threads=1).load()
    bad_config = tmp_path / "voice.onnx.json"
    bad_config.write_text("{}", encoding="utf-8")
    with pytest.raises(ModelFileError, match=r"audio\.sample_rate"):
        PiperTts(junk, bad_config, length_scale=1.0, threads=1)


def test_factory_imports_no_runtime() -> None:
    code = (
        "import sys; from pathlib import Path; from engines.bundle import Bundle; "
        "from engines.tts import create_tts; "
        "b = Bundle.open(Path.home() / '.cache/appliance/bundle', verify=False); "
        "create_tts(b); "
        "print(sorted(m for m in ('piper', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
