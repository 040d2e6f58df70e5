"""Read a Hugging Face transformers Whisper folder (``save_pretrained``: config.json + safetensors or .bin).

distil-whisper checkpoints are this format (fewer decoder layers, same tensors).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from build_scripts.whisper.checkpoint import (
    TokenConfig,
    WhisperCheckpoint,
    WhisperDims,
    check_canonical,
    fuse,
    zero_bias,
)
from engines.errors import ModelFileError


def _read_state(folder: Path) -> dict[str, np.ndarray]:
    safetensors = sorted(folder.glob("model*.safetensors"))
    if safetensors:
        from safetensors.numpy import load_file

        state: dict[str, np.ndarray] = {}
        for path in safetensors:
            state.update(load_file(str(path)))
        return state
    binary = folder / "pytorch_model.bin"
    if binary.is_file():
        import torch

        loaded = torch.load(binary, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in loaded.items()}
    raise ModelFileError(
        f"{folder} has no model.safetensors or pytorch_model.bin",
        fix="point to a folder written by transformers' save_pretrained",
    )


def _map_attention(src: dict[str, np.ndarray], into: dict[str, np.ndarray], hf: str, ours: str) -> None:
    """Self-attention: fused Q/K/V (K has no bias in Whisper) and the output projection."""
    q, k, v, o = (f"{hf}.{p}_proj" for p in ("q", "k", "v", "out"))
    into[f"{ours}/linear_0/weight"] = fuse(src[f"{q}.weight"], src[f"{k}.weight"], src[f"{v}.weight"])
    size = src[f"{q}.weight"].shape[0]
    into[f"{ours}/linear_0/bias"] = fuse(src[f"{q}.bias"], zero_bias(size), src[f"{v}.bias"])
    into[f"{ours}/linear_1/weight"] = src[f"{o}.weight"]
    into[f"{ours}/linear_1/bias"] = src[f"{o}.bias"]


def _norm(src: dict[str, np.ndarray], into: dict[str, np.ndarray], hf: str, ours: str) -> None:
    into[f"{ours}/gamma"] = src[f"{hf}.weight"]
    into[f"{ours}/beta"] = src[f"{hf}.bias"]


def _linear(src: dict[str, np.ndarray], into: dict[str, np.ndarray], hf: str, ours: str) -> None:
    into[f"{ours}/weight"] = src[f"{hf}.weight"]
    into[f"{ours}/bias"] = src[f"{hf}.bias"]


def _canonical(src: dict[str, np.ndarray], dims: WhisperDims) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    e, d = "model.encoder", "model.decoder"
    for conv in ("conv1", "conv2"):
        _linear(src, out, f"{e}.{conv}", f"encoder/{conv}")
    out["encoder/position_encodings/encodings"] = src[f"{e}.embed_positions.weight"]
    _norm(src, out, f"{e}.layer_norm", "encoder/layer_norm")
    for i in range(dims.n_audio_layer):
        hf, ours = f"{e}.layers.{i}", f"encoder/layer_{i}"
        _map_attention(src, out, f"{hf}.self_attn", f"{ours}/self_attention")
        _norm(src, out, f"{hf}.self_attn_layer_norm", f"{ours}/self_attention/layer_norm")
        _norm(src, out, f"{hf}.final_layer_norm", f"{ours}/ffn/layer_norm")
        _linear(src, out, f"{hf}.fc1", f"{ours}/ffn/linear_0")
        _linear(src, out, f"{hf}.fc2", f"{ours}/ffn/linear_1")
    out["decoder/embeddings/weight"] = src[f"{d}.embed_tokens.weight"]
    out["decoder/position_encodings/encodings"] = src[f"{d}.embed_positions.weight"]
    _norm(src, out, f"{d}.layer_norm", "decoder/layer_norm")
    for i in range(dims.n_text_layer):
        hf, ours = f"{d}.layers.{i}", f"decoder/layer_{i}"
        _map_attention(src, out, f"{hf}.self_attn", f"{ours}/self_attention")
        _norm(src, out, f"{hf}.self_attn_layer_norm", f"{ours}/self_attention/layer_norm")
        cross = f"{hf}.encoder_attn"
        _linear(src, out, f"{cross}.q_proj", f"{ours}/attention/linear_0")
        size = src[f"{cross}.k_proj.weight"].shape[0]
        out[f"{ours}/attention/linear_1/weight"] = fuse(
            src[f"{cross}.k_proj.weight"], src[f"{cross}.v_proj.weight"]
        )
        out[f"{ours}/attention/linear_1/bias"] = fuse(zero_bias(size), src[f"{cross}.v_proj.bias"])
        _linear(src, out, f"{cross}.out_proj", f"{ours}/attention/linear_2")
        _norm(src, out, f"{hf}.encoder_attn_layer_norm", f"{ours}/attention/layer_norm")
        _norm(src, out, f"{hf}.final_layer_norm", f"{ours}/ffn/layer_norm")
        _linear(src, out, f"{hf}.fc1", f"{ours}/ffn/linear_0")
        _linear(src, out, f"{hf}.fc2", f"{ours}/ffn/linear_1")
    return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}


def _token_config(folder: Path) -> TokenConfig:
    path = folder / "generation_config.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return TokenConfig(
        suppress_ids=tuple(data.get("suppress_tokens") or ()),
        suppress_ids_begin=tuple(data.get("begin_suppress_tokens") or ()),
        lang_ids=tuple(sorted((data.get("lang_to_id") or {}).values())),
    )


def load_hf_folder(folder: Path) -> WhisperCheckpoint:
    config_path = folder / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        dims = WhisperDims(
            n_mels=int(config["num_mel_bins"]),
            n_audio_ctx=int(config["max_source_positions"]),
            n_audio_state=int(config["d_model"]),
            n_audio_head=int(config["encoder_attention_heads"]),
            n_audio_layer=int(config["encoder_layers"]),
            n_vocab=int(config["vocab_size"]),
            n_text_ctx=int(config["max_target_positions"]),
            n_text_state=int(config["d_model"]),
            n_text_head=int(config["decoder_attention_heads"]),
            n_text_layer=int(config["decoder_layers"]),
        )
    except (OSError, ValueError, KeyError) as err:
        raise ModelFileError(
            f"{config_path} is not a transformers Whisper config ({err})",
            fix="point to a folder written by WhisperForConditionalGeneration.save_pretrained",
        ) from err
    state = _read_state(folder)
    try:
        tensors = _canonical(state, dims)
    except KeyError as err:
        raise ModelFileError(
            f"{folder}: the weights lack {err}", fix="check the checkpoint is complete"
        ) from err
    ckpt = WhisperCheckpoint(
        dims=dims, tensors=tensors, tokens=_token_config(folder), source_format="transformers"
    )
    check_canonical(ckpt)
    return ckpt
