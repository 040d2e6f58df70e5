"""Silero VAD engines: both backends on real audio, per-session streaming state, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.audio import FRAME_SAMPLES, load_audio_16k
from engines.bundle import Bundle
from engines.errors import BackendUnavailable, InputError, ModelFileError
from engines.vad import VadEngine, create_vad
from engines.vad.frames import frame_probabilities, iter_frames
from engines.vad.params import VadParams
from engines.vad.silero_onnx import OnnxSileroVad
from engines.vad.silero_torch import TorchSileroVad
from tests.fixtures import build

PARITY_FILES = [
    "vad/speech/speechbrain_VAD_valid.wav",
    "vad/noisy_speech/voicebank_demand_p232_113.wav",
    "vad/music/sms-tools_carnatic.wav",
    "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav",
]


@pytest.mark.usefixtures("torch_one_thread")
@pytest.mark.parametrize("name", PARITY_FILES)
def test_torch_and_onnxruntime_give_the_same_probabilities(
    vad_onnx: VadEngine, vad_torch: VadEngine, data_dir: Path, name: str
) -> None:
    audio = load_audio_16k(data_dir / name)
    onnx = frame_probabilities(vad_onnx.stream(), audio)
    torch = frame_probabilities(vad_torch.stream(), audio)
    assert onnx.shape == torch.shape == (-(-audio.size // FRAME_SAMPLES),)
    assert float(np.max(np.abs(onnx - torch))) < 1e-3
    # Not a trivial agreement: the files contain both speech-like and quiet parts.
    assert float(onnx.max() - onnx.min()) > 0.3


@pytest.mark.usefixtures("torch_one_thread")
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_streams_are_independent(
    vad_onnx: VadEngine, vad_torch: VadEngine, data_dir: Path, backend: str
) -> None:
    engine = vad_onnx if backend == "onnx" else vad_torch
    speech = load_audio_16k(data_dir / "vad/speech/speechbrain_VAD_valid.wav")[8000:32000]
    noise = load_audio_16k(data_dir / "vad/noise/speechbrain_noise2.wav")[: 16000 * 3 // 2]
    alone_speech = frame_probabilities(engine.stream(), speech)
    alone_noise = frame_probabilities(engine.stream(), noise)

    # Two sessions interleaved frame by frame on one engine give what each gives alone.
    first, second = engine.stream(), engine.stream()
    mixed_speech, mixed_noise = [], []
    for frame_a, frame_b in zip(iter_frames(speech), iter_frames(noise), strict=True):
        mixed_speech.append(first.probability(frame_a))
        mixed_noise.append(second.probability(frame_b))
    np.testing.assert_allclose(mixed_speech, alone_speech, atol=1e-6)
    np.testing.assert_allclose(mixed_noise, alone_noise, atol=1e-6)


@pytest.mark.usefixtures("torch_one_thread")
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_state_carries_between_frames_and_reset_clears_it(
    vad_onnx: VadEngine, vad_torch: VadEngine, data_dir: Path, backend: str
) -> None:
    engine = vad_onnx if backend == "onnx" else vad_torch
    speech = load_audio_16k(data_dir / "vad/speech/speechbrain_VAD_valid.wav")
    frames = list(iter_frames(speech))
    probe = frames[30]  # inside the first utterance

    fresh = engine.stream().probability(probe)
    stream = engine.stream()
    for frame in frames[:30]:
        stream.probability(frame)
    warmed = stream.probability(probe)
    assert abs(warmed - fresh) > 1e-3, "the recurrent state should change the result"

    stream.reset()
    assert stream.probability(probe) == pytest.approx(fresh, abs=1e-6)


def test_frame_must_be_512_float_samples(vad_onnx: VadEngine) -> None:
    stream = vad_onnx.stream()
    with pytest.raises(InputError, match="512 mono samples at 16000 Hz"):
        stream.probability(np.zeros(480, dtype=np.float32))
    with pytest.raises(InputError, match="shape"):
        stream.probability(np.zeros((512, 2), dtype=np.float32))
    with pytest.raises(InputError, match="float samples"):
        stream.probability(np.zeros(512, dtype=np.int16))
    with pytest.raises(InputError, match="NaN"):
        stream.probability(np.full(512, np.nan, dtype=np.float32))
    # float64 is accepted (converted).
    assert 0.0 <= stream.probability(np.zeros(512, dtype=np.float64)) <= 1.0


def test_unknown_backend_names_the_allowed_ones(bundle: Bundle) -> None:
    with pytest.raises(ValueError, match=r"backend\n.*'onnxruntime' or 'torch'"):
        VadParams.model_validate({"backend": "tensorrt"})
    unchecked = VadParams().model_copy(update={"backend": "tensorrt"})  # as a program could build it
    with pytest.raises(BackendUnavailable, match=r"'tensorrt'.*onnxruntime, torch"):
        create_vad(bundle, unchecked)


def test_onnxruntime_backend_refuses_a_gpu_device(bundle: Bundle) -> None:
    with pytest.raises(BackendUnavailable, match="CPU only"):
        create_vad(bundle, VadParams(device="cuda"))


def test_stream_before_load_is_an_error(bundle: Bundle) -> None:
    engine = build.vad(bundle)
    with pytest.raises(RuntimeError, match="call load"):
        engine.stream()


@pytest.mark.parametrize("engine_class", [OnnxSileroVad, TorchSileroVad])
def test_broken_or_missing_model_file(tmp_path: Path, engine_class: type) -> None:
    with pytest.raises(ModelFileError, match="missing"):
        engine_class(tmp_path / "absent.model").load()
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"\x00not a model" * 100)
    with pytest.raises(ModelFileError, match="not a loadable"):
        engine_class(junk).load()


def test_factory_imports_no_runtime() -> None:
    code = (
        "import sys; from pathlib import Path; from engines.bundle import Bundle; "
        "from engines.vad import create_vad; "
        "b = Bundle.open(Path.home() / '.cache/appliance/bundle', verify=False); "
        "from engines.vad.params import VadParams; "
        "create_vad(b, VadParams()); create_vad(b, VadParams(backend='torch')); "
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
