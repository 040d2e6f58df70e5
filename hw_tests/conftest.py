"""Hardware tests: skipped with a reason where the GPU or sound card is missing."""

from __future__ import annotations

import shutil

import pytest


def _has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_nvidia_gpu():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine (nvidia-smi not found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
