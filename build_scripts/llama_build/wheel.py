"""Compile, cache and install the llama-cpp-python wheel of one build profile.

Each profile's wheel lives in its own folder of the cache, named by a key over everything that
decides the machine code (package version, the wheel's Python tag, architecture, CMake options and the
processor features the options were chosen from), with ``build.json`` beside it. llama-cpp-python loads
its native library through ctypes, so its wheels are ``py3-none-<platform>``: one build serves every
Python 3 of the machine (3.10 and 3.11 alike). A wheel is reused only where
the same key comes out; pip's own cache is never consulted, since it keys a source build by version
alone and would hand back a wheel compiled with other options.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from build_scripts.llama_build.profile import BuildProfile
from build_scripts.llama_build.scan import ScanUnavailable, scan_wheel

PACKAGE = "llama-cpp-python"
BUILD_RECORD = "build.json"
FAILED_RECORD = "smoke-failed.json"
INSTALLED_RECORD = ".llama-cpp-build.json"  # in the virtual environment's folder

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class CachedWheel:
    key: str
    folder: Path
    wheel: Path
    profile: BuildProfile


WHEEL_PYTHON_TAG = "py3"  # the package's wheels carry no CPython ABI (see above)


def python_tag(python: str) -> str:
    """The Python tag of the wheels ``python`` takes from this cache: ``py3`` for any Python 3."""
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.version_info[0])"], check=True, capture_output=True, text=True
    )
    return f"py{out.stdout.strip()}"


def cache_key(version: str, profile: BuildProfile, py_tag: str) -> str:
    facts = {
        "package": PACKAGE,
        "version": version,
        "python": py_tag,
        "machine": profile.machine,
        "cmake_args": list(profile.cmake_args),
        "features": list(profile.features),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def cache_folder(wheels: Path, version: str, profile: BuildProfile, py_tag: str) -> Path:
    return wheels / f"{PACKAGE}-{version}-{py_tag}-{profile.name}-{cache_key(version, profile, py_tag)}"


def find_cached(folder: Path) -> Path | None:
    if not (folder / BUILD_RECORD).is_file():
        return None  # a build that never finished leaves no record
    # A wheel tied to one CPython (cp311-cp311) would not install for another: not this cache's kind.
    found = sorted(folder.glob(f"llama_cpp_python-*-{WHEEL_PYTHON_TAG}-none-*.whl"))
    return found[0] if found else None


def build_wheel(
    python: str,
    version: str,
    profile: BuildProfile,
    folder: Path,
    *,
    run: Runner = subprocess.run,
    log: Callable[[str], None] = print,
) -> Path:
    """Compile the wheel for ``profile`` into ``folder`` (replacing whatever is there)."""
    env = dict(os.environ, CMAKE_ARGS=" ".join(profile.cmake_args), FORCE_CMAKE="1")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llama-wheel-") as tmp:
        command = [
            python, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps", "--no-cache-dir",
            "--no-binary", PACKAGE, "-w", tmp, f"{PACKAGE}=={version}",
        ]  # fmt: skip
        log(f"compiling {PACKAGE} {version} with {profile.describe()}")
        result = run(command, env=env)
        built = sorted(Path(tmp).glob("llama_cpp_python-*.whl"))
        if result.returncode != 0 or not built:
            raise RuntimeError(
                f"compiling {PACKAGE} {version} failed (pip exit {result.returncode}) with {profile.describe()}"
            )
        try:
            found = scan_wheel(built[0], profile)
        except ScanUnavailable as err:
            log(f"warning: the build's instructions were not checked: {err}")
            found = {}
        bad = {lib: counts for lib, counts in found.items() if counts}
        if bad:
            raise RuntimeError(
                f"the {profile.name} build of {PACKAGE} holds instructions its profile excludes: {bad}; "
                "it would crash on machines that advertise but cannot run them"
            )
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        wheel = folder / built[0].name
        shutil.move(str(built[0]), wheel)
    record = {
        "profile": asdict(profile),
        "version": version,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.monotonic() - started, 1),
        "instruction_scan": found,
        "python": python,
    }
    (folder / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return wheel


def installed_key(venv: Path) -> str | None:
    try:
        return str(json.loads((venv / INSTALLED_RECORD).read_text())["key"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def install_wheel(python: str, cached: CachedWheel, venv: Path, *, run: Runner = subprocess.run) -> None:
    command = [
        python, "-m", "pip", "--disable-pip-version-check", "install", "--quiet", "--no-deps",
        "--force-reinstall", "--no-cache-dir", str(cached.wheel),
    ]  # fmt: skip
    result = run(command)
    if result.returncode != 0:
        raise RuntimeError(f"installing {cached.wheel} failed (pip exit {result.returncode})")
    record = {"key": cached.key, "wheel": str(cached.wheel), "profile": cached.profile.name}
    (venv / INSTALLED_RECORD).write_text(json.dumps(record, indent=2) + "\n")


def mark_failed(folder: Path, reason: str) -> None:
    """Remember that this build crashed here, so the next set-up goes straight to the safe profile."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FAILED_RECORD).write_text(json.dumps({"reason": reason}) + "\n")


def has_failed(folder: Path) -> bool:
    return (folder / FAILED_RECORD).is_file()


def current_venv() -> Path:
    return Path(sys.prefix)
