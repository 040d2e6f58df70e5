"""Step 1, preflight: is this the right hardware and software, with room for the bundle?

Each check says pass, warn, fail or skip, what it found, and for a failure the fix. On a machine that
is not a Jetson the Jetson-only checks are skipped with ``--target cpu`` and fail with ``--target
jetson``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from provisioning.checks import FAIL, PASS, SKIP, WARN, Check
from provisioning.context import ProvisioningContext
from provisioning.framework import StepFailed, StepOutcome
from provisioning.preflight_audio import check_audio

MIN_FREE_DISK_BYTES = 6 * 1024**3  # the bundle (about 1.6 GB default, 4 GB with larger models) + plans
MIN_RAM_BYTES = {"jetson": 15 * 1024**3, "cpu": 4 * 1024**3}
MODEL_FILES = ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model")
JETPACK_FOR_L4T = {"36.4": "6.1/6.2", "36.3": "6.0", "36.2": "6.0 DP", "35.6": "5.1.4", "35.5": "5.1.3"}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip("\0\n ")
    except OSError:
        return None


def _not_on_cpu(name: str, what: str) -> Check:
    return Check(name, SKIP, f"not applicable on --target cpu ({what})")


def check_jetson(ctx: ProvisioningContext) -> Check:
    model = next((m for m in (_read(p) for p in MODEL_FILES) if m), None)
    if model and "jetson" in model.lower():
        return Check("jetson", PASS, model)
    found = model or f"{platform.machine()} {platform.system()} machine"
    if ctx.target == "cpu":
        return Check(
            "jetson", SKIP, f"not a Jetson ({found}); --target cpu: ONNX Runtime and llama.cpp on the CPU"
        )
    return Check(
        "jetson",
        FAIL,
        f"not a Jetson: {found}",
        fix="run this on the Jetson Orin itself, or use --target cpu on a machine without an NVIDIA GPU",
    )


def check_l4t(ctx: ProvisioningContext) -> Check:
    if ctx.target == "cpu":
        return _not_on_cpu("l4t", "no L4T/JetPack")
    text = _read("/etc/nv_tegra_release")
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*(\d+)", text or "")
    if not match:
        return Check(
            "l4t", FAIL, "no /etc/nv_tegra_release", fix="flash the device with JetPack 6 (L4T 36.x)"
        )
    l4t = f"{match.group(1)}.{match.group(2)}"
    jetpack = JETPACK_FOR_L4T.get(l4t, "unknown")
    if int(match.group(1)) < 36:
        return Check("l4t", FAIL, f"L4T {l4t} (JetPack {jetpack})", fix="upgrade to JetPack 6 (L4T 36.x)")
    return Check("l4t", PASS, f"L4T {l4t} (JetPack {jetpack})")


def check_cuda(ctx: ProvisioningContext) -> Check:
    if ctx.target == "cpu":
        return _not_on_cpu("cuda", "engines run on the CPU")
    version_json = Path("/usr/local/cuda/version.json")
    if version_json.is_file():
        try:
            version = json.loads(version_json.read_text())["cuda"]["version"]
            return Check("cuda", PASS, f"CUDA {version}")
        except (ValueError, KeyError, OSError):
            pass
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if Path(nvcc).exists():
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        match = re.search(r"release ([\d.]+)", out)
        if match:
            return Check("cuda", PASS, f"CUDA {match.group(1)}")
    return Check(
        "cuda", FAIL, "CUDA not found", fix="install it with JetPack: sudo apt install nvidia-jetpack"
    )


def check_tensorrt(ctx: ProvisioningContext) -> Check:
    if ctx.target == "cpu":
        return _not_on_cpu("tensorrt", "ONNX Runtime runs the ONNX graphs")
    if importlib.util.find_spec("tensorrt") is None:
        return Check(
            "tensorrt",
            FAIL,
            f"the tensorrt Python module is not importable from {sys.executable}",
            fix="install TensorRT from JetPack (sudo apt install nvidia-tensorrt python3-libnvinfer) and "
            "create the virtual environment with --system-site-packages",
        )
    import tensorrt  # only on the device

    return Check("tensorrt", PASS, f"TensorRT {tensorrt.__version__}")


def _mem_total_bytes() -> int:
    text = _read("/proc/meminfo") or ""
    match = re.search(r"MemTotal:\s+(\d+) kB", text)
    return int(match.group(1)) * 1024 if match else 0


def check_gpu_memory(ctx: ProvisioningContext) -> Check:
    if ctx.target == "cpu":
        return _not_on_cpu("gpu_memory", "no GPU")
    # The Jetson's GPU shares the system memory; a discrete GPU reports its own through nvidia-smi.
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if out:
            name, mib = (part.strip() for part in out.splitlines()[0].split(","))
            status = PASS if int(mib) >= 7 * 1024 else FAIL
            fix = None if status == PASS else "use a GPU with at least 8 GB for the default engines"
            return Check("gpu_memory", status, f"{name}: {int(mib) / 1024:.1f} GiB", fix)
    total = _mem_total_bytes()
    status = PASS if total >= MIN_RAM_BYTES["jetson"] else FAIL
    fix = None if status == PASS else "use a 16 GB Jetson Orin (the engines share the GPU's memory)"
    return Check("gpu_memory", status, f"shared with the CPU: {total / 1024**3:.1f} GiB", fix)


def check_disk(ctx: ProvisioningContext) -> Check:
    probe = ctx.bundle_dir
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    detail = f"{free / 1024**3:.1f} GiB free at {probe}"
    if free < MIN_FREE_DISK_BYTES:
        return Check(
            "disk", FAIL, detail, fix=f"free at least {MIN_FREE_DISK_BYTES / 1024**3:.0f} GiB on {probe}"
        )
    return Check("disk", PASS, detail)


def check_ram(ctx: ProvisioningContext) -> Check:
    total, need = _mem_total_bytes(), MIN_RAM_BYTES[ctx.target]
    detail = f"{total / 1024**3:.1f} GiB"
    if total < need:
        return Check(
            "ram", FAIL, detail, fix=f"this target needs at least {need / 1024**3:.0f} GiB of memory"
        )
    return Check("ram", PASS, detail)


def check_python(ctx: ProvisioningContext) -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if (3, 10) <= sys.version_info[:2] < (3, 13):
        return Check("python", PASS, f"Python {version} at {sys.executable}")
    return Check("python", FAIL, f"Python {version}", fix="use Python 3.10 (JetPack 6) or 3.11")


def check_llama_cpp(ctx: ProvisioningContext) -> Check:
    """The installed llama.cpp build decodes a few tokens in a child process: a build for
    instructions this processor cannot run dies on a signal here, not in a systemd restart loop."""
    from engines.llm.smoke import run_smoke, smallest_gguf

    sources = [d for d in (ctx.media_dir, ctx.bundle_dir) if d is not None]
    model = next((m for m in map(smallest_gguf, sources) if m is not None), None)
    if model is None:
        where = " or ".join(str(d) for d in sources)
        return Check("llama_cpp", WARN, f"no language model in {where} to check llama.cpp with yet")
    result = run_smoke(model)
    if result.ok:
        return Check("llama_cpp", PASS, f"{result.detail} in {result.seconds:.1f} s")
    return Check(
        "llama_cpp",
        FAIL,
        result.detail,
        fix="install a llama-cpp-python built for this processor: from a checkout, ./scripts/setup "
        "(it rebuilds with a portable profile when a build crashes); see docs/machines.md",
    )


def check_clock(ctx: ProvisioningContext) -> Check:
    year = time.gmtime().tm_year
    synced = None
    if shutil.which("timedatectl"):
        proc = subprocess.run(
            ["timedatectl", "show", "-p", "NTPSynchronized", "--value"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            synced = proc.stdout.strip() == "yes"
    now = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if year < 2025:
        return Check(
            "clock",
            FAIL,
            f"the clock says {now}",
            fix="set the time (sudo timedatectl set-time 'YYYY-MM-DD HH:MM:SS') or point "
            "/etc/systemd/timesyncd.conf NTP= at the site's time server",
        )
    if synced is False:
        return Check(
            "clock",
            WARN,
            f"{now}, not synchronized by NTP",
            fix="point /etc/systemd/timesyncd.conf NTP= at the site's time server, then "
            "sudo systemctl restart systemd-timesyncd",
        )
    how = "NTP-synchronized" if synced else "plausible; NTP state unknown (no timedated)"
    return Check("clock", PASS, f"{now}, {how}")


CHECKS: tuple[Callable[[ProvisioningContext], Check], ...] = (
    check_jetson,
    check_l4t,
    check_cuda,
    check_tensorrt,
    check_gpu_memory,
    check_ram,
    check_disk,
    check_python,
    check_llama_cpp,
    check_clock,
    check_audio,
)


def run_preflight(ctx: ProvisioningContext) -> StepOutcome:
    checks = []
    for check in CHECKS:
        try:
            checks.append(check(ctx))
        except Exception as err:  # one broken probe must not hide the other results
            checks.append(
                Check(check.__name__.removeprefix("check_"), FAIL, f"the check itself failed: {err}")
            )
    outputs = {"target": ctx.target, "checks": [asdict(c) for c in checks]}
    failed = [c for c in checks if c.status == FAIL]
    if failed:
        raise StepFailed(
            "; ".join(f"{c.name}: {c.detail}" for c in failed),
            fix="; ".join(f"{c.name}: {c.fix}" for c in failed if c.fix),
            outputs=outputs,
        )
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, WARN, SKIP)}
    summary = f"{counts[PASS]} passed, {counts[WARN]} warnings, {counts[SKIP]} not applicable"
    return StepOutcome(summary, outputs)


def platform_summary() -> dict[str, str]:
    return {
        "hostname": platform.node(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "user": str(os.getuid()),
    }
