"""The canonical form of a Whisper checkpoint, whatever format it was read from.

Tensor names follow CTranslate2's layout (fused self-attention Q/K/V, fused cross-attention K/V),
because that is the most compact one and the other formats map onto it by concatenation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from engines.errors import ModelFileError


@dataclass(frozen=True)
class WhisperDims:
    n_mels: int
    n_audio_ctx: int  # encoder positions (1500 for 30 s)
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int  # decoder positions (448)
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class TokenConfig:
    """Generation settings that travel with the weights (suppressed tokens, languages)."""

    suppress_ids: tuple[int, ...] = ()
    suppress_ids_begin: tuple[int, ...] = ()
    lang_ids: tuple[int, ...] = ()


@dataclass
class WhisperCheckpoint:
    dims: WhisperDims
    tensors: dict[str, np.ndarray]  # float32, canonical names
    tokens: TokenConfig = field(default_factory=TokenConfig)
    source_format: str = ""

    def tensor(self, name: str) -> np.ndarray:
        try:
            return self.tensors[name]
        except KeyError as err:
            raise ModelFileError(
                f"Whisper checkpoint ({self.source_format}) lacks the tensor {name!r}",
                fix="check the checkpoint is a complete Whisper model",
            ) from err

    def describe(self) -> dict[str, Any]:
        return {"format": self.source_format, **self.dims.to_dict()}


def fuse(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=0)


def zero_bias(size: int) -> np.ndarray:
    return np.zeros(size, dtype=np.float32)


def check_canonical(ckpt: WhisperCheckpoint) -> None:
    """Every tensor the exporter needs is present with the expected shape."""
    d = ckpt.dims
    expected: dict[str, tuple[int, ...]] = {
        "encoder/conv1/weight": (d.n_audio_state, d.n_mels, 3),
        "encoder/conv2/weight": (d.n_audio_state, d.n_audio_state, 3),
        "encoder/position_encodings/encodings": (d.n_audio_ctx, d.n_audio_state),
        "decoder/embeddings/weight": (d.n_vocab, d.n_text_state),
        "decoder/position_encodings/encodings": (d.n_text_ctx, d.n_text_state),
    }
    for i in range(d.n_audio_layer):
        expected[f"encoder/layer_{i}/self_attention/linear_0/weight"] = (3 * d.n_audio_state, d.n_audio_state)
    for i in range(d.n_text_layer):
        expected[f"decoder/layer_{i}/self_attention/linear_0/weight"] = (3 * d.n_text_state, d.n_text_state)
        expected[f"decoder/layer_{i}/attention/linear_1/weight"] = (2 * d.n_text_state, d.n_text_state)
    for name, shape in expected.items():
        actual = tuple(ckpt.tensor(name).shape)
        if actual != shape:
            raise ModelFileError(
                f"Whisper checkpoint ({ckpt.source_format}): {name} has shape {actual}, expected {shape}",
                fix="the file is not a Whisper model of the dimensions its config states",
            )
