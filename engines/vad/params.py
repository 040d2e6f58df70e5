"""The VAD's settings (``[vad]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from engines.params import Params


class VadParams(Params):
    backend: Literal["onnxruntime", "torch"] = Field("onnxruntime", description="onnxruntime | torch")
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="torch backend only; onnxruntime runs on the CPU"
    )
    threshold: float = Field(0.5, gt=0.0, lt=1.0, description="speech probability at which a frame is voiced")
    threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="onnxruntime: intra-op threads (unset = 1); torch: its process-wide thread count "
        "(unset = left as it is; 1 is fastest for this tiny model on a busy CPU)",
    )
