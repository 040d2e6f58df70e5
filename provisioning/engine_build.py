"""Step 3: build this device's engines (TensorRT plans) from the bundle's ONNX graphs.

TensorRT plans only run on the GPU and TensorRT version that built them, so they are built on the
device, by the ASR build code: ``build_scripts.whisper.tensorrt.build_whisper_tensorrt(BuildContext)``
(it skips plans that are current and records new ones in the bundle's manifest.json). On ``--target
cpu`` nothing is built: ONNX Runtime runs the ONNX graphs.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

from engines.bundle_store import resolve_bundle_dir
from engines.manifest import Manifest
from provisioning.context import ProvisioningContext
from provisioning.framework import StepFailed, StepOutcome
from provisioning.progress import elapsed_bar

BUILDER_MODULE = "build_scripts.whisper.tensorrt"
BUILDER_FUNCTION = "build_whisper_tensorrt"
PLAN_KIND = "tensorrt-plan"
NOT_NEEDED_ON_CPU = "not needed on cpu: ONNX Runtime runs the ONNX graphs"
FIX_NO_TENSORRT = (
    "install TensorRT and pycuda from JetPack (sudo apt install nvidia-tensorrt python3-libnvinfer "
    "python3-pycuda), recreate the virtual environment with --system-site-packages, then: "
    "python -m provisioning run --from engines"
)

PlanBuilder = Callable[[Path], list[str]]


def tensorrt_installed() -> bool:
    return importlib.util.find_spec("tensorrt") is not None and importlib.util.find_spec("pycuda") is not None


def find_plan_builder() -> PlanBuilder | None:
    """This release's TensorRT plan builder as ``build(bundle_dir) -> plan paths``; None without one."""
    if importlib.util.find_spec(BUILDER_MODULE) is None:
        return None
    build = getattr(importlib.import_module(BUILDER_MODULE), BUILDER_FUNCTION, None)
    if not callable(build):
        return None

    def builder(bundle_dir: Path) -> list[str]:
        from build_scripts.context import BuildContext

        build(BuildContext(out=bundle_dir, manifest=Manifest.read(bundle_dir)))
        plans = Manifest.read(bundle_dir).artifacts.values()
        return sorted(a.path for a in plans if a.kind == PLAN_KIND)

    return builder


def build_device_engines(target: str, bundle_dir: Path, *, progress: bool = True) -> StepOutcome:
    if target == "cpu":
        return StepOutcome(NOT_NEEDED_ON_CPU, {"backend": "onnxruntime", "plans": []})
    if not tensorrt_installed():
        raise StepFailed(
            "TensorRT (with pycuda) is not installed on this device, so its engines cannot be built",
            fix=FIX_NO_TENSORRT,
        )
    builder = find_plan_builder()
    if builder is None:
        raise StepFailed(
            f"this software release has no TensorRT plan builder ({BUILDER_MODULE}.{BUILDER_FUNCTION})",
            fix="install a release that builds TensorRT plans, or run the speech recognizer on ONNX Runtime's "
            'CUDA provider: set asr.backend = "onnxruntime" and asr.device = "cuda" in the site file',
        )
    try:
        with elapsed_bar("building TensorRT plans", enabled=progress):
            plans = builder(bundle_dir)
    except Exception as err:
        raise StepFailed(
            f"building the TensorRT plans failed: {type(err).__name__}: {err}",
            fix="check the GPU is free (no appliance running: sudo systemctl stop appliance) and enough "
            "memory is free, then: python -m provisioning run --from engines",
        ) from err
    import tensorrt  # present: checked above

    return StepOutcome(
        f"{len(plans)} TensorRT plan(s) current for TensorRT {tensorrt.__version__}",
        {"backend": "tensorrt", "tensorrt": tensorrt.__version__, "plans": plans},
    )


def run_engine_build(ctx: ProvisioningContext) -> StepOutcome:
    # A versioned bundle root: the plans go into the active version, the one the daemon runs.
    return build_device_engines(ctx.target, resolve_bundle_dir(ctx.bundle_dir), progress=ctx.progress)
