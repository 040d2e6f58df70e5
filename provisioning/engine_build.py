"""Step 3: build this device's engines (TensorRT plans) from the bundle's ONNX graphs.

TensorRT plans only run on the GPU and TensorRT version that built them, so they are built on the
device. The builder lives with the ASR build code: ``build_scripts.whisper.tensorrt.build_plans(
bundle_dir: Path) -> list[Path]`` (it skips plans that are current). On ``--target cpu`` nothing is
built: ONNX Runtime runs the ONNX graphs.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioning.context import ProvisioningContext
from provisioning.framework import StepFailed, StepOutcome
from provisioning.progress import elapsed_bar

BUILDER_MODULE = "build_scripts.whisper.tensorrt"
BUILDER_FUNCTION = "build_plans"
NOT_NEEDED_ON_CPU = "not needed on cpu: ONNX Runtime runs the ONNX graphs"
FIX_NO_TENSORRT = (
    "install TensorRT from JetPack (sudo apt install nvidia-tensorrt python3-libnvinfer), recreate the "
    "virtual environment with --system-site-packages, then: python -m provisioning run --from engines"
)


def find_plan_builder() -> Callable[..., Any] | None:
    """The TensorRT plan builder of this software release, or None when it has none."""
    if importlib.util.find_spec(BUILDER_MODULE) is None:
        return None
    module = importlib.import_module(BUILDER_MODULE)
    builder = getattr(module, BUILDER_FUNCTION, None)
    return builder if callable(builder) else None


def build_device_engines(target: str, bundle_dir: Path, *, progress: bool = True) -> StepOutcome:
    if target == "cpu":
        return StepOutcome(NOT_NEEDED_ON_CPU, {"backend": "onnxruntime", "plans": []})
    if importlib.util.find_spec("tensorrt") is None:
        raise StepFailed(
            "TensorRT is not installed on this device, so its engines cannot be built",
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
            built = builder(bundle_dir)
    except Exception as err:
        raise StepFailed(
            f"building the TensorRT plans failed: {type(err).__name__}: {err}",
            fix="check the GPU is free (no appliance running: sudo systemctl stop appliance) and enough "
            "memory is free, then: python -m provisioning run --from engines",
        ) from err
    plans = [str(p) for p in (built or [])]
    import tensorrt  # present: checked above

    return StepOutcome(
        f"{len(plans)} TensorRT plan(s) current for TensorRT {tensorrt.__version__}",
        {"backend": "tensorrt", "tensorrt": tensorrt.__version__, "plans": plans},
    )


def run_engine_build(ctx: ProvisioningContext) -> StepOutcome:
    return build_device_engines(ctx.target, ctx.bundle_dir, progress=ctx.progress)
