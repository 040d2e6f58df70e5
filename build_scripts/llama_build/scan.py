"""Read a built library's machine code for instruction families it must not contain.

A profile says what was compiled in; this checks what came out, whatever processor built it: AMX
tile instructions never (they fault where the hypervisor has not enabled tile state although CPUID
advertises it), AVX-512 (any ``zmm`` register) only in a profile that switched it on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from build_scripts.llama_build.profile import BuildProfile

AMX_MNEMONICS = frozenset(
    {
        "ldtilecfg", "sttilecfg", "tileloadd", "tileloaddt1", "tilestored", "tilerelease", "tilezero",
        "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud", "tdpbf16ps", "tdpfp16ps",
    }
)  # fmt: skip
_LINE = re.compile(r"^\s*[0-9a-f]+:\s+([a-z][a-z0-9.]*)\s*(.*)$")


class ScanUnavailable(Exception):
    """No disassembler on this machine."""


def forbidden_instructions(library: Path, *, avx512_allowed: bool) -> dict[str, int]:
    """Counts of the instructions ``library`` must not hold (empty when clean)."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise ScanUnavailable("objdump is not installed (apt-get install binutils)")
    proc = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True
    )
    found: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        mnemonic, operands = match.groups()
        if mnemonic in AMX_MNEMONICS:
            found[mnemonic] = found.get(mnemonic, 0) + 1
        elif not avx512_allowed and "%zmm" in operands:
            found["avx-512 (zmm)"] = found.get("avx-512 (zmm)", 0) + 1
    return found


def avx512_allowed(profile: BuildProfile) -> bool:
    return "-DGGML_AVX512=ON" in profile.cmake_args or profile.machine != "x86_64"


def scan_wheel(wheel: Path, profile: BuildProfile) -> dict[str, dict[str, int]]:
    """``forbidden_instructions`` of every ggml CPU library inside ``wheel``, by file name."""
    if profile.machine != "x86_64":
        return {}
    results: dict[str, dict[str, int]] = {}
    seen: set[int] = set()  # a wheel stores a library's symlinked names as copies
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for info in archive.infolist():
            name = info.filename
            if (
                Path(name).name.startswith("libggml-cpu")
                and ".so" in Path(name).name
                and info.CRC not in seen
            ):
                seen.add(info.CRC)
                extracted = Path(archive.extract(name, tmp))
                results[Path(name).name] = forbidden_instructions(
                    extracted, avx512_allowed=avx512_allowed(profile)
                )
    return results
