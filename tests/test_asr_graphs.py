"""The exported ONNX graphs: KV-cache decoding equals full re-decoding; fp16 and int8 stay close to fp32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from engines.asr.config import WhisperConfig
from engines.asr.decoding import GreedyDecoder
from engines.asr.features import CHUNK_FRAMES, log_mel, pad_frames
from engines.asr.onnxruntime_backend import OrtGraphRunner
from engines.audio import load_audio_16k
from engines.bundle import Bundle

PROMPT = [50258, 50259, 50359, 50363]  # start, English, transcribe, no timestamps


@pytest.fixture(scope="module")
def config(bundle: Bundle) -> WhisperConfig:
    return WhisperConfig.read(bundle.path("asr/whisper-base/onnx/config"))


@pytest.fixture(scope="module")
def fp32(bundle: Bundle) -> tuple[OrtGraphRunner, OrtGraphRunner]:
    return (
        OrtGraphRunner(bundle.path("asr/whisper-base/onnx/encoder-fp32")),
        OrtGraphRunner(bundle.path("asr/whisper-base/onnx/decoder-fp32")),
    )


@pytest.fixture(scope="module")
def short_mel(data_dir: Path) -> np.ndarray:
    audio = load_audio_16k(data_dir / "speech/en/speechbrain_spk2_snt2.wav")
    return pad_frames(log_mel(audio), 400)[None]  # 4 s: real-length encoding keeps this test quick


def test_config_names_the_special_tokens(config: WhisperConfig) -> None:
    assert config.special["sot"] == PROMPT[0]
    assert config.languages["en"] == PROMPT[1]
    assert config.special["transcribe"] == PROMPT[2]
    assert config.special["no_timestamps"] == PROMPT[3]
    assert config.special["eot"] == 50257
    assert len(config.languages) == 99
    assert 220 in config.suppress_ids_begin


def test_cached_decoding_equals_decoding_the_whole_sequence(
    config: WhisperConfig, fp32: tuple[OrtGraphRunner, OrtGraphRunner], short_mel: np.ndarray
) -> None:
    encoder, decoder = fp32
    cross = encoder.run({"mel": short_mel})
    assert cross["cross_k_0"].shape == (1, 8, 64, 200)  # [batch, head, dim, frames / 2]
    assert cross["cross_v_0"].shape == (1, 8, 200, 64)
    greedy = GreedyDecoder(config, decoder)
    decoded = greedy.decode(cross, PROMPT, max_new_tokens=12)
    assert len(decoded.tokens) >= 4
    # Step by step through the cache, then all tokens at once from an empty cache: same last logits.
    caches = greedy.empty_cache()
    step = np.asarray([PROMPT], dtype=np.int64)
    for token in decoded.tokens:
        out = decoder.run({"tokens": step, **caches, **cross})
        caches = {name: out[f"new_{name}"] for name in caches}
        step = np.asarray([[token]], dtype=np.int64)
    cached = decoder.run({"tokens": step, **caches, **cross})["logits"]
    whole = decoder.run(
        {"tokens": np.asarray([[*PROMPT, *decoded.tokens]], dtype=np.int64), **greedy.empty_cache(), **cross}
    )
    np.testing.assert_allclose(cached, whole["logits"], atol=2e-3)
    assert whole["new_self_k_0"].shape == (1, 8, len(PROMPT) + len(decoded.tokens), 64)


def test_fp16_graphs_agree_with_fp32(
    bundle: Bundle, config: WhisperConfig, fp32: tuple[OrtGraphRunner, OrtGraphRunner], short_mel: np.ndarray
) -> None:
    enc16 = OrtGraphRunner(bundle.path("asr/whisper-base/onnx/encoder-fp16"))
    dec16 = OrtGraphRunner(bundle.path("asr/whisper-base/onnx/decoder-fp16"))
    assert enc16.input_dtype("mel") == np.float16
    cross32 = fp32[0].run({"mel": short_mel})
    cross16 = enc16.run({"mel": short_mel.astype(np.float16)})
    assert cross16["cross_v_5"].dtype == np.float16
    np.testing.assert_allclose(
        cross16["cross_v_5"].astype(np.float32), cross32["cross_v_5"], atol=0.05, rtol=0.02
    )
    tokens32 = GreedyDecoder(config, fp32[1]).decode(cross32, PROMPT, 12).tokens
    tokens16 = GreedyDecoder(config, dec16).decode(cross16, PROMPT, 12).tokens
    assert tokens16 == tokens32


def test_int8_graphs_quantize_the_matmuls(bundle: Bundle) -> None:
    int8 = onnx.load(str(bundle.path("asr/whisper-base/onnx/encoder-int8")), load_external_data=False)
    ops = {node.op_type for node in int8.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    fp32_size = bundle.manifest.artifacts["asr/whisper-base/onnx/encoder-fp32"].size_bytes
    int8_size = bundle.manifest.artifacts["asr/whisper-base/onnx/encoder-int8"].size_bytes
    assert int8_size < 0.4 * fp32_size


def test_encoder_accepts_any_even_length(fp32: tuple[OrtGraphRunner, OrtGraphRunner], data_dir: Path) -> None:
    mel = log_mel(load_audio_16k(data_dir / "speech/en/pocketsphinx_cards_001.wav"))
    for frames in (100, 1000, CHUNK_FRAMES):
        cross = fp32[0].run({"mel": pad_frames(mel, frames)[None]})
        assert cross["cross_v_0"].shape[2] == frames // 2


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_int8_weights_are_7_bit_so_every_processor_computes_the_same_integers(
    bundle: Bundle, part: str
) -> None:
    """ONNX Runtime multiplies uint8 activations by int8 weights. Without VNNI the x86 kernel sums
    pairs of products in 16 bits with saturation (vpmaddubsw); 255 * 64 * 2 = 32640 fits, 255 * 127 * 2
    does not. With every weight within +-64 the integer result is exact on AVX2, AVX-512 and VNNI alike."""
    from onnx import numpy_helper

    model = onnx.load(str(bundle.path(f"asr/whisper-base/onnx/{part}-int8")))
    weights = [
        numpy_helper.to_array(init)
        for init in model.graph.initializer
        if init.data_type == onnx.TensorProto.INT8 and init.name.endswith("_quantized")
    ]
    assert weights, "no int8 weights in the graph"
    peak = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    assert peak <= 64, f"int8 weights reach {peak}: products can saturate on processors without VNNI"
    assert 255 * peak * 2 <= np.iinfo(np.int16).max
