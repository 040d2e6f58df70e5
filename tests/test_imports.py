"""Every module of the product imports under this interpreter: Python 3.10 on the Jetson (JetPack 6)
and 3.11 here. A name from a newer standard library, or syntax it lacks, fails here first."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("appliance", "engines", "build_scripts", "provisioning", "bench")
# GPU-only backends import their runtimes inside functions; nothing is skipped here.


def _modules() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


@pytest.mark.parametrize("module", _modules())
def test_the_module_imports(module: str) -> None:
    importlib.import_module(module)
