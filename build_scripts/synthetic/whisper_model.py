"""A random-weight Whisper checkpoint of given dimensions, in the canonical layout the exporter reads."""

from __future__ import annotations

import numpy as np

from build_scripts.whisper.checkpoint import WhisperCheckpoint, WhisperDims, check_canonical


def _sinusoids(length: int, channels: int) -> np.ndarray:
    """Whisper's fixed encoder positions (a trained decoder's are learned; random ones would do too)."""
    increment = np.log(10000) / (channels // 2 - 1)
    inverse = np.exp(-increment * np.arange(channels // 2))
    scaled = np.arange(length)[:, None] * inverse[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def random_whisper(dims: WhisperDims, *, seed: int = 0) -> WhisperCheckpoint:
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}

    def linear(prefix: str, out_size: int, in_size: int) -> None:
        scale = 1.0 / np.sqrt(in_size)
        tensors[f"{prefix}/weight"] = (rng.standard_normal((out_size, in_size)) * scale).astype(np.float32)
        tensors[f"{prefix}/bias"] = (rng.standard_normal(out_size) * 0.02).astype(np.float32)

    def norm(prefix: str, size: int) -> None:
        tensors[f"{prefix}/gamma"] = np.ones(size, dtype=np.float32)
        tensors[f"{prefix}/beta"] = np.zeros(size, dtype=np.float32)

    def block(prefix: str, state: int, cross: bool) -> None:
        norm(f"{prefix}/self_attention/layer_norm", state)
        linear(f"{prefix}/self_attention/linear_0", 3 * state, state)
        linear(f"{prefix}/self_attention/linear_1", state, state)
        if cross:
            norm(f"{prefix}/attention/layer_norm", state)
            linear(f"{prefix}/attention/linear_0", state, state)
            linear(f"{prefix}/attention/linear_1", 2 * state, dims.n_audio_state)
            linear(f"{prefix}/attention/linear_2", state, state)
        norm(f"{prefix}/ffn/layer_norm", state)
        linear(f"{prefix}/ffn/linear_0", 4 * state, state)
        linear(f"{prefix}/ffn/linear_1", state, 4 * state)

    audio, text = dims.n_audio_state, dims.n_text_state
    tensors["encoder/conv1/weight"] = (rng.standard_normal((audio, dims.n_mels, 3)) * 0.1).astype(np.float32)
    tensors["encoder/conv1/bias"] = np.zeros(audio, dtype=np.float32)
    tensors["encoder/conv2/weight"] = (rng.standard_normal((audio, audio, 3)) / np.sqrt(3 * audio)).astype(
        np.float32
    )
    tensors["encoder/conv2/bias"] = np.zeros(audio, dtype=np.float32)
    tensors["encoder/position_encodings/encodings"] = _sinusoids(dims.n_audio_ctx, audio)
    for i in range(dims.n_audio_layer):
        block(f"encoder/layer_{i}", audio, cross=False)
    norm("encoder/layer_norm", audio)
    tensors["decoder/embeddings/weight"] = (rng.standard_normal((dims.n_vocab, text)) * 0.02).astype(
        np.float32
    )
    tensors["decoder/position_encodings/encodings"] = (
        rng.standard_normal((dims.n_text_ctx, text)) * 0.01
    ).astype(np.float32)
    for i in range(dims.n_text_layer):
        block(f"decoder/layer_{i}", text, cross=True)
    norm("decoder/layer_norm", text)
    checkpoint = WhisperCheckpoint(dims=dims, tensors=tensors, source_format="random")
    check_canonical(checkpoint)
    return checkpoint
