"""Any supported Whisper checkpoint, by what the path looks like."""

from __future__ import annotations

from pathlib import Path

from build_scripts.whisper.checkpoint import WhisperCheckpoint
from engines.errors import ModelFileError

FORMATS = ("auto", "ctranslate2", "transformers", "openai")


def detect_format(path: Path) -> str:
    if path.is_file() and path.suffix in (".pt", ".pth"):
        return "openai"
    if (path / "model.bin").is_file():
        return "ctranslate2"
    if (path / "config.json").is_file() and (
        any(path.glob("model*.safetensors")) or (path / "pytorch_model.bin").is_file()
    ):
        return "transformers"
    raise ModelFileError(
        f"{path} is not a Whisper checkpoint this build reads",
        fix="pass a CTranslate2 folder (model.bin), a transformers folder (config.json + safetensors) "
        "or an OpenAI .pt file",
    )


def load_checkpoint(path: Path, checkpoint_format: str = "auto") -> WhisperCheckpoint:
    if checkpoint_format not in FORMATS:
        raise ModelFileError(f"unknown checkpoint format {checkpoint_format!r}", fix=f"use one of {FORMATS}")
    fmt = detect_format(path) if checkpoint_format == "auto" else checkpoint_format
    if fmt == "ctranslate2":
        from build_scripts.whisper.ct2 import load_ct2_folder

        return load_ct2_folder(path)
    if fmt == "transformers":
        from build_scripts.whisper.hf import load_hf_folder

        return load_hf_folder(path)
    from build_scripts.whisper.openai import load_openai_checkpoint

    return load_openai_checkpoint(path)
