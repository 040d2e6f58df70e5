"""Where a Whisper model's files are named in the bundle: one place for the exporter, the TensorRT
build, the engine factory and the settings check."""

from __future__ import annotations

from collections.abc import Iterable

PARTS = ("encoder", "decoder")


def config_artifact(model: str) -> str:
    return f"asr/{model}/onnx/config"


def tokenizer_artifact(model: str) -> str:
    return f"asr/{model}/onnx/tokenizer"


def onnx_artifact(model: str, part: str, precision: str) -> str:
    return f"asr/{model}/onnx/{part}-{precision}"


def plan_artifact(model: str, part: str, precision: str) -> str:
    return f"asr/{model}/tensorrt/{part}-{precision}"


def onnx_folder(model: str) -> str:
    """The exported graphs' folder inside the bundle."""
    return f"asr/{model}-onnx"


def plan_folder(model: str) -> str:
    return f"asr/{model}-tensorrt"


def whisper_models(artifact_names: Iterable[str]) -> list[str]:
    """The Whisper models a bundle holds (those with an exported ONNX config)."""
    return sorted(
        n.split("/")[1] for n in artifact_names if n.startswith("asr/") and n.endswith("/onnx/config")
    )
