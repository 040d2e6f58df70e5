"""The machine a benchmark ran on: CPU, cores, memory, GPU and runtime versions, for comparing results."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.paths import RESULTS

VERSIONED_PACKAGES = ("onnxruntime", "onnxruntime-gpu", "llama_cpp_python", "torch", "numpy", "piper-tts")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        return None


def _gpu() -> str | None:
    """The GPU as ``nvidia-smi`` names it, the Jetson model, or None."""
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    model = Path("/proc/device-tree/model")
    if model.is_file():
        return model.read_text(encoding="utf-8", errors="replace").strip("\x00 \n")
    return None


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def describe_machine() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": _memory_gb(),
        "gpu": _gpu(),
        "python": sys.version.split()[0],
        "versions": _versions(),
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory. Linux: ``VmHWM`` of /proc/self/status, which starts afresh at
    exec (``getrusage``'s ``ru_maxrss`` carries the parent's peak over fork and exec, so a child started
    by a big benchmark process would report the parent's peak)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)  # kB
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)  # KiB on Linux


def write_result(name: str, args: dict[str, Any], results: dict[str, Any]) -> Path:
    """``results`` (with the arguments and this machine) as ~/.cache/appliance/bench-results/<name>-<time>.json."""
    folder = RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = folder / f"{name}-{stamp}.json"
    path.write_text(json.dumps({"args": args, "machine": describe_machine(), "results": results}, indent=2))
    print(f"written to {path}")
    return path
