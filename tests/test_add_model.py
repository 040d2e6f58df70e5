"""A new language model in one command, as a technician runs it: ``appliance bundle add-model`` makes a
candidate version (the active one plus the model) from the real Gemma 270M; a model written straight
into a root that keeps versions is refused, and such a root is named by ``bundle list`` and ``verify``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.bundle import Bundle
from engines.bundle_store import MADE_ON_DEVICE, BundleStore
from engines.llm import available_models
from engines.llm.gguf import read_gguf
from engines.manifest import Manifest
from tests.test_bundle import small_copy


def appliance(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "APPLIANCE_LLM__MODEL": "gemma-270m"}
    return subprocess.run(
        [sys.executable, "-m", "appliance", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def added(
    bundle: Bundle, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A fresh device's unversioned bundle (the small artifacts) given Gemma 270M quantized to Q4_0."""
    root = small_copy(bundle, tmp_path_factory.mktemp("device") / "bundle")
    done = appliance(
        "bundle",
        "add-model",
        bundle.path("llm/gemma-270m"),
        "--name",
        "gemma-q4",
        "--quantize",
        "Q4_0",
        "--dir",
        root,
    )
    return root, done


def test_add_model_makes_a_candidate_version_from_the_active_one(
    added: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, done = added
    assert done.returncode == 0, done.stderr
    store = BundleStore(root)
    active = store.active_version()
    assert active.source == "adopted"  # the unversioned bundle became the first version
    (candidate,) = [v for v in store.versions() if v.id != active.id]
    assert candidate.source == MADE_ON_DEVICE
    assert f"candidate version {candidate.id}" in done.stdout
    assert f"appliance bundle evaluate {candidate.id} --model gemma-q4" in done.stdout
    assert 'llm.model = "gemma-q4" (it is "gemma-270m" now)' in done.stdout

    opened = Bundle.open(candidate.path, verify=True, full=True)
    assert available_models(opened) == ["gemma-q4"]
    art = opened.manifest.artifacts["llm/gemma-q4"]
    assert (
        art.build["file_type"] == "Q4_0" and read_gguf(opened.path("llm/gemma-q4")).file_type_name == "Q4_0"
    )
    # Everything else is the active version's own files, linked, not copied; the active one is untouched.
    base = Manifest.read(active.path)
    assert set(opened.manifest.artifacts) == set(base.artifacts) | {"llm/gemma-q4"}
    for name, kept in base.artifacts.items():
        assert (candidate.path / kept.path).stat().st_ino == (active.path / kept.path).stat().st_ino, name
    assert base.verify(active.path, full=True) == []

    listed = appliance("bundle", "list", "--dir", root)
    assert listed.returncode == 0 and "2 version(s)" in listed.stdout
    assert any(line.startswith("active") and active.id in line for line in listed.stdout.splitlines())


def test_a_file_that_is_not_a_model_is_refused(
    tmp_path: Path, added: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    root, _ = added
    before = {v.id for v in BundleStore(root).versions()}
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model\n")
    done = appliance("bundle", "add-model", notes, "--name", "notes", "--dir", root)
    assert done.returncode == 1 and "notes.gguf" in done.stderr and "fix:" in done.stderr
    bad_name = appliance("bundle", "add-model", notes, "--name", "../x", "--dir", root)
    assert bad_name.returncode == 1 and "is not a model name" in bad_name.stderr
    assert {v.id for v in BundleStore(root).versions()} == before
    assert not (root / ".adding-model").exists()


def test_quantize_into_a_root_of_versions_is_refused_with_the_one_command(
    bundle: Bundle, added: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    root, _ = added
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "build_scripts",
            "quantize",
            str(bundle.path("llm/gemma-270m")),
            "--bundle",
            str(root),
            "--name",
            "g",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "appliance bundle add-model" in done.stderr and "--quantize Q4_K_M" in done.stderr
    assert not (root / "manifest.json").exists() and not (root / "llm").exists()


def test_a_root_holding_both_a_manifest_and_versions_is_named(bundle: Bundle, tmp_path: Path) -> None:
    root = small_copy(bundle, tmp_path / "bundle")
    BundleStore(root).adopt()
    small_copy(bundle, root)  # a model written straight into the root, the way quantize --bundle once did
    for command in (("bundle", "list", "--dir", root), ("bundle", "verify", root)):
        done = appliance(*command)
        assert done.returncode == 1, command
        assert "holds both versions" in done.stderr and "add-model" in done.stderr, command
