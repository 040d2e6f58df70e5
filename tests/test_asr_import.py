"""Importers for Hugging Face transformers folders and OpenAI .pt checkpoints: small random-initialised
models are saved in each format, imported, exported to ONNX, and their logits compared with the
reference implementation's own forward pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from build_scripts.whisper.__main__ import main as whisper_build_main
from build_scripts.whisper.export import export_onnx
from build_scripts.whisper.load import detect_format, load_checkpoint
from engines.asr.onnxruntime_backend import OrtGraphRunner
from engines.audio import load_audio_16k
from engines.bundle import Bundle
from engines.errors import BackendUnavailable, ModelFileError
from engines.manifest import Manifest
from tests.fixtures import build

torch = pytest.importorskip("torch")

PROMPT = [50258, 50259, 50359, 50363]
CONTINUATION = [440, 1768, 13]  # three ordinary tokens after the prompt
TINY = {"state": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 3, "ffn": 128}


def _onnx_logits(folder: Path, mel: np.ndarray, tokens: list[int]) -> np.ndarray:
    """Logits after each of ``tokens`` beyond the prompt, decoded step by step through the KV cache."""
    encoder = OrtGraphRunner(folder / "encoder-fp32.onnx")
    decoder = OrtGraphRunner(folder / "decoder-fp32.onnx")
    cross = encoder.run({"mel": mel})
    n_layer = sum(1 for name in cross if name.startswith("cross_k_"))
    heads, head_dim = cross["cross_v_0"].shape[1], cross["cross_v_0"].shape[3]
    empty = np.zeros((1, heads, 0, head_dim), dtype=np.float32)
    caches = {f"self_{kind}_{i}": empty for i in range(n_layer) for kind in ("k", "v")}
    steps = [tokens[: len(PROMPT)], *([t] for t in tokens[len(PROMPT) :])]
    logits = []
    for step in steps:
        out = decoder.run({"tokens": np.asarray([step], dtype=np.int64), **caches, **cross})
        caches = {name: out[f"new_{name}"] for name in caches}
        logits.append(out["logits"][0])
    return np.stack(logits)


@pytest.fixture(scope="module")
def mel() -> np.ndarray:
    return np.random.default_rng(1).normal(0.0, 0.5, (1, 80, 3000)).astype(np.float32)


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """A small random-initialised transformers Whisper, saved with save_pretrained."""
    transformers = pytest.importorskip("transformers", reason="the dev extra installs transformers")
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=51865,
        num_mel_bins=80,
        d_model=TINY["state"],
        encoder_layers=TINY["encoder_layers"],
        decoder_layers=TINY["decoder_layers"],
        encoder_attention_heads=TINY["heads"],
        decoder_attention_heads=TINY["heads"],
        encoder_ffn_dim=TINY["ffn"],
        decoder_ffn_dim=TINY["ffn"],
        max_source_positions=1500,
        max_target_positions=448,
    )
    model = transformers.WhisperForConditionalGeneration(config).eval()
    folder = tmp_path_factory.mktemp("hf")
    model.save_pretrained(folder)
    return model, folder


def test_transformers_folder_matches_transformers(
    bundle: Bundle, hf_model: tuple[object, Path], tmp_path: Path, mel: np.ndarray
) -> None:
    model, folder = hf_model
    assert detect_format(folder) == "transformers"
    ckpt = load_checkpoint(folder)
    assert ckpt.dims.n_text_layer == 3 and ckpt.dims.n_audio_state == 64
    export_onnx(ckpt, bundle.path("asr/whisper-base/onnx/tokenizer"), tmp_path / "onnx", precisions=("fp32",))
    tokens = PROMPT + CONTINUATION
    with torch.no_grad():
        expected = model(  # type: ignore[operator]
            input_features=torch.from_numpy(mel), decoder_input_ids=torch.tensor([tokens])
        ).logits[0, len(PROMPT) - 1 :]
    ours = _onnx_logits(tmp_path / "onnx", mel, tokens)
    np.testing.assert_allclose(ours, expected.numpy(), atol=1e-3, rtol=1e-3)
    assert (ours.argmax(-1) == expected.numpy().argmax(-1)).all()


def test_export_command_adds_a_model_to_a_bundle(
    bundle: Bundle, hf_model: tuple[object, Path], tmp_path: Path, data_dir: Path
) -> None:
    root = tmp_path / "bundle"
    root.mkdir()
    Manifest().write(root)
    tokenizer = bundle.path("asr/whisper-base/onnx/tokenizer")
    argv = [
        "export",
        str(hf_model[1]),
        "--model",
        "tiny",
        "--bundle",
        str(root),
        "--tokenizer",
        str(tokenizer),
    ]
    assert whisper_build_main(argv) == 0
    small = Bundle.open(root)
    assert small.manifest.artifacts["asr/tiny/onnx/decoder-int8"].source["format"] == "transformers"
    engine = build.asr(small, model="tiny", precision="int8")
    engine.load()
    transcript = engine.transcribe(load_audio_16k(data_dir / "speech/en/google_audio.wav"))
    assert transcript.audio_s == pytest.approx(1.811, abs=0.01)  # random weights: any text, but it runs
    engine.close()
    with pytest.raises(BackendUnavailable, match="has: tiny"):
        build.asr(small, model="distil-small.en")


def test_openai_checkpoint_matches_openai_whisper(bundle: Bundle, tmp_path: Path, mel: np.ndarray) -> None:
    whisper_model = pytest.importorskip(
        "whisper.model", reason="openai-whisper is installed with pip install --no-deps openai-whisper"
    )
    torch.manual_seed(0)
    dims = whisper_model.ModelDimensions(
        n_mels=80,
        n_audio_ctx=1500,
        n_audio_state=TINY["state"],
        n_audio_head=TINY["heads"],
        n_audio_layer=TINY["encoder_layers"],
        n_vocab=51865,
        n_text_ctx=448,
        n_text_state=TINY["state"],
        n_text_head=TINY["heads"],
        n_text_layer=TINY["decoder_layers"],
    )
    model = whisper_model.Whisper(dims).eval()
    with torch.no_grad():  # openai-whisper leaves the decoder positions uninitialised and norms at 1/0
        model.decoder.positional_embedding.normal_(0.0, 0.02)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.1)
                module.bias.normal_(0.0, 0.1)
    path = tmp_path / "tiny.pt"
    torch.save({"dims": vars(dims), "model_state_dict": model.state_dict()}, path)
    assert detect_format(path) == "openai"
    ckpt = load_checkpoint(path)
    export_onnx(ckpt, bundle.path("asr/whisper-base/onnx/tokenizer"), tmp_path / "onnx", precisions=("fp32",))
    tokens = PROMPT + CONTINUATION
    with torch.no_grad():
        expected = model(torch.from_numpy(mel), torch.tensor([tokens]))[0, len(PROMPT) - 1 :]
    ours = _onnx_logits(tmp_path / "onnx", mel, tokens)
    np.testing.assert_allclose(ours, expected.numpy(), atol=1e-3, rtol=1e-3)


def test_unknown_checkpoint_names_the_formats(tmp_path: Path) -> None:
    (tmp_path / "weights.npz").write_bytes(b"x")
    with pytest.raises(ModelFileError, match="CTranslate2 folder"):
        load_checkpoint(tmp_path)
    bad = tmp_path / "bad.pt"
    torch.save({"something": 1}, bad)
    with pytest.raises(ModelFileError, match="not an OpenAI Whisper checkpoint"):
        load_checkpoint(bad)
