"""Bundle steps: export a Whisper checkpoint to ONNX (fp32, fp16, int8) into the bundle and record it.

The default bundle's step exports the packaged CTranslate2 Whisper base; ``python -m build_scripts.whisper
export`` adds any other checkpoint (e.g. a distil-whisper transformers folder) under its own model name.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from build_scripts.context import BuildContext
from build_scripts.whisper.checkpoint import WhisperCheckpoint
from build_scripts.whisper.export import EXPORTER_VERSION, OPSET, export_onnx
from engines.asr.artifacts import PARTS, config_artifact, onnx_artifact, onnx_folder, tokenizer_artifact
from engines.asr.config import PRECISIONS

log = logging.getLogger(__name__)

CT2_MODELS = ("whisper-base", "whisper-tiny-en")  # packaged CTranslate2 checkpoints exported to ONNX


def onnx_outputs(model: str) -> dict[str, tuple[str, str]]:
    """artifact name -> (file name, kind)"""
    outputs = {
        config_artifact(model): ("config.json", "whisper-onnx-config"),
        tokenizer_artifact(model): ("tokenizer.json", "whisper-tokenizer"),
    }
    for precision in PRECISIONS:
        for part in PARTS:
            outputs[onnx_artifact(model, part, precision)] = (
                f"{part}-{precision}.onnx",
                f"whisper-onnx-{part}",
            )
    return outputs


def build_parameters() -> dict[str, object]:
    import torch

    return {
        "exporter_version": EXPORTER_VERSION,
        "opset": OPSET,
        "precisions": list(PRECISIONS),
        "int8": "onnxruntime dynamic quantization, MatMul weights, per channel, 7-bit (reduce_range)",
        "torch": torch.__version__.split("+")[0],
    }


def export_into_bundle(
    ctx: BuildContext,
    model: str,
    load: Callable[[], WhisperCheckpoint],
    tokenizer_json: Path,
    source: dict[str, str],
) -> None:
    """Export unless every output is recorded with this source and build; then record each file."""
    build = build_parameters()
    outputs = onnx_outputs(model)
    if all(ctx.is_current(name, source=source, build=build) for name in outputs):
        log.info("whisper onnx (%s): up to date", model)
        return
    target_dir = ctx.out / onnx_folder(model)
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".whisper-onnx-", dir=ctx.out) as tmp:
        staging = Path(tmp)
        export_onnx(load(), tokenizer_json, staging)
        for name, (file_name, kind) in outputs.items():
            target = target_dir / file_name
            shutil.move(str(staging / file_name), target)
            ctx.record(name, target, kind, source=source, build=build)
    log.info("whisper onnx (%s): %s written", model, target_dir)


def export_whisper_onnx(ctx: BuildContext) -> None:
    from build_scripts.whisper.ct2 import load_ct2_folder

    for model in CT2_MODELS:
        prefix = f"asr/{model}/ct2"
        weights = ctx.manifest.get(f"{prefix}/model.bin")
        tokenizer = ctx.manifest.get(f"{prefix}/tokenizer.json")
        if weights is None or tokenizer is None:
            log.warning("whisper onnx: %s is not in the bundle; skipping its export", prefix)
            continue
        source = {"from": prefix, "model.bin sha256": weights.sha256, "tokenizer sha256": tokenizer.sha256}
        ct2_dir = (ctx.out / weights.path).parent
        load = functools.partial(load_ct2_folder, ct2_dir)
        export_into_bundle(ctx, model, load, ctx.out / tokenizer.path, source)


def build_whisper_tensorrt_plans(ctx: BuildContext) -> None:
    from build_scripts.whisper.tensorrt import build_whisper_tensorrt

    for model in CT2_MODELS:
        if ctx.manifest.get(config_artifact(model)) is not None:
            build_whisper_tensorrt(ctx, model)


WHISPER_STEPS = (export_whisper_onnx, build_whisper_tensorrt_plans)
