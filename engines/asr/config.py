"""The exported model's ``config.json``: dimensions, special tokens, suppressed tokens, languages."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engines.errors import ModelFileError

PRECISIONS = ("fp32", "fp16", "int8")
_LANGUAGE_TOKEN = re.compile(r"^<\|([a-z]{2,3})\|>$")
_SPECIAL_NAMES = {
    "eot": "<|endoftext|>",
    "sot": "<|startoftranscript|>",
    "translate": "<|translate|>",
    "transcribe": "<|transcribe|>",
    "no_timestamps": "<|notimestamps|>",
}


def special_tokens_from_tokenizer(tokenizer: dict[str, Any]) -> dict[str, Any]:
    """Special token ids and the language token of every language, from a ``tokenizer.json``."""
    added = {str(t["content"]): int(t["id"]) for t in tokenizer.get("added_tokens", [])}
    missing = [text for text in _SPECIAL_NAMES.values() if text not in added]
    if missing:
        raise ModelFileError(
            f"tokenizer.json lacks Whisper's special tokens {missing}",
            fix="use the tokenizer.json that belongs to the Whisper checkpoint",
        )
    special: dict[str, Any] = {key: added[text] for key, text in _SPECIAL_NAMES.items()}
    special["languages"] = {
        m.group(1): token
        for text, token in sorted(added.items(), key=lambda kv: kv[1])
        if (m := _LANGUAGE_TOKEN.match(text))
    }
    special["timestamp_begin"] = added.get("<|0.00|>", special["no_timestamps"] + 1)
    return special


@dataclass(frozen=True)
class WhisperConfig:
    dims: dict[str, int]
    special: dict[str, Any]
    suppress_ids: tuple[int, ...] = ()
    suppress_ids_begin: tuple[int, ...] = ()
    precisions: tuple[str, ...] = PRECISIONS
    exporter_version: int = 0
    source_format: str = ""
    frames_per_position: int = 2  # the encoder's stride-2 convolution
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def languages(self) -> dict[str, int]:
        return dict(self.special["languages"])

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> WhisperConfig:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                dims={k: int(v) for k, v in data["dims"].items()},
                special=dict(data["special"]),
                suppress_ids=tuple(data.get("suppress_ids", ())),
                suppress_ids_begin=tuple(data.get("suppress_ids_begin", ())),
                precisions=tuple(data.get("precisions", PRECISIONS)),
                exporter_version=int(data.get("exporter_version", 0)),
                source_format=str(data.get("source_format", "")),
                frames_per_position=int(data.get("frames_per_position", 2)),
                extra=dict(data.get("extra", {})),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ModelFileError(
                f"{path} is not a readable Whisper export config ({err})",
                fix="re-export the model: python -m build_scripts bundle --out DIR",
            ) from err
