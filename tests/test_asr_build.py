"""The Whisper bundle step: ONNX artifacts recorded with their source and build; bad checkpoints named."""

from __future__ import annotations

from pathlib import Path

import pytest

from build_scripts.context import BuildContext
from build_scripts.whisper.ct2 import load_ct2_folder, read_model_bin
from build_scripts.whisper.export import EXPORTER_VERSION
from build_scripts.whisper.step import export_whisper_onnx
from engines.bundle import Bundle
from engines.errors import ModelFileError
from engines.manifest import Manifest

ONNX_ARTIFACTS = {
    f"asr/whisper-base/onnx/{part}-{precision}"
    for part in ("encoder", "decoder")
    for precision in ("fp32", "fp16", "int8")
} | {"asr/whisper-base/onnx/config", "asr/whisper-base/onnx/tokenizer"}


def test_bundle_records_the_onnx_export(bundle: Bundle) -> None:
    artifacts = bundle.manifest.artifacts
    assert set(artifacts) >= ONNX_ARTIFACTS
    weights_sha = artifacts["asr/whisper-base/ct2/model.bin"].sha256
    for name in ONNX_ARTIFACTS:
        art = artifacts[name]
        assert art.source["model.bin sha256"] == weights_sha
        assert art.build["exporter_version"] == EXPORTER_VERSION
        assert art.build["opset"] == 17
    assert (
        bundle.path("asr/whisper-base/onnx/decoder-fp32").read_bytes()[:2] == b"\x08\x08"
    )  # onnx ir_version


def test_export_step_skips_current_outputs(bundle: Bundle) -> None:
    paths = [bundle.path(name) for name in sorted(ONNX_ARTIFACTS)]
    before = [p.stat().st_mtime_ns for p in paths]
    export_whisper_onnx(BuildContext(out=bundle.root, manifest=Manifest.read(bundle.root)))
    assert [p.stat().st_mtime_ns for p in paths] == before


def test_truncated_model_bin_is_named(bundle: Bundle, tmp_path: Path) -> None:
    source = bundle.path("asr/whisper-base/ct2/model.bin")
    with source.open("rb") as handle:
        (tmp_path / "model.bin").write_bytes(handle.read(3_000_000))
    with pytest.raises(ModelFileError, match="truncated or not a CTranslate2 model"):
        load_ct2_folder(tmp_path)


def test_other_files_are_not_taken_for_whisper(bundle: Bundle, tmp_path: Path) -> None:
    not_ct2 = tmp_path / "model.bin"
    not_ct2.write_bytes(bundle.path("vad/silero/onnx").read_bytes())
    with pytest.raises(ModelFileError, match=r"model\.bin"):
        read_model_bin(not_ct2)
    with pytest.raises(ModelFileError, match="does not exist"):
        read_model_bin(tmp_path / "missing.bin")


def test_ct2_reader_reads_every_variable(bundle: Bundle) -> None:
    ckpt = load_ct2_folder(bundle.path("asr/whisper-base/ct2/model.bin").parent)
    assert ckpt.dims.n_audio_layer == ckpt.dims.n_text_layer == 6
    assert ckpt.dims.n_vocab == 51865
    assert ckpt.tensors["decoder/embeddings/weight"].dtype.name == "float32"
    assert 50362 in ckpt.tokens.suppress_ids
