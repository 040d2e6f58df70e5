"""Quantize a GGUF with llama.cpp's own quantizer, validate the result, record it in a manifest.

Sources: an f32/f16/bf16 GGUF, an already quantized GGUF (re-quantized), or a Hugging Face
folder, which llama.cpp's ``convert_hf_to_gguf.py`` turns into an f16 GGUF first where that
converter is installed. The output is written beside its final name and renamed only once valid.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from build_scripts.context import BuildContext
from engines.bundle_store import BundleStore
from engines.errors import BackendUnavailable, BundleError, EngineError, ModelFileError
from engines.llm import GGUF_KIND
from engines.llm.chat_template import fallback_template_for
from engines.llm.gguf import FILE_TYPES, GgufInfo, read_gguf
from engines.manifest import Artifact, Manifest, sha256_of

log = logging.getLogger(__name__)

DEFAULT_FILE_TYPE = "Q4_K_M"
CONVERTER_ENV = "LLAMA_CPP_CONVERTER"
CONVERTER_NAME = "convert_hf_to_gguf.py"
_UNQUANTIZED = {"F32", "F16", "BF16"}


@dataclass(frozen=True)
class QuantizedModel:
    path: Path
    info: GgufInfo
    source: dict[str, str]
    build: dict[str, object]


def quantize(
    source: Path,
    out: Path,
    *,
    file_type: str = DEFAULT_FILE_TYPE,
    threads: int = 2,
    converter: Path | None = None,
) -> QuantizedModel:
    """Quantize ``source`` (GGUF file or Hugging Face folder) to ``out``; validate before keeping it."""
    file_type = _check_file_type(file_type)
    source = Path(source)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(
        prefix="quantize-", dir=out.parent if out.parent.is_dir() else None
    ) as tmp:
        if source.is_dir():
            gguf = _convert_hf_folder(source, Path(tmp) / "converted-f16.gguf", converter)
            origin = {"input": str(source), "input_format": "huggingface", "converted_by": CONVERTER_NAME}
        else:
            gguf = source
            origin = {"input": str(source), "input_format": "gguf"}
        source_info = read_gguf(gguf)
        origin["input_sha256"] = sha256_of(gguf)
        origin["input_file_type"] = source_info.file_type_name
        if source_info.file_type_name not in _UNQUANTIZED and file_type not in _UNQUANTIZED:
            log.warning(
                "%s is already quantized (%s): re-quantizing to %s loses more precision than "
                "quantizing from f16",
                source,
                source_info.file_type_name,
                file_type,
            )
        partial = Path(tmp) / "quantized.gguf"
        _run_quantizer(gguf, partial, file_type=file_type, threads=threads)
        info = validate_quantized(
            read_gguf(partial),
            file_type=file_type,
            architecture=source_info.architecture,
            context_length=source_info.context_length,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(partial), out)
    info = read_gguf(out)
    build: dict[str, object] = {
        "quantizer": "llama_model_quantize",
        "llama_cpp_python": _llama_cpp_version(),
        "file_type": file_type,
        "allow_requantize": True,
        "architecture": info.architecture,
        "context_length": info.context_length,
        "chat_template": "gguf" if info.chat_template else f"fallback:{info.architecture}",
        "seconds": round(time.perf_counter() - started, 2),
    }
    log.info("quantized %s -> %s (%s, %.1f MB)", source, out, file_type, info.file_size_bytes / 1e6)
    return QuantizedModel(out, info, origin, build)


def validate_quantized(
    info: GgufInfo, *, file_type: str, architecture: str | None = None, context_length: int | None = None
) -> GgufInfo:
    """Every problem of a quantized GGUF at once, as one ModelFileError."""
    problems = []
    if not info.architecture:
        problems.append("no general.architecture")
    elif architecture and info.architecture != architecture:
        problems.append(f"architecture {info.architecture!r}, expected {architecture!r}")
    if info.file_type_name != file_type:
        problems.append(f"quantization {info.file_type_name}, expected {file_type}")
    if not info.context_length or info.context_length <= 0:
        problems.append(f"no {info.architecture}.context_length")
    elif context_length and info.context_length != context_length:
        problems.append(f"context length {info.context_length}, expected {context_length}")
    if not info.chat_template and fallback_template_for(info.architecture) is None:
        problems.append("no chat template (tokenizer.chat_template) and none built in for this architecture")
    if not info.tensors:
        problems.append("no tensors")
    if problems:
        raise ModelFileError(
            f"{info.path} failed validation: " + "; ".join(problems),
            fix="quantize from the original f16 GGUF of an instruct model",
        )
    return info


def record_in_bundle(bundle_dir: Path, name: str, model: QuantizedModel) -> Artifact:
    """Add the quantized file (which must lie inside ``bundle_dir``) to the bundle's manifest."""
    try:
        manifest = Manifest.read(bundle_dir)
    except BundleError:
        manifest = Manifest()
    ctx = BuildContext(out=bundle_dir, manifest=manifest)
    return ctx.record(name, model.path, GGUF_KIND, source=model.source, build=model.build)


def is_recorded(bundle_dir: Path, name: str, source: Path, file_type: str) -> bool:
    """True when the bundle already holds ``name`` quantized from this very source to this type."""
    try:
        manifest = Manifest.read(bundle_dir)
    except BundleError:
        return False
    art = manifest.get(name)
    if art is None or art.build.get("file_type") != file_type or art.source.get("input") != str(source):
        return False
    if manifest.verify_one(bundle_dir, art, full=True):
        return False
    return source.is_file() and art.source.get("input_sha256") == sha256_of(source)


def write_sidecar(model: QuantizedModel) -> Path:
    """For a file outside a bundle: ``<file>.json`` with the same record a manifest would hold."""
    sidecar = model.path.with_name(model.path.name + ".json")
    record = {
        "path": model.path.name,
        "kind": GGUF_KIND,
        "sha256": sha256_of(model.path),
        "size_bytes": model.path.stat().st_size,
        "source": model.source,
        "build": model.build,
    }
    sidecar.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return sidecar


def _check_file_type(file_type: str) -> str:
    name = file_type.upper()
    if name not in FILE_TYPES:
        raise ModelFileError(
            f"unknown quantization type {file_type!r}",
            fix=f"use one of: {', '.join(FILE_TYPES)}",
        )
    return name


def _run_quantizer(source: Path, out: Path, *, file_type: str, threads: int) -> None:
    import llama_cpp

    from engines.llm.llama_runtime import init_backend

    init_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FILE_TYPES[file_type]
    params.nthread = threads
    params.allow_requantize = True
    log.info("quantizing %s to %s with %d threads", source, file_type, threads)
    result = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params)
    if result != 0 or not out.is_file():
        raise ModelFileError(
            f"llama.cpp's quantizer failed on {source} (code {result}; run with -v for its log)",
            fix="check the source GGUF loads with llama.cpp and the disk has room",
        )


def find_converter(explicit: Path | None = None) -> Path:
    candidates = [explicit, Path(os.environ[CONVERTER_ENV]) if os.environ.get(CONVERTER_ENV) else None]
    found = shutil.which(CONVERTER_NAME)
    candidates.append(Path(found) if found else None)
    for candidate in candidates:
        if candidate is not None and candidate.is_file():
            return candidate
    raise BackendUnavailable(
        f"converting a Hugging Face folder needs llama.cpp's {CONVERTER_NAME}, which is not installed here",
        fix=f"pass --converter PATH (or set {CONVERTER_ENV}) to the script from a llama.cpp checkout "
        "with its requirements installed, or convert elsewhere and quantize the f16 GGUF",
    )


def _convert_hf_folder(folder: Path, out: Path, converter: Path | None) -> Path:
    if not (folder / "config.json").is_file():
        raise ModelFileError(
            f"{folder} is not a Hugging Face model folder (no config.json)",
            fix="pass a .gguf file or a folder with config.json and the weights",
        )
    script = find_converter(converter)
    cmd = [sys.executable, str(script), str(folder), "--outfile", str(out), "--outtype", "f16"]
    log.info("converting %s with %s", folder, script)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not out.is_file():
        raise ModelFileError(
            f"{CONVERTER_NAME} could not convert {folder}:\n{result.stderr.strip()[-2000:]}",
            fix="check the folder holds a model architecture llama.cpp supports",
        )
    return out


def _llama_cpp_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return "unknown"


# python -m build_scripts quantize ------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "quantize",
        help="quantize a GGUF (or convert and quantize a Hugging Face folder) with llama.cpp",
        description="Writes --out FILE (with FILE.json beside it), or adds llm/NAME to the bundle "
        "in --bundle DIR, where the appliance can use it as llm.model = NAME.",
    )
    parser.add_argument("source", type=Path, help="f16/f32 or quantized GGUF, or a Hugging Face folder")
    parser.add_argument(
        "--type", default=DEFAULT_FILE_TYPE, help=f"target type (default {DEFAULT_FILE_TYPE})"
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="output .gguf file")
    target.add_argument("--bundle", type=Path, help="bundle folder to add the model to (needs --name)")
    parser.add_argument("--name", help="model name inside the bundle: llm/NAME")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--converter", type=Path, help=f"llama.cpp's {CONVERTER_NAME} (for HF folders)")
    parser.add_argument("--force", action="store_true", help="quantize even if already recorded")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        return _handle(args)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _handle(args: argparse.Namespace) -> int:
    source = args.source.expanduser()
    if args.out is not None:
        model = quantize(
            source, args.out.expanduser(), file_type=args.type, threads=args.threads, converter=args.converter
        )
        sidecar = write_sidecar(model)
        print(f"{model.path}: {_summary(model.info)} (record: {sidecar})")
        return 0
    if not args.name:
        print("error: --bundle needs --name NAME (the model becomes llm/NAME)", file=sys.stderr)
        return 2
    bundle_dir = args.bundle.expanduser()
    if BundleStore(bundle_dir).versioned:  # a manifest written into the root would shadow its versions
        print(
            f"error: {bundle_dir} keeps bundle versions side by side, so a model is added as a new version:\n"
            f"  appliance bundle add-model {source} --name {args.name} --quantize {args.type} --dir {bundle_dir}",
            file=sys.stderr,
        )
        return 1
    name = f"llm/{args.name.removeprefix('llm/')}"
    file_type = _check_file_type(args.type)
    if not args.force and is_recorded(bundle_dir, name, source, file_type):
        print(f"{name}: up to date in {bundle_dir}")
        return 0
    out = bundle_dir / "llm" / f"{name.removeprefix('llm/')}.gguf"
    model = quantize(source, out, file_type=file_type, threads=args.threads, converter=args.converter)
    art = record_in_bundle(bundle_dir, name, model)
    print(f"{name}: {_summary(model.info)}; recorded in {bundle_dir / 'manifest.json'} ({art.sha256[:12]})")
    return 0


def _summary(info: GgufInfo) -> str:
    template = "chat template" if info.chat_template else f"fallback template ({info.architecture})"
    return (
        f"{info.architecture}, {info.file_type_name}, context {info.context_length}, {template}, "
        f"{info.file_size_bytes / 1e6:.1f} MB"
    )
