"""A new language model as a candidate bundle version: the active version plus the model, in one step.

The candidate starts as hard links to the active version's files (``link_bundle``), gets the model
(copied, or quantized by llama.cpp's own quantizer) and its manifest entry, and is added beside the
other versions. The active version is never touched, so the candidate is evaluated and activated (or
removed) like any other version. Made on the device, it is trusted on the device (``source`` "device"):
signatures are for bundles brought on media from elsewhere.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from build_scripts.bundle import link_bundle
from build_scripts.quantize import QuantizedModel, quantize, record_in_bundle, validate_quantized
from engines.bundle_store import MADE_ON_DEVICE, BundleStore, BundleVersion
from engines.errors import ModelFileError
from engines.llm.gguf import read_gguf
from engines.manifest import MANIFEST_NAME, Manifest, sha256_of

STAGING = ".adding-model"
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


@dataclass(frozen=True)
class AddedModel:
    version: BundleVersion
    base: BundleVersion
    name: str  # the model's name, as llm.model takes it
    replaced: bool  # the active version already had a model of that name
    adopted: bool  # the root held one unversioned bundle, which became the first version
    new: bool  # False: the same model was already there; the version is the active one


def model_name(name: str) -> str:
    """``name`` (or ``llm/name``) checked as a model name; raises ModelFileError with the fix."""
    bare = name.removeprefix("llm/")
    if not _NAME.fullmatch(bare):
        raise ModelFileError(
            f"{name[:80]!r} is not a model name",
            fix="use lower-case letters, digits, '.', '_' and '-' (e.g. --name qwen-3b), as llm.model takes it",
        )
    return bare


def add_model(
    root: Path,
    source: Path,
    name: str,
    *,
    file_type: str | None = None,
    label: str = "",
    threads: int = 2,
) -> AddedModel:
    """``source`` (a GGUF; with ``file_type``, quantized to it first) as ``llm/NAME`` in a new
    candidate version of the bundle root ``root``, made from its active version."""
    bare = model_name(name)
    if not source.is_file() and not (file_type and source.is_dir()):
        raise ModelFileError(
            f"{source} is not a model file",
            fix="pass the .gguf file (a Hugging Face folder needs --quantize TYPE)",
        )
    store = BundleStore(root)
    adopted = False
    if (root / MANIFEST_NAME).is_file() and not store.versioned:
        store.adopt()
        adopted = True
    store.check_layout()
    base = store.active_version()
    staging = root / STAGING
    if staging.exists():  # an interrupted run
        shutil.rmtree(staging)
    try:
        link_bundle(base.path, staging)
        artifact = f"llm/{bare}"
        replaced = Manifest.read(staging).get(artifact) is not None
        out = staging / "llm" / f"{bare}.gguf"
        if out.exists():  # a hard link to the active version's file: unlinked, never written into
            out.unlink()
        model = _quantized(source, out, file_type, threads) if file_type else _copied(source, out)
        record_in_bundle(staging, artifact, model)
        version = store.add(
            staging, label=label or f"{base.id} + {artifact}", source=MADE_ON_DEVICE, move=True
        )
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return AddedModel(version, base, bare, replaced, adopted, new=version.id != base.id)


def _quantized(source: Path, out: Path, file_type: str, threads: int) -> QuantizedModel:
    return quantize(source, out, file_type=file_type, threads=threads)


def _copied(source: Path, out: Path) -> QuantizedModel:
    """The GGUF as it is, after the same checks a quantized one passes."""
    info = validate_quantized(read_gguf(source), file_type=read_gguf(source).file_type_name)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    shutil.copyfile(source, partial)
    partial.rename(out)
    origin = {"input": str(source), "input_format": "gguf", "input_sha256": sha256_of(out)}
    origin["input_file_type"] = info.file_type_name
    build: dict[str, object] = {
        "quantizer": "none (added as it was)",
        "file_type": info.file_type_name,
        "architecture": info.architecture,
        "context_length": info.context_length,
        "chat_template": "gguf" if info.chat_template else f"fallback:{info.architecture}",
    }
    return QuantizedModel(out, read_gguf(out), origin, build)


def describe(added: AddedModel, configured_model: str | None) -> list[str]:
    """What a technician reads after ``appliance bundle add-model``: what was made and what is next."""
    root = added.version.path.parent.parent
    lines = []
    if added.adopted:
        lines.append(f"{root}: the bundle there became its first version, {added.base.id}, active")
    if not added.new:
        lines.append(
            f"nothing changed: the active version {added.base.id} already holds this llm/{added.name}"
        )
        return lines
    what = "replacing its" if added.replaced else "plus"
    size = added.version.size_bytes / 1e9
    lines.append(
        f"candidate version {added.version.id} ({size:.2f} GB): the active {added.base.id} {what} "
        f"llm/{added.name}; the active version is unchanged"
    )
    model = "" if configured_model == added.name else f" --model {added.name}"
    lines.append(
        f"next: appliance bundle evaluate {added.version.id}{model}, then appliance bundle activate {added.version.id}"
    )
    if configured_model is not None and configured_model != added.name:
        lines.append(
            f'the model answers once the site file sets llm.model = "{added.name}" (it is "{configured_model}" now)'
        )
    return lines
