"""Piper's settings (``[tts]``), and how a reply is cut into clauses for it."""

from __future__ import annotations

from pydantic import Field

from engines.params import Params


class TtsParams(Params):
    """Piper: the voice, and how a reply is cut into pieces spoken as they are written."""

    voice: str = Field(
        "en_US-joe-medium", min_length=1, description="a tts/<voice> Piper voice in the bundle"
    )
    length_scale: float = Field(1.0, gt=0.2, le=3.0, description="above 1 speaks slower")
    # 3 would bring the first audio ~44 ms sooner at p50 on 2 cores, heard no worse (python -m bench
    # first_piece), but a stop word 0.8-1 s into a reply is then missed from a kept echo room
    # (test_echo_session): 4 until that is understood (docs/benchmarks.md).
    first_clause_words: int = Field(
        4, ge=1, le=20, description="the reply's first clause is spoken after about this many words"
    )
    threads: int = Field(2, ge=1, le=64, description="ONNX Runtime threads for Piper")


def default_first_clause_words() -> int:
    return int(TtsParams.model_fields["first_clause_words"].default)
