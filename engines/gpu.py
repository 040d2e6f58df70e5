"""Is there an NVIDIA GPU here? Without running anything that needs one.

``nvidia-smi`` is missing on many Jetsons (and in containers that only mount the driver), so the driver's
own traces count too: ``/proc/driver/nvidia`` (the desktop and data-centre driver), ``/etc/nv_tegra_release``
(a Jetson's L4T release) and the GPU device nodes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

EVIDENCE = (
    Path("/proc/driver/nvidia/version"),
    Path("/etc/nv_tegra_release"),
    Path("/dev/nvidia0"),
    Path("/dev/nvhost-gpu"),  # the Jetson's integrated GPU
)


def nvidia_gpu_evidence(root: Path = Path("/")) -> str | None:
    """What shows an NVIDIA GPU here (a path, or ``nvidia-smi``), or None. ``root``: for tests."""
    for path in EVIDENCE:
        candidate = root / path.relative_to("/")
        if candidate.exists():
            return str(path)
    if root == Path("/") and shutil.which("nvidia-smi") is not None:
        return "nvidia-smi"
    return None
