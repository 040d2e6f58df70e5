"""The GPU check as far as this machine can run it: the payload it carries, the random-weight models it
makes, and its dry run (every check up to the first GPU call, on the CPU)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from build_scripts.synthetic.gguf_layout import load_layout, save_layout, write_random_gguf
from engines.bundle import Bundle
from engines.errors import ModelFileError
from engines.llm.llama_runtime import LlamaRuntime
from hw_tests import payload as payload_mod

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def payload(bundle: Bundle, data_dir: Path) -> Path:
    """The repository's payload folder, made (or completed) from the registry and the bundle."""
    folder = REPO / ".gpu-payload"
    payload_mod.build_payload(folder, python="3.12", bundle_dir=bundle.root, data_dir=data_dir)
    return folder


def test_the_payload_is_complete_and_fits_with_the_repository(payload: Path) -> None:
    assert payload_mod.verify(payload) == []
    summary = json.loads((payload / "payload.json").read_text())
    assert summary["bytes"] + payload_mod.repository_bytes() <= payload_mod.LIMIT_BYTES
    assert set(summary["pieces"]["layouts"]) == {"qwen-1.5b.layout.json.gz", "gemma-270m.layout.json.gz"}
    assert all("cp312" in name or "py3" in name for name in summary["pieces"]["wheels"])


def test_a_wheel_that_needs_what_nobody_brings_is_named(payload: Path, tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    soundfile = next((payload / "wheels").glob("soundfile-*.whl"))
    shutil.copy(soundfile, tmp_path / "wheels")
    pieces = {"wheels": {soundfile.name: soundfile.stat().st_size}}
    (tmp_path / "payload.json").write_text(json.dumps({"python": "3.12", "pieces": pieces}))
    problems = payload_mod.verify(tmp_path)
    assert "soundfile needs cffi: neither carried nor on the machine" in problems
    assert any("the checks import pydantic" in p for p in problems)
    (tmp_path / "wheels" / soundfile.name).unlink()
    assert any(soundfile.name in p and "missing" in p for p in payload_mod.verify(tmp_path))


def test_the_slimmed_source_keeps_the_cuda_backend_and_drops_the_rest(payload: Path) -> None:
    keep = payload_mod._keep_member
    assert keep("vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu")
    assert keep("vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c")
    assert keep("vendor/llama.cpp/ggml/src/ggml.c") and keep("vendor/llama.cpp/ggml/src/ggml-backend.cpp")
    assert (
        keep("llama_cpp/llama_cpp.py") and keep("pyproject.toml") and keep("vendor/llama.cpp/common/chat.cpp")
    )
    for dropped in (
        "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf",
        "vendor/llama.cpp/tools/server/server.cpp",
        "vendor/llama.cpp/docs/build.md",
        "examples/high_level_api/fastapi_server.py",
    ):
        assert not keep(dropped), dropped
    (sdist,) = payload.glob("llama_cpp_python-*-slim.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    assert any(n.endswith("vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt") for n in names)
    assert sdist.stat().st_size < 8 * 2**20


@pytest.fixture(scope="module")
def gemma_layout(payload: Path) -> dict[str, object]:
    return load_layout(payload / "layouts" / "gemma-270m.layout.json.gz")


def test_a_random_gguf_has_the_real_files_layout_and_no_token_wins_every_logit(
    gemma_layout: dict[str, object], payload: Path, bundle: Bundle, tmp_path: Path
) -> None:
    full = write_random_gguf(gemma_layout, tmp_path / "full.gguf")
    assert full.stat().st_size == bundle.path("llm/gemma-270m").stat().st_size
    full.unlink()
    # Qwen's output matrix is its own (Gemma's is its embedding, so random Gemma predicts its input)
    qwen = load_layout(payload / "layouts" / "qwen-1.5b.layout.json.gz")
    path = write_random_gguf(qwen, tmp_path / "small.gguf", layers=2, seed=3)
    runtime = LlamaRuntime(path, gpu_layers=0, context_tokens=128, threads=2)
    try:
        assert runtime.meta("qwen2.block_count") == "2"
        logits = runtime.evaluate(runtime.tokenize("The door code of the depot is four seven one nine."))
    finally:
        runtime.close()
    assert np.isfinite(logits).all()
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    # scales without their minimum (every weight leaning one way) made one token take 0.999 of every row
    assert probabilities.max() < 0.2
    assert len(set(logits.argmax(-1).tolist())) > 1


def test_a_layout_the_generator_cannot_fill_is_refused_with_the_fix(
    gemma_layout: dict[str, object], tmp_path: Path
) -> None:
    tensors = [dict(t) for t in gemma_layout["tensors"]]  # type: ignore[attr-defined]
    tensors[-1]["type"] = "IQ2_XXS"
    with pytest.raises(ModelFileError, match="IQ2_XXS") as err:
        write_random_gguf(dict(gemma_layout, tensors=tensors), tmp_path / "x.gguf")
    assert "Q4_K" in (err.value.fix or "")
    broken = tmp_path / "broken.layout.json.gz"
    broken.write_bytes(b"not gzip")
    with pytest.raises(ModelFileError, match="not a GGUF layout"):
        load_layout(broken)
    old = save_layout(dict(gemma_layout, layout_version=0), tmp_path / "old.layout.json.gz")
    assert json.loads(gzip.decompress(old.read_bytes()))["layout_version"] == 0
    with pytest.raises(ModelFileError, match="version 0"):
        load_layout(old)


def test_the_dry_run_runs_every_check_up_to_the_gpu(payload: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            "bash",
            str(REPO / "hw_tests" / "gpu_check.sh"),
            "--dry-run",
            "--payload",
            str(payload),
            "--out",
            str(out),
        ],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    expected = {"machine", "admin_gpu", "llm_gemma-270m", "llm_qwen-1.5b", "asr_random_whisper"}
    assert expected | {"asr_real_int8_cpu", "asr_onnxruntime_cuda", "unit_tests"} <= set(results)
    assert results["dry_run"] and results["passed"]
    qwen = results["llm_qwen-1.5b"]
    assert qwen["parity"]["passed"] and qwen["engine"]["generated_after_cancel"] <= 1
    assert qwen["speed_cpu"]["decode_tok_s"] > 0
    assert results["asr_random_whisper"]["fp32"]["logits_max_rel_diff"] < 1e-3
    real = results["asr_real_int8_cpu"]
    assert real["wer"] <= 0.25 and int(real["same_words_as_payload_machine"].split("/")[0]) >= 6
    assert "no CUDA execution provider" in results["asr_onnxruntime_cuda"]["refused"]
    missing = payload_mod.missing_imports(results["imported"])
    assert not missing, (
        f"the checks import {missing}: add them to hw_tests/payload.py WHEELS or gpu_machine.txt"
    )
    summary = (out / "summary.md").read_text()
    assert "FAIL" not in summary and "stand-in for TensorRT" in summary
    assert "the slimmed llama.cpp tree configures" in done.stderr
