"""Whisper's settings (``[asr]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from engines.params import Params


class AsrParams(Params):
    """Whisper: the model that transcribes a turn, where it runs, and the words it is told to expect."""

    # tiny.en: WER 11.1% vs 12.6% (microphone) and 13.1% vs 16.2% (call path), 0.71x the latency of
    # base on the English test recordings (bench/reference/asr-models.json); base is multilingual.
    model: str = Field(
        "whisper-tiny-en",
        min_length=1,
        description="an asr/<model>/onnx export in the bundle: whisper-tiny-en (English only) | "
        "whisper-base (multilingual)",
    )
    backend: Literal["onnxruntime", "tensorrt"] = Field("onnxruntime", description="onnxruntime | tensorrt")
    device: Literal["cpu", "cuda"] = Field("cpu", description="cpu | cuda")
    precision: Literal["fp32", "fp16", "int8"] = Field("int8", description="fp32 | fp16 | int8")
    language: str = Field("en", min_length=2, max_length=3, description="the language spoken")
    # 0.21x faster-whisper's latency, WER +0.5 points, on the test recordings (bench/asr.py).
    encode_real_length: bool = Field(
        True,
        description="encode the audio plus 5 s, not a 30 s window (a full window again on degenerate text)",
    )
    threads: int = Field(2, ge=1, le=64, description="ONNX Runtime threads")
    vocabulary: tuple[str, ...] = Field(
        (),
        description="words the site uses (places, names, products) that Whisper is told to expect, as "
        "the text before what it hears: site questions are heard better, other speech a little worse "
        "(docs/answers.md)",
    )
