"""Instruction-set profiles for compiling llama.cpp, chosen from the processor's features."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# x86-64 features the profiles are made of, as /proc/cpuinfo names them.
X86_FEATURES = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "bmi2",
    "avx_vnni",
    "avx512f",
    "avx512cd",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)
ARM_FEATURES = ("asimd", "asimddp", "fphp", "asimdhp", "sve", "i8mm")

_X86_BASE = ("sse4_2", "avx", "avx2", "fma", "f16c")
_AVX512_CORE = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
# Never compiled in, whatever the processor says: AMX tile state must be enabled by the kernel and
# the hypervisor, and where it is not, CPUID still advertises it and the first tile instruction faults.
_ALWAYS_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
_COMMON = ("-DLLAVA_BUILD=OFF", "-DGGML_NATIVE=OFF")

SAFE = "safe"
BEST = "best"


class UnsupportedMachine(Exception):
    """The processor lacks what every profile needs."""


@dataclass(frozen=True)
class BuildProfile:
    name: str  # x86-64-avx2 | x86-64-avx512 | arm64-v8.2 | arm64-v8 ...
    cmake_args: tuple[str, ...]
    features: tuple[str, ...]  # the processor features the profile was chosen from (sorted)
    machine: str

    def describe(self) -> str:
        return f"profile {self.name} ({' '.join(self.cmake_args)})"


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The feature flags of the first processor in ``cpuinfo`` (x86 ``flags``, ARM ``Features``)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def _switch(option: str, on: bool) -> str:
    return f"-D{option}={'ON' if on else 'OFF'}"


def _x86_profile(features: frozenset[str], level: str) -> BuildProfile:
    missing = [f for f in _X86_BASE if f not in features]
    if missing:
        raise UnsupportedMachine(
            f"this x86-64 processor lacks {', '.join(missing)}; the appliance needs AVX2 with FMA and F16C "
            "(Intel Haswell / AMD Zen or newer)"
        )
    avx512 = level == BEST and all(f in features for f in _AVX512_CORE)
    avx_vnni = level == BEST and "avx_vnni" in features
    args = [
        *_COMMON,
        *(_switch(o, True) for o in ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C")),
        _switch("GGML_BMI2", "bmi2" in features),
        _switch("GGML_AVX_VNNI", avx_vnni),
        _switch("GGML_AVX512", avx512),
        _switch("GGML_AVX512_VBMI", avx512 and "avx512vbmi" in features),
        _switch("GGML_AVX512_VNNI", avx512 and "avx512_vnni" in features),
        _switch("GGML_AVX512_BF16", avx512 and "avx512_bf16" in features),
        *(_switch(o, False) for o in _ALWAYS_OFF),
    ]
    used = sorted(f for f in features if f in X86_FEATURES)
    return BuildProfile("x86-64-avx512" if avx512 else "x86-64-avx2", tuple(args), tuple(used), "x86_64")


def _arm_profile(features: frozenset[str], level: str) -> BuildProfile:
    # Jetson Orin (Cortex-A78AE) is ARMv8.2 with dot product and fp16 arithmetic; SVE and SME are
    # never switched on (the A78 has neither, and a VM may advertise what it cannot run).
    v82 = level == BEST and {"asimddp", "asimdhp"} <= features
    arch = "armv8.2-a+dotprod+fp16" if v82 else "armv8-a"
    args = (*_COMMON, f"-DGGML_CPU_ARM_ARCH={arch}")
    used = sorted(f for f in features if f in ARM_FEATURES)
    return BuildProfile("arm64-v8.2" if v82 else "arm64-v8", args, tuple(used), "aarch64")


def choose_profile(
    features: Iterable[str], *, machine: str | None = None, level: str = BEST, extra_args: Iterable[str] = ()
) -> BuildProfile:
    """The profile for a processor with ``features``: ``best`` uses what it has (never AMX), ``safe``
    the baseline every supported machine runs (AVX2 on x86-64, ARMv8 on arm64). ``extra_args`` (an
    operator's ``CMAKE_ARGS``, e.g. ``-DGGML_CUDA=on``) are appended and become part of the profile."""
    arch = (machine or platform.machine()).lower()
    flags = frozenset(features)
    if arch in ("x86_64", "amd64"):
        profile = _x86_profile(flags, level)
    elif arch in ("aarch64", "arm64"):
        profile = _arm_profile(flags, level)
    else:
        raise UnsupportedMachine(f"no llama.cpp build profile for {arch}; supported: x86-64 and arm64")
    extra = tuple(a for a in extra_args if a)
    if not extra:
        return profile
    name = profile.name + "+custom"
    return BuildProfile(name, profile.cmake_args + extra, profile.features, profile.machine)
