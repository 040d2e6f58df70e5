"""Whisper's byte-level BPE tokenizer, from the exported ``tokenizer.json`` (no network, no tiktoken)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engines.errors import BackendUnavailable, ModelFileError


class WhisperTokenizer:
    def __init__(self, path: Path, eot: int) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as err:
            raise BackendUnavailable(
                "the tokenizers package is missing", fix="pip install tokenizers"
            ) from err
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust library raises a bare Exception for unreadable files
            raise ModelFileError(
                f"{path} is not a readable tokenizer.json ({err})",
                fix="re-export the model: python -m build_scripts bundle --out DIR",
            ) from err
        self.eot = eot

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of the ordinary tokens; special and timestamp tokens (ids >= end-of-text) are dropped."""
        return str(self._tokenizer.decode([t for t in tokens if t < self.eot], skip_special_tokens=True))

    def no_speech_id(self) -> int | None:
        """The no-speech token (``<|nocaptions|>`` in the first checkpoints, ``<|nospeech|>`` later)."""
        for text in ("<|nospeech|>", "<|nocaptions|>"):
            found = self._tokenizer.token_to_id(text)
            if found is not None:
                return int(found)
        return None

    def previous_text_id(self) -> int | None:
        """``<|startofprev|>``: what opens the text Whisper is told came before (its prompt)."""
        found = self._tokenizer.token_to_id("<|startofprev|>")
        return None if found is None else int(found)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)
