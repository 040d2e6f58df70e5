"""Choosing the backend and the bundle's files for a Whisper engine, without importing runtimes."""

from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path
from typing import Any

from engines.asr.artifacts import (
    config_artifact,
    onnx_artifact,
    plan_artifact,
    tokenizer_artifact,
    whisper_models,
)
from engines.asr.config import PRECISIONS
from engines.asr.params import AsrParams
from engines.asr.runner import BACKENDS, DEVICES, GraphRunner
from engines.asr.whisper import EncodePolicy, WhisperEngine, WhisperFiles
from engines.bundle import Bundle
from engines.errors import BackendUnavailable

# Real-length encoding: the audio plus 5 s of silence, and a full-window retry on degenerate text
# (token limit, repetition). On the test recordings this scored better than 10 s of padding or a fixed
# minimum length (int8 WER 14.8% vs 15.8% and 15.3-17.7%; bench/asr.py has the latency figures).
REAL_LENGTH_POLICY = EncodePolicy(real_length=True, pad_s=5.0, fallback=True)
FULL_WINDOW_POLICY = EncodePolicy(real_length=False)


def _check_choice(what: str, value: str, allowed: tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise BackendUnavailable(
            f"unknown ASR {what} {value!r}", fix=f"set {key} to one of: {', '.join(allowed)}"
        )


def _onnxruntime_runner(path: Path, *, device: str, threads: int) -> GraphRunner:
    from engines.asr.onnxruntime_backend import OrtGraphRunner

    return OrtGraphRunner(path, device=device, threads=threads)


def _tensorrt_runner(path: Path, *, expected: dict[str, Any]) -> GraphRunner:
    from engines.asr.tensorrt_backend import TensorRtGraphRunner

    return TensorRtGraphRunner(path, expected=expected)


def create_whisper(bundle: Bundle, params: AsrParams) -> WhisperEngine:
    backend, device, precision, model = params.backend, params.device, params.precision, params.model
    language, threads = params.language, params.threads
    encode_real_length = params.encode_real_length
    _check_choice("backend", backend, BACKENDS, "asr.backend")
    _check_choice("device", device, DEVICES, "asr.device")
    _check_choice("precision", precision, PRECISIONS, "asr.precision")
    if bundle.manifest.get(config_artifact(model)) is None:
        known = whisper_models(bundle.manifest.artifacts)
        raise BackendUnavailable(
            f"the bundle has no Whisper model {model!r} (has: {', '.join(known) or 'none'})",
            fix="set asr.model to one of those, or add it: python -m build_scripts.whisper export "
            f"CHECKPOINT --model {model} --bundle {bundle.root}",
        )
    if threads < 1:
        raise BackendUnavailable(f"asr.threads must be at least 1 (got {threads})", fix="set asr.threads = 2")
    policy = REAL_LENGTH_POLICY if encode_real_length else FULL_WINDOW_POLICY
    if backend == "tensorrt":
        missing = [name for name in ("tensorrt", "pycuda") if importlib.util.find_spec(name) is None]
        if missing:
            raise BackendUnavailable(
                f"ASR backend 'tensorrt' needs {' and '.join(missing)}, which this machine lacks",
                fix='on a Jetson install them with JetPack and pip install -e ".[jetson]"; '
                'elsewhere set asr.backend = "onnxruntime"',
            )
        if device != "cuda":
            raise BackendUnavailable(
                "ASR backend 'tensorrt' runs on the GPU only",
                fix='set asr.device = "cuda" or asr.backend = "onnxruntime"',
            )
        if precision == "int8":
            raise BackendUnavailable(
                "the TensorRT Whisper plans are built in fp16 or fp32, not int8",
                fix='set asr.precision = "fp16"',
            )
        files = WhisperFiles(
            config=bundle.path(config_artifact(model)),
            tokenizer=bundle.path(tokenizer_artifact(model)),
            encoder=bundle.path(plan_artifact(model, "encoder", precision)),
            decoder=bundle.path(plan_artifact(model, "decoder", precision)),
        )
        plan = bundle.manifest.get(plan_artifact(model, "encoder", precision))
        built_for = plan.build if plan else {}
        expected: dict[str, Any] = {
            k: built_for[k] for k in ("tensorrt", "gpu", "compute_capability") if k in built_for
        }
        runner = partial(_tensorrt_runner, expected=expected)
        return WhisperEngine(files, runner, language=language, policy=policy, vocabulary=params.vocabulary)
    files = WhisperFiles(
        config=bundle.path(config_artifact(model)),
        tokenizer=bundle.path(tokenizer_artifact(model)),
        encoder=bundle.path(onnx_artifact(model, "encoder", precision)),
        decoder=bundle.path(onnx_artifact(model, "decoder", precision)),
    )
    factory = partial(_onnxruntime_runner, device=device, threads=threads)
    return WhisperEngine(files, factory, language=language, policy=policy, vocabulary=params.vocabulary)
