"""Quantization with llama.cpp's own quantizer: the real Gemma 270M re-quantized to Q4_0 is
validated, recorded in a bundle manifest, loads and generates; bad sources get clear errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from build_scripts.__main__ import main as build_main
from build_scripts.quantize import quantize, validate_quantized
from engines.bundle import Bundle
from engines.errors import BackendUnavailable, ModelFileError
from engines.llm import GenerationStats, Message, available_models
from engines.llm.gguf import read_gguf
from tests.fixtures import build


@pytest.fixture(scope="module")
def q4_0_bundle(bundle: Bundle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A bundle folder holding only Gemma 270M re-quantized to Q4_0, made by the CLI."""
    root = tmp_path_factory.mktemp("bundle")
    source = bundle.path("llm/gemma-270m")
    code = build_main(
        ["quantize", str(source), "--type", "Q4_0", "--bundle", str(root), "--name", "gemma-q4_0"]
    )
    assert code == 0
    yield root


def test_quantized_model_is_validated_and_recorded(q4_0_bundle: Path, bundle: Bundle) -> None:
    info = read_gguf(q4_0_bundle / "llm" / "gemma-q4_0.gguf")
    assert info.file_type_name == "Q4_0"
    assert info.architecture == "gemma3"
    assert info.context_length == 32768
    assert info.file_size_bytes < bundle.manifest.artifacts["llm/gemma-270m"].size_bytes * 1.2

    opened = Bundle.open(q4_0_bundle, verify=True, full=True)  # checksum and size as recorded
    art = opened.manifest.artifacts["llm/gemma-q4_0"]
    assert art.kind == "llm-gguf"
    assert art.build["file_type"] == "Q4_0"
    assert art.build["quantizer"] == "llama_model_quantize"
    assert art.build["chat_template"] == "fallback:gemma3"
    assert art.source["input_sha256"] == bundle.manifest.artifacts["llm/gemma-270m"].sha256
    assert available_models(opened) == ["gemma-q4_0"]


def test_quantized_model_loads_and_generates(q4_0_bundle: Path) -> None:
    engine = build.llm(
        Bundle.open(q4_0_bundle),
        prompt="You are a helpful assistant.",
        model="gemma-q4_0",
        context_tokens=256,
        max_reply_tokens=8,
        temperature=0.0,
    )
    engine.load()
    try:
        stats = GenerationStats()
        text = "".join(engine.stream([Message("user", "Name a colour.")], stats=stats))
    finally:
        engine.close()
    assert stats.generated_tokens > 0
    assert text.strip() or stats.stop_reason == "stop_string"


def test_rerun_with_the_same_source_is_up_to_date(
    q4_0_bundle: Path, bundle: Bundle, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (q4_0_bundle / "manifest.json").read_text()
    source = str(bundle.path("llm/gemma-270m"))
    assert (
        build_main(
            ["quantize", source, "--type", "Q4_0", "--bundle", str(q4_0_bundle), "--name", "gemma-q4_0"]
        )
        == 0
    )
    assert "up to date" in capsys.readouterr().out
    assert json.loads((q4_0_bundle / "manifest.json").read_text()) == json.loads(before)


def test_validation_names_every_mismatch(q4_0_bundle: Path) -> None:
    info = read_gguf(q4_0_bundle / "llm" / "gemma-q4_0.gguf")
    with pytest.raises(ModelFileError) as err:
        validate_quantized(info, file_type="Q4_K_M", architecture="llama", context_length=4096)
    message = str(err.value)
    assert "quantization Q4_0, expected Q4_K_M" in message
    assert "architecture 'gemma3', expected 'llama'" in message
    assert "context length 32768, expected 4096" in message


def test_not_a_gguf_source_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "weights.gguf"
    source.write_bytes(b"\x00" * 4096)
    with pytest.raises(ModelFileError, match="not a GGUF"):
        quantize(source, tmp_path / "out.gguf", file_type="Q4_0")
    assert not (tmp_path / "out.gguf").exists()


def test_truncated_source_is_refused(bundle: Bundle, tmp_path: Path) -> None:
    source = tmp_path / "cut.gguf"
    with bundle.path("llm/gemma-270m").open("rb") as src, source.open("wb") as dst:
        dst.write(src.read(20_000_000))
    with pytest.raises(ModelFileError, match="truncated"):
        quantize(source, tmp_path / "out.gguf", file_type="Q4_0")


def test_unknown_type_lists_the_allowed_ones(bundle: Bundle, tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="Q4_K_M"):
        quantize(bundle.path("llm/gemma-270m"), tmp_path / "out.gguf", file_type="Q3_FANCY")


def test_hugging_face_folder_without_the_converter_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["Gemma3ForCausalLM"]}')
    monkeypatch.delenv("LLAMA_CPP_CONVERTER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no convert_hf_to_gguf.py anywhere
    with pytest.raises(BackendUnavailable, match="--converter"):
        quantize(folder, tmp_path / "out.gguf")


def test_engine_refuses_a_truncated_bundle_model_before_llama_cpp_sees_it(
    bundle: Bundle, tmp_path: Path
) -> None:
    from engines.llm.llamacpp import LlamaCppLlm
    from engines.llm.params import LlmParams

    cut = tmp_path / "cut.gguf"
    shutil.copyfile(bundle.path("llm/gemma-270m"), cut)
    with cut.open("r+b") as handle:
        handle.truncate(cut.stat().st_size - 1000)
    params = LlmParams(context_tokens=256, max_reply_tokens=8, temperature=0.0, threads=1, stop=())
    engine = LlamaCppLlm(cut, params, system_prompt="x")
    with pytest.raises(ModelFileError, match="truncated"):
        engine.load()


def test_f16_gguf_quantizes_to_the_default_q4_k_m_with_a_record_beside_it(
    bundle: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An f16 GGUF made by dequantizing the bundled model with the same quantizer.
    f16 = quantize(bundle.path("llm/gemma-270m"), tmp_path / "gemma-f16.gguf", file_type="F16").path
    assert read_gguf(f16).file_type_name == "F16"
    out = tmp_path / "gemma-q4_k_m.gguf"
    assert build_main(["quantize", str(f16), "--out", str(out)]) == 0
    assert "Q4_K_M" in capsys.readouterr().out
    info = read_gguf(out)
    assert info.file_type_name == "Q4_K_M" and info.architecture == "gemma3"
    assert info.file_size_bytes < f16.stat().st_size / 2
    record = json.loads(out.with_name(out.name + ".json").read_text())
    assert record["build"]["file_type"] == "Q4_K_M"
    assert record["source"]["input_file_type"] == "F16"
    assert record["size_bytes"] == info.file_size_bytes
