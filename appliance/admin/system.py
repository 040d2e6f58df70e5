"""Host figures for the status page: CPU, memory, disk, temperatures, and the GPU where there is one.

On a Jetson the GPU is read from ``tegrastats`` (nvidia-smi has no GPU figures there); elsewhere from
``nvidia-smi``. Both are optional: without them the GPU list is empty. External tools run with a
short timeout and their answer is cached, so a busy page never piles up processes.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import psutil

from appliance.admin.schemas import GpuStats, HostStats

log = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 2.0
GPU_CACHE_S = 5.0
_MIB = 1024 * 1024


def parse_nvidia_smi(text: str) -> list[GpuStats]:
    """Lines of ``nvidia-smi --query-gpu=name,utilization.gpu,memory.used,memory.total,temperature.gpu
    --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5:
            continue
        name, util, used, total, temp = fields
        gpus.append(
            GpuStats(
                name=name,
                utilization_percent=_number(util),
                memory_used_bytes=_mib_bytes(used),
                memory_total_bytes=_mib_bytes(total),
                temperature_c=_number(temp),
            )
        )
    return gpus


_TEGRA_RAM = re.compile(r"RAM (\d+)/(\d+)MB")
_TEGRA_GPU = re.compile(r"GR3D_FREQ (\d+)%")
_TEGRA_GPU_TEMP = re.compile(r"\bGPU@(-?[\d.]+)C")


def parse_tegrastats(line: str) -> list[GpuStats]:
    """One ``tegrastats`` line; the Jetson's GPU shares the RAM, so memory is the board's."""
    util = _TEGRA_GPU.search(line)
    if util is None:
        return []
    ram = _TEGRA_RAM.search(line)
    temp = _TEGRA_GPU_TEMP.search(line)
    return [
        GpuStats(
            name="Jetson integrated GPU",
            utilization_percent=float(util.group(1)),
            memory_used_bytes=int(ram.group(1)) * _MIB if ram else None,
            memory_total_bytes=int(ram.group(2)) * _MIB if ram else None,
            temperature_c=float(temp.group(1)) if temp else None,
        )
    ]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _mib_bytes(text: str) -> int | None:
    value = _number(text)
    return None if value is None else int(value * _MIB)


class HostProbe:
    """Reads host figures; GPU figures are cached for ``GPU_CACHE_S``."""

    def __init__(self, disk_path: Path) -> None:
        self.disk_path = disk_path
        self._lock = threading.Lock()
        self._gpu_at = -GPU_CACHE_S
        self._gpus: list[GpuStats] = []
        self._gpu_source: str | None = None
        psutil.cpu_percent(interval=None)  # primes the counter: the next call measures since now

    def read(self) -> HostStats:
        memory = psutil.virtual_memory()
        disk_path = self._existing(self.disk_path)
        disk = psutil.disk_usage(str(disk_path))
        gpus, source = self._gpu()
        return HostStats(
            cpu_count=os.cpu_count() or 1,
            cpu_percent=float(psutil.cpu_percent(interval=None)),
            load_avg_1m=round(os.getloadavg()[0], 2),
            memory_total_bytes=int(memory.total),
            memory_used_bytes=int(memory.total - memory.available),
            memory_percent=float(memory.percent),
            disk_path=str(disk_path),
            disk_total_bytes=int(disk.total),
            disk_used_bytes=int(disk.used),
            disk_percent=float(disk.percent),
            temperatures_c=self._temperatures(),
            gpus=gpus,
            gpu_source=source,
        )

    @staticmethod
    def _existing(path: Path) -> Path:
        while not path.exists() and path != path.parent:
            path = path.parent
        return path

    @staticmethod
    def _temperatures() -> dict[str, float]:
        readings: dict[str, float] = {}
        sensors = getattr(psutil, "sensors_temperatures", None)
        if sensors is None:
            return readings
        try:
            groups = sensors()
        except OSError:
            return readings
        for group, entries in groups.items():
            for index, entry in enumerate(entries):
                label = entry.label or f"{group}{index if len(entries) > 1 else ''}"
                readings[label if label.startswith(group) else f"{group}/{label}"] = round(entry.current, 1)
        return readings

    def _gpu(self) -> tuple[list[GpuStats], str | None]:
        with self._lock:
            if time.monotonic() - self._gpu_at >= GPU_CACHE_S:
                self._gpus, self._gpu_source = self._probe_gpu()
                self._gpu_at = time.monotonic()
            return list(self._gpus), self._gpu_source

    @staticmethod
    def _probe_gpu() -> tuple[list[GpuStats], str | None]:
        tegrastats = shutil.which("tegrastats")
        if tegrastats:
            line = _first_line([tegrastats, "--interval", "500"])
            gpus = parse_tegrastats(line or "")
            if gpus:
                return gpus, "tegrastats"
        smi = shutil.which("nvidia-smi")
        if smi:
            query = "name,utilization.gpu,memory.used,memory.total,temperature.gpu"
            try:
                done = subprocess.run(
                    [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=TOOL_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as err:
                log.warning("nvidia-smi failed: %s", err)
                return [], None
            gpus = parse_nvidia_smi(done.stdout) if done.returncode == 0 else []
            if gpus:
                return gpus, "nvidia-smi"
        return [], None


def _first_line(command: list[str]) -> str | None:
    """The first output line of a tool that prints forever (tegrastats), then stop it."""
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError as err:
        log.warning("%s failed: %s", command[0], err)
        return None
    timer = threading.Timer(TOOL_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        return proc.stdout.readline() or None
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
