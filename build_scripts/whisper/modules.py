"""Thin torch modules over a canonical checkpoint, shaped for ONNX export.

Plain matmul/softmax attention (no fused kernels), positional embeddings sliced to the input length,
one [state, vocab] embedding matrix shared by the token lookup and the output projection, and the
decoder's K/V caches as separate per-layer tensors. The encoder also computes each decoder layer's
cross-attention K/V once per utterance; K is stored transposed ([batch, head, dim, frames]).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from build_scripts.whisper.checkpoint import WhisperCheckpoint


def _param(ckpt: WhisperCheckpoint, name: str) -> nn.Parameter:
    return nn.Parameter(torch.from_numpy(ckpt.tensor(name).copy()), requires_grad=False)


class _Linear(nn.Module):
    def __init__(self, ckpt: WhisperCheckpoint, prefix: str) -> None:
        super().__init__()
        self.weight = _param(ckpt, f"{prefix}/weight")
        self.bias = _param(ckpt, f"{prefix}/bias")

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class _LayerNorm(nn.Module):
    def __init__(self, ckpt: WhisperCheckpoint, prefix: str) -> None:
        super().__init__()
        self.gamma = _param(ckpt, f"{prefix}/gamma")
        self.beta = _param(ckpt, f"{prefix}/beta")
        self.size = int(self.gamma.shape[0])

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (self.size,), self.gamma, self.beta, 1e-5)


class _Ffn(nn.Module):
    def __init__(self, ckpt: WhisperCheckpoint, prefix: str) -> None:
        super().__init__()
        self.norm = _LayerNorm(ckpt, f"{prefix}/layer_norm")
        self.up = _Linear(ckpt, f"{prefix}/linear_0")
        self.down = _Linear(ckpt, f"{prefix}/linear_1")

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def _heads(x: Tensor, n_head: int) -> Tensor:
    """[batch, time, state] -> [batch, head, time, dim]"""
    batch, time, state = x.shape
    return x.reshape(batch, time, n_head, state // n_head).transpose(1, 2)


def _merge(x: Tensor) -> Tensor:
    """[batch, head, time, dim] -> [batch, time, state]"""
    batch, head, time, dim = x.shape
    return x.transpose(1, 2).reshape(batch, time, head * dim)


def _attend(q: Tensor, k_t: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """q [b,h,t,d], k_t [b,h,d,s] (already transposed), v [b,h,s,d]."""
    scores = torch.matmul(q, k_t) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class _EncoderLayer(nn.Module):
    def __init__(self, ckpt: WhisperCheckpoint, prefix: str, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.norm = _LayerNorm(ckpt, f"{prefix}/self_attention/layer_norm")
        self.qkv = _Linear(ckpt, f"{prefix}/self_attention/linear_0")
        self.out = _Linear(ckpt, f"{prefix}/self_attention/linear_1")
        self.ffn = _Ffn(ckpt, f"{prefix}/ffn")

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        h = self.n_head
        x = x + self.out(_merge(_attend(_heads(q, h), _heads(k, h).transpose(2, 3), _heads(v, h))))
        return self.ffn(x)


class WhisperEncoder(nn.Module):
    """mel [batch, n_mels, frames] -> cross_k_i [b,h,d,frames/2], cross_v_i [b,h,frames/2,d] per decoder layer."""

    def __init__(self, ckpt: WhisperCheckpoint) -> None:
        super().__init__()
        dims = ckpt.dims
        self.conv1_w = _param(ckpt, "encoder/conv1/weight")
        self.conv1_b = _param(ckpt, "encoder/conv1/bias")
        self.conv2_w = _param(ckpt, "encoder/conv2/weight")
        self.conv2_b = _param(ckpt, "encoder/conv2/bias")
        self.positions = _param(ckpt, "encoder/position_encodings/encodings")
        self.layers = nn.ModuleList(
            _EncoderLayer(ckpt, f"encoder/layer_{i}", dims.n_audio_head) for i in range(dims.n_audio_layer)
        )
        self.norm = _LayerNorm(ckpt, "encoder/layer_norm")
        self.n_text_head = dims.n_text_head
        self.cross_kv = nn.ModuleList(
            _Linear(ckpt, f"decoder/layer_{i}/attention/linear_1") for i in range(dims.n_text_layer)
        )

    def forward(self, mel: Tensor) -> tuple[Tensor, ...]:
        x = F.gelu(F.conv1d(mel, self.conv1_w, self.conv1_b, padding=1))
        x = F.gelu(F.conv1d(x, self.conv2_w, self.conv2_b, stride=2, padding=1)).transpose(1, 2)
        x = x + self.positions[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        outputs: list[Tensor] = []
        for proj in self.cross_kv:
            k, v = proj(x).chunk(2, dim=-1)
            outputs += [_heads(k, self.n_text_head).transpose(2, 3), _heads(v, self.n_text_head)]
        return tuple(outputs)


class _DecoderLayer(nn.Module):
    def __init__(self, ckpt: WhisperCheckpoint, prefix: str, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.self_norm = _LayerNorm(ckpt, f"{prefix}/self_attention/layer_norm")
        self.self_qkv = _Linear(ckpt, f"{prefix}/self_attention/linear_0")
        self.self_out = _Linear(ckpt, f"{prefix}/self_attention/linear_1")
        self.cross_norm = _LayerNorm(ckpt, f"{prefix}/attention/layer_norm")
        self.cross_q = _Linear(ckpt, f"{prefix}/attention/linear_0")
        self.cross_out = _Linear(ckpt, f"{prefix}/attention/linear_2")
        self.ffn = _Ffn(ckpt, f"{prefix}/ffn")

    def forward(
        self, x: Tensor, mask: Tensor, past_k: Tensor, past_v: Tensor, cross_k_t: Tensor, cross_v: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        h = self.n_head
        q, k, v = self.self_qkv(self.self_norm(x)).chunk(3, dim=-1)
        k_all = torch.cat([past_k, _heads(k, h)], dim=2)
        v_all = torch.cat([past_v, _heads(v, h)], dim=2)
        x = x + self.self_out(_merge(_attend(_heads(q, h), k_all.transpose(2, 3), v_all, mask)))
        q = _heads(self.cross_q(self.cross_norm(x)), h)
        x = x + self.cross_out(_merge(_attend(q, cross_k_t, cross_v)))
        return self.ffn(x), k_all, v_all


class WhisperDecoder(nn.Module):
    """One decoding step over new tokens with per-layer self-attention caches.

    Inputs: tokens [batch, new], then self_k_i/self_v_i [b,h,past,d] for each layer, then
    cross_k_i/cross_v_i from the encoder. Outputs: logits of the last position [batch, vocab] and the
    grown caches [b,h,past+new,d].
    """

    def __init__(self, ckpt: WhisperCheckpoint) -> None:
        super().__init__()
        dims = ckpt.dims
        self.n_layer = dims.n_text_layer
        # [state, vocab]: Gather along axis 1 for lookup, plain MatMul for the output projection.
        self.embedding_t = nn.Parameter(
            torch.from_numpy(ckpt.tensor("decoder/embeddings/weight").T.copy()), requires_grad=False
        )
        self.positions = _param(ckpt, "decoder/position_encodings/encodings")
        self.layers = nn.ModuleList(
            _DecoderLayer(ckpt, f"decoder/layer_{i}", dims.n_text_head) for i in range(dims.n_text_layer)
        )
        self.norm = _LayerNorm(ckpt, "decoder/layer_norm")

    def forward(self, tokens: Tensor, *caches: Tensor) -> tuple[Tensor, ...]:
        n = self.n_layer
        self_kv, cross_kv = caches[: 2 * n], caches[2 * n :]
        batch, new = tokens.shape
        past = self_kv[0].shape[2]
        embedded = self.embedding_t.index_select(1, tokens.reshape(-1)).transpose(0, 1)
        x = embedded.reshape(batch, new, -1) + self.positions[past : past + new]
        query_pos = torch.arange(new, device=tokens.device).unsqueeze(1) + past
        key_pos = torch.arange(past + new, device=tokens.device).unsqueeze(0)
        zero = torch.zeros((), dtype=x.dtype)
        mask = torch.where(key_pos > query_pos, torch.full((), float("-inf"), dtype=x.dtype), zero)
        grown: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            x, k_all, v_all = layer(
                x, mask, self_kv[2 * i], self_kv[2 * i + 1], cross_kv[2 * i], cross_kv[2 * i + 1]
            )
            grown += [k_all, v_all]
        last = self.norm(x[:, -1, :])
        logits = torch.matmul(last, self.embedding_t).float()
        return (logits, *grown)
