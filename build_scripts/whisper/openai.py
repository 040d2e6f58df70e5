"""Read an OpenAI Whisper ``.pt`` checkpoint (``{"dims": ..., "model_state_dict": ...}``)."""

from __future__ import annotations

from pathlib import Path

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

# GPT-2 space and end-of-text: never the first token of a transcript (as openai-whisper's suppress_blank).
DEFAULT_TOKENS = TokenConfig(suppress_ids_begin=(220, 50257))


def _pair(
    src: dict[str, np.ndarray], into: dict[str, np.ndarray], theirs: str, ours: str, names: tuple[str, str]
) -> None:
    into[f"{ours}/{names[0]}"] = src[f"{theirs}.weight"]
    into[f"{ours}/{names[1]}"] = src[f"{theirs}.bias"]


def _linear(src: dict[str, np.ndarray], into: dict[str, np.ndarray], theirs: str, ours: str) -> None:
    _pair(src, into, theirs, ours, ("weight", "bias"))


def _norm(src: dict[str, np.ndarray], into: dict[str, np.ndarray], theirs: str, ours: str) -> None:
    _pair(src, into, theirs, ours, ("gamma", "beta"))


def _self_attention(src: dict[str, np.ndarray], into: dict[str, np.ndarray], attn: str, ours: str) -> None:
    size = src[f"{attn}.query.weight"].shape[0]
    into[f"{ours}/linear_0/weight"] = fuse(*(src[f"{attn}.{p}.weight"] for p in ("query", "key", "value")))
    into[f"{ours}/linear_0/bias"] = fuse(
        src[f"{attn}.query.bias"], zero_bias(size), src[f"{attn}.value.bias"]
    )
    _linear(src, into, f"{attn}.out", f"{ours}/linear_1")


def _block(
    src: dict[str, np.ndarray], into: dict[str, np.ndarray], theirs: str, ours: str, cross: bool
) -> None:
    _self_attention(src, into, f"{theirs}.attn", f"{ours}/self_attention")
    _norm(src, into, f"{theirs}.attn_ln", f"{ours}/self_attention/layer_norm")
    if cross:
        c = f"{theirs}.cross_attn"
        size = src[f"{c}.key.weight"].shape[0]
        _linear(src, into, f"{c}.query", f"{ours}/attention/linear_0")
        into[f"{ours}/attention/linear_1/weight"] = fuse(src[f"{c}.key.weight"], src[f"{c}.value.weight"])
        into[f"{ours}/attention/linear_1/bias"] = fuse(zero_bias(size), src[f"{c}.value.bias"])
        _linear(src, into, f"{c}.out", f"{ours}/attention/linear_2")
        _norm(src, into, f"{theirs}.cross_attn_ln", f"{ours}/attention/layer_norm")
    _norm(src, into, f"{theirs}.mlp_ln", f"{ours}/ffn/layer_norm")
    _linear(src, into, f"{theirs}.mlp.0", f"{ours}/ffn/linear_0")
    _linear(src, into, f"{theirs}.mlp.2", f"{ours}/ffn/linear_1")


def load_openai_checkpoint(path: Path, tokens: TokenConfig = DEFAULT_TOKENS) -> WhisperCheckpoint:
    import torch

    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        dims = WhisperDims(**{k: int(v) for k, v in loaded["dims"].items()})
        state = {k: v.float().numpy() for k, v in loaded["model_state_dict"].items()}
    except FileNotFoundError as err:
        raise ModelFileError(f"{path} does not exist", fix="point to an OpenAI Whisper .pt file") from err
    except (RuntimeError, KeyError, TypeError, ValueError) as err:
        raise ModelFileError(
            f"{path} is not an OpenAI Whisper checkpoint ({type(err).__name__}: {err})",
            fix="point to a .pt file saved as {'dims': ..., 'model_state_dict': ...}",
        ) from err
    out: dict[str, np.ndarray] = {}
    try:
        _linear(state, out, "encoder.conv1", "encoder/conv1")
        _linear(state, out, "encoder.conv2", "encoder/conv2")
        out["encoder/position_encodings/encodings"] = state["encoder.positional_embedding"]
        _norm(state, out, "encoder.ln_post", "encoder/layer_norm")
        for i in range(dims.n_audio_layer):
            _block(state, out, f"encoder.blocks.{i}", f"encoder/layer_{i}", cross=False)
        out["decoder/embeddings/weight"] = state["decoder.token_embedding.weight"]
        out["decoder/position_encodings/encodings"] = state["decoder.positional_embedding"]
        _norm(state, out, "decoder.ln", "decoder/layer_norm")
        for i in range(dims.n_text_layer):
            _block(state, out, f"decoder.blocks.{i}", f"decoder/layer_{i}", cross=True)
    except KeyError as err:
        raise ModelFileError(
            f"{path}: the weights lack {err}", fix="check the checkpoint is complete"
        ) from err
    tensors = {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}
    ckpt = WhisperCheckpoint(dims=dims, tensors=tensors, tokens=tokens, source_format="openai")
    check_canonical(ckpt)
    return ckpt
