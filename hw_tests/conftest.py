"""Hardware tests: skipped with a reason where the GPU or sound card is missing."""

from __future__ import annotations

import pytest

from engines.gpu import EVIDENCE, nvidia_gpu_evidence


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if nvidia_gpu_evidence() is not None:
        return
    looked = ", ".join(str(p) for p in EVIDENCE)
    skip = pytest.mark.skip(reason=f"no NVIDIA GPU on this machine (no nvidia-smi, none of {looked})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
