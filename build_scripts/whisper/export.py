"""Export a canonical Whisper checkpoint to ONNX: an encoder and a KV-cache decoder per precision.

fp32 is the reference; fp16 halves the graphs for GPUs (TensorRT builds its fp16 plans from fp32 or
fp16 ONNX); int8 is ONNX Runtime's dynamic quantization of the MatMul weights, for CPUs.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_scripts.whisper.checkpoint import WhisperCheckpoint
from engines.asr.config import PRECISIONS, WhisperConfig, special_tokens_from_tokenizer
from engines.errors import BackendUnavailable

log = logging.getLogger(__name__)

EXPORTER_VERSION = 2
OPSET = 17


@dataclass(frozen=True)
class ExportedGraphs:
    config: Path
    tokenizer: Path
    graphs: dict[str, Path]  # "encoder-fp32" -> path


def encoder_io(n_layer: int) -> tuple[list[str], list[str]]:
    outputs = [f"cross_{kind}_{i}" for i in range(n_layer) for kind in ("k", "v")]
    return ["mel"], outputs


def decoder_io(n_layer: int) -> tuple[list[str], list[str]]:
    self_kv = [f"self_{kind}_{i}" for i in range(n_layer) for kind in ("k", "v")]
    cross = [f"cross_{kind}_{i}" for i in range(n_layer) for kind in ("k", "v")]
    return ["tokens", *self_kv, *cross], ["logits", *(f"new_{name}" for name in self_kv)]


def _torch_export(
    module: Any,
    args: tuple[Any, ...],
    path: Path,
    names: tuple[list[str], list[str]],
    dynamic_axes: dict[str, dict[int, str]],
) -> None:
    import torch

    inputs, outputs = names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-derived Python values
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


def _export_precision(ckpt: WhisperCheckpoint, out_dir: Path, precision: str) -> dict[str, Path]:
    import torch

    from build_scripts.whisper.modules import WhisperDecoder, WhisperEncoder

    dims = ckpt.dims
    dtype = torch.float16 if precision == "fp16" else torch.float32
    n, h = dims.n_text_layer, dims.n_text_head
    d = dims.n_text_state // h
    # Tracing runs the graph once; a short dummy keeps that cheap (all lengths are dynamic axes).
    frames = min(2 * dims.n_audio_ctx, 200)
    encoder = WhisperEncoder(ckpt).to(dtype).eval()
    decoder = WhisperDecoder(ckpt).to(dtype).eval()
    mel = torch.zeros(1, dims.n_mels, frames, dtype=dtype)
    enc_names = encoder_io(n)
    enc_axes: dict[str, dict[int, str]] = {"mel": {0: "batch", 2: "frames"}}
    for i, name in enumerate(enc_names[1]):
        enc_axes[name] = {0: "batch", 3 if i % 2 == 0 else 2: "audio_ctx"}
    enc_path = out_dir / f"encoder-{precision}.onnx"
    with torch.no_grad():
        cross = encoder(mel)
        _torch_export(encoder, (mel,), enc_path, enc_names, enc_axes)
        tokens = torch.tensor([[1, 2, 3]], dtype=torch.int64)
        past = 2
        self_kv = [torch.zeros(1, h, past, d, dtype=dtype) for _ in range(2 * n)]
        dec_names = decoder_io(n)
        dec_axes: dict[str, dict[int, str]] = {"tokens": {0: "batch", 1: "new"}, "logits": {0: "batch"}}
        for name in dec_names[0][1 : 1 + 2 * n]:
            dec_axes[name] = {0: "batch", 2: "past"}
            dec_axes[f"new_{name}"] = {0: "batch", 2: "total"}
        for i, name in enumerate(dec_names[0][1 + 2 * n :]):
            dec_axes[name] = {0: "batch", 3 if i % 2 == 0 else 2: "audio_ctx"}
        dec_path = out_dir / f"decoder-{precision}.onnx"
        _torch_export(decoder, (tokens, *self_kv, *cross), dec_path, dec_names, dec_axes)
    return {f"encoder-{precision}": enc_path, f"decoder-{precision}": dec_path}


# 7-bit weights (reduce_range): uint8 x int8 products summed in pairs stay inside 16 bits, so the
# kernels without VNNI (vpmaddubsw saturates) compute the same integers as those with it, and the
# shipped int8 graphs transcribe alike on every x86-64 processor. Per-channel scales win back what
# 7 bits lose: WER 14.4% vs 16.8% per tensor (fp32: 13.9%), at the same speed (bench/asr_int8.py).
INT8_PER_CHANNEL = True
INT8_REDUCE_RANGE = True


def quantize_int8(
    fp32: dict[str, Path],
    out_dir: Path,
    *,
    per_channel: bool = INT8_PER_CHANNEL,
    reduce_range: bool = INT8_REDUCE_RANGE,
) -> dict[str, Path]:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as err:
        raise BackendUnavailable(
            "onnxruntime is needed for the int8 export", fix='pip install -e ".[cpu]"'
        ) from err
    result: dict[str, Path] = {}
    for part in ("encoder", "decoder"):
        target = out_dir / f"{part}-int8.onnx"
        quantize_dynamic(
            fp32[f"{part}-fp32"],
            target,
            op_types_to_quantize=["MatMul"],
            per_channel=per_channel,
            reduce_range=reduce_range,
            weight_type=QuantType.QInt8,
        )
        result[f"{part}-int8"] = target
    _share_quantized_embedding(result["decoder-int8"])
    return result


def _share_quantized_embedding(path: Path, name: str = "embedding_t") -> None:
    """Let the token lookup read the int8 copy of the embedding that the output projection uses.

    Quantization leaves the float32 [state, vocab] matrix for the Gather (100 MB for Whisper base)
    next to its int8 copy; gathering int8 rows and dequantizing them makes the float copy unused.
    """
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    if f"{name}_quantized" not in initializers or name not in initializers:
        return
    per_column = len(initializers[f"{name}_scale"].dims) > 0  # per-channel: one scale per token
    for index, node in enumerate(graph.node):
        if node.op_type == "Gather" and node.input[0] == name:
            gathered, token_ids = node.output[0], node.input[1]
            node.input[0] = f"{name}_quantized"
            node.output[0] = f"{gathered}_int8"
            scale, zero_point = f"{name}_scale", f"{name}_zero_point"
            added = []
            if per_column:  # the tokens' own scales and zero points, gathered like their columns
                for part in ("scale", "zero_point"):
                    added.append(
                        helper.make_node(
                            "Gather",
                            [f"{name}_{part}", token_ids],
                            [f"{gathered}_{part}"],
                            name=f"{node.name}_{part}",
                            axis=0,
                        )
                    )
                scale, zero_point = f"{gathered}_scale", f"{gathered}_zero_point"
            dequantize = helper.make_node(
                "DequantizeLinear",
                [node.output[0], scale, zero_point],
                [gathered],
                name=f"{node.name}_dequantize",
            )
            if per_column:
                dequantize.attribute.append(helper.make_attribute("axis", 1))
            added.append(dequantize)
            for offset, extra in enumerate(added, start=1):
                graph.node.insert(index + offset, extra)
            break
    if not any(name in node.input for node in graph.node):
        graph.initializer.remove(initializers[name])
    onnx.save(model, str(path))


def export_onnx(
    ckpt: WhisperCheckpoint,
    tokenizer_json: Path,
    out_dir: Path,
    *,
    precisions: Sequence[str] = PRECISIONS,
) -> ExportedGraphs:
    """Write ``{encoder,decoder}-{precision}.onnx``, ``config.json`` and ``tokenizer.json`` into ``out_dir``."""
    unknown = sorted(set(precisions) - set(PRECISIONS))
    if unknown:
        raise ValueError(f"unknown precision(s) {unknown}; allowed: {', '.join(PRECISIONS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_text = tokenizer_json.read_text(encoding="utf-8")
    graphs: dict[str, Path] = {}
    started = time.monotonic()
    for precision in ("fp32", "fp16"):
        if precision in precisions or (precision == "fp32" and "int8" in precisions):
            graphs.update(_export_precision(ckpt, out_dir, precision))
            log.info("whisper: %s graphs exported (%.0f s)", precision, time.monotonic() - started)
    if "int8" in precisions:
        graphs.update(quantize_int8(graphs, out_dir))
        log.info("whisper: int8 graphs quantized (%.0f s)", time.monotonic() - started)
    if "fp32" not in precisions:
        for part in ("encoder", "decoder"):
            graphs.pop(f"{part}-fp32").unlink()
    tokenizer_path = out_dir / "tokenizer.json"
    tokenizer_path.write_text(tokenizer_text, encoding="utf-8")
    config = WhisperConfig(
        dims=ckpt.dims.to_dict(),
        special=special_tokens_from_tokenizer(json.loads(tokenizer_text)),
        suppress_ids=tuple(int(t) for t in ckpt.tokens.suppress_ids),
        suppress_ids_begin=tuple(int(t) for t in ckpt.tokens.suppress_ids_begin),
        precisions=tuple(p for p in PRECISIONS if p in precisions),
        exporter_version=EXPORTER_VERSION,
        source_format=ckpt.source_format,
    )
    config_path = config.write(out_dir / "config.json")
    return ExportedGraphs(config=config_path, tokenizer=tokenizer_path, graphs=graphs)
