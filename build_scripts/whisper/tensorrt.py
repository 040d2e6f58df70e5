"""TensorRT plans from the bundle's Whisper ONNX graphs, built on the device that will run them.

``python -m build_scripts.whisper.tensorrt --bundle DIR`` (also a bundle step, skipped where TensorRT
is not installed). Plans are fp16 builds of the fp32 graphs (``BuilderFlag.FP16``), with optimisation
profiles over batch, encoder frames and decoder length; the manifest records the TensorRT version and
the GPU, and the runtime refuses a plan built for another.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from build_scripts.context import BuildContext
from engines.asr.artifacts import config_artifact, onnx_artifact, plan_artifact, plan_folder
from engines.asr.config import WhisperConfig
from engines.errors import BackendUnavailable, EngineError, ModelFileError
from engines.manifest import Manifest

log = logging.getLogger(__name__)

PLAN_BUILDER_VERSION = 1
PLAN_PRECISIONS = ("fp16",)
MAX_BATCH = 1
MIN_ENCODER_FRAMES = 200  # 2 s; shorter utterances are padded to this
WORKSPACE_BYTES = 2 << 30


def tensorrt_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt") is not None and importlib.util.find_spec("pycuda") is not None


def _profiles(
    config: WhisperConfig,
) -> tuple[dict[str, tuple[tuple[int, ...], ...]], dict[str, tuple[tuple[int, ...], ...]]]:
    """(min, opt, max) shapes per input, for the encoder and the decoder."""
    d = config.dims
    n_mels, full = d["n_mels"], 2 * d["n_audio_ctx"]
    heads, head_dim, ctx = d["n_text_head"], d["n_text_state"] // d["n_text_head"], d["n_text_ctx"]
    audio_min, audio_max = MIN_ENCODER_FRAMES // 2, d["n_audio_ctx"]
    b = MAX_BATCH
    encoder: dict[str, tuple[tuple[int, ...], ...]] = {
        "mel": ((1, n_mels, MIN_ENCODER_FRAMES), (1, n_mels, full), (b, n_mels, full))
    }
    decoder: dict[str, tuple[tuple[int, ...], ...]] = {"tokens": ((1, 1), (1, 1), (b, ctx))}
    for i in range(d["n_text_layer"]):
        for kind in ("k", "v"):
            decoder[f"self_{kind}_{i}"] = (
                (1, heads, 0, head_dim),
                (1, heads, 64, head_dim),
                (b, heads, ctx, head_dim),
            )
        decoder[f"cross_k_{i}"] = (
            (1, heads, head_dim, audio_min),
            (1, heads, head_dim, audio_max),
            (b, heads, head_dim, audio_max),
        )
        decoder[f"cross_v_{i}"] = (
            (1, heads, audio_min, head_dim),
            (1, heads, audio_max, head_dim),
            (b, heads, audio_max, head_dim),
        )
    return encoder, decoder


def tensorrt_major(trt: Any) -> int:
    return int(str(trt.__version__).split(".")[0])


def network_flags(trt: Any) -> int:
    """TensorRT 8.x needs explicit batch asked for (the ONNX parser requires it); from 10 it is the
    only mode and the flag is deprecated."""
    if tensorrt_major(trt) < 10:
        return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    return 0


def fp16_flag(trt: Any) -> Any:
    """The builder flag for fp16 kernels: deprecated in TensorRT 10.12 and gone in 11, where precision
    comes from the network's own types (a strongly typed network built from the fp16 graphs)."""
    flag = getattr(trt.BuilderFlag, "FP16", None)
    if flag is None or tensorrt_major(trt) >= 11:
        raise BackendUnavailable(
            f"TensorRT {trt.__version__} builds fp16 only from strongly typed fp16 graphs, which this "
            "builder does not do yet",
            fix='use the TensorRT of JetPack 6 (8.6 or 10.x), or asr.backend = "onnxruntime"',
        )
    return flag


def build_plan(
    onnx_path: Path, plan_path: Path, profile: dict[str, tuple[tuple[int, ...], ...]], *, fp16: bool
) -> None:
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelFileError(f"TensorRT cannot parse {onnx_path}: {errors}", fix="re-export the ONNX graphs")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    if fp16:
        config.set_flag(fp16_flag(trt))
    opt = builder.create_optimization_profile()
    for name, (low, best, high) in profile.items():
        opt.set_shape(name, low, best, high)
    config.add_optimization_profile(opt)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ModelFileError(
            f"TensorRT could not build a plan from {onnx_path}", fix="see the TensorRT log above"
        )
    partial = plan_path.with_name(plan_path.name + ".partial")
    partial.write_bytes(bytes(serialized))
    partial.replace(plan_path)


def _device_info() -> dict[str, Any]:
    import pycuda.driver as cuda
    import tensorrt as trt

    from engines.asr.tensorrt_backend import current_device

    cuda.init()
    return {"tensorrt": trt.__version__, **current_device(cuda)}


def build_whisper_tensorrt(ctx: BuildContext, model: str = "whisper-base") -> None:
    if not tensorrt_available():
        log.info("whisper tensorrt: TensorRT/pycuda not installed here; plans are built on the device")
        return
    config_art = ctx.manifest.get(config_artifact(model))
    if config_art is None:
        raise BackendUnavailable(f"no ONNX export of {model} in the bundle", fix="build the bundle first")
    config = WhisperConfig.read(ctx.out / config_art.path)
    profiles = dict(zip(("encoder", "decoder"), _profiles(config), strict=True))
    device = _device_info()
    plan_dir = ctx.out / plan_folder(model)
    plan_dir.mkdir(parents=True, exist_ok=True)
    for precision in PLAN_PRECISIONS:
        for part, profile in profiles.items():
            onnx = ctx.manifest.get(onnx_artifact(model, part, "fp32"))
            if onnx is None:
                raise BackendUnavailable(f"no fp32 ONNX {part} for {model}", fix="build the bundle first")
            source = {"from": onnx.name, "sha256": onnx.sha256}
            build = {
                "builder_version": PLAN_BUILDER_VERSION,
                "precision": precision,
                "max_batch": MAX_BATCH,
                **device,
            }
            name = plan_artifact(model, part, precision)
            if ctx.is_current(name, source=source, build=build):
                continue
            target = plan_dir / f"{part}-{precision}.plan"
            log.info("whisper tensorrt: building %s (minutes)", target.name)
            build_plan(ctx.out / onnx.path, target, profile, fp16=precision == "fp16")
            ctx.record(name, target, "tensorrt-plan", source=source, build=build)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m build_scripts.whisper.tensorrt", description=__doc__)
    parser.add_argument("--bundle", type=Path, required=True, help="the engine bundle folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = args.bundle.expanduser()
    try:
        if not tensorrt_available():
            raise BackendUnavailable(
                "TensorRT and pycuda are not installed", fix="run this on the Jetson (JetPack 6)"
            )
        build_whisper_tensorrt(BuildContext(out=out, manifest=Manifest.read(out)))
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
