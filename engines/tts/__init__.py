"""Speech synthesis: Piper voices, one clause at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engines.errors import ModelFileError
from engines.tts.params import TtsParams

if TYPE_CHECKING:
    from engines.bundle import Bundle


class TtsEngine(Protocol):
    sample_rate_hz: int

    def load(self) -> None: ...

    def synthesize(self, text: str, *, sample_rate_hz: int | None = None) -> Iterator[np.ndarray]:
        """Yield float32 mono chunks of ``text`` spoken, at ``sample_rate_hz`` (voice rate if None)."""
        ...

    def phonemes(self, words: Sequence[str]) -> list[str]:
        """Each word's phonemes as the voice would say it (IPA, one string a word, without stress
        marks, word breaks or punctuation)."""
        ...

    def close(self) -> None: ...


def bundled_voices(bundle: Bundle) -> list[str]:
    """Names of the Piper voices in the bundle (artifacts ``tts/<voice>/onnx``)."""
    names = bundle.manifest.artifacts
    return sorted(
        name.split("/")[1]
        for name in names
        if name.startswith("tts/") and name.endswith("/onnx") and name.count("/") == 2
    )


def create_tts(bundle: Bundle, params: TtsParams | None = None) -> TtsEngine:
    """An unloaded Piper voice from the bundle. ``length_scale`` > 1 speaks slower."""
    params = TtsParams() if params is None else params
    voice = params.voice
    voices = bundled_voices(bundle)
    if voice not in voices:
        raise ModelFileError(
            f"voice {voice!r} is not in the engine bundle {bundle.root} (has: {', '.join(voices) or 'none'})",
            fix="set tts.voice to one of those, or add the voice to the bundle build",
        )
    from engines.tts.piper_voice import PiperTts

    return PiperTts(
        bundle.path(f"tts/{voice}/onnx"),
        bundle.path(f"tts/{voice}/config"),
        length_scale=params.length_scale,
        threads=params.threads,
    )
