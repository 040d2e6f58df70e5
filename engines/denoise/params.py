"""Noise suppression's settings (``[denoise]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from engines.params import Params


class DenoiseParams(Params):
    """Noise suppression before the VAD and Whisper."""

    # none: on the English recordings mixed with the noises of the test data, both suppressors raised
    # Whisper tiny.en's word error rate at 5 dB and made Silero hear speech in noise alone more often
    # (bench noise, docs/noise.md).
    engine: Literal["none", "rnnoise", "deepfilternet"] = Field(
        "none",
        description="none | rnnoise (RNNoise, about 11% of a core per stream) | deepfilternet "
        "(DeepFilterNet3, about 17%): noise taken out of what the microphone or the caller sends",
    )
    feed: Literal["vad", "asr", "both"] = Field(
        "vad",
        description="what hears the cleaned audio: vad (who speaks and when a turn ends; Whisper hears "
        "the original) | asr (only what is transcribed) | both",
    )
    max_attenuation_db: float = Field(
        100.0,
        ge=1.0,
        le=100.0,
        description="deepfilternet: the most the noise is turned down, in dB (some of it left in spares "
        "Whisper the suppressor's artefacts; 100: as far as the model goes)",
    )
