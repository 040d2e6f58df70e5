"""Piper (piper-tts) voices on ONNX Runtime: text split into clauses, one audio chunk per clause."""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engines.audio import resample
from engines.errors import BackendUnavailable, InputError, ModelFileError
from engines.onnx_cpu import cpu_session_options
from engines.tts.clauses import split_text
from engines.tts.text import speakable

log = logging.getLogger(__name__)

_BUNDLE_FIX = "rebuild the engine bundle: python -m build_scripts bundle --out DIR"
# Piper ends every sentence with about 0.23 s of silence; inside a sentence a shorter pause sounds natural.
_CLAUSE_PAUSE_S = 0.08
_SILENCE_LEVEL = 0.01
_NOT_SOUNDS = str.maketrans("", "", "ˈˌː- .,!?;:")


class PiperTts:
    def __init__(self, model_path: Path, config_path: Path, *, length_scale: float, threads: int) -> None:
        if not 0.2 < length_scale <= 3.0:
            raise ValueError(f"length_scale must be in (0.2, 3.0], got {length_scale}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.model_path = model_path
        self.config_path = config_path
        self.length_scale = length_scale
        self.threads = threads
        self.sample_rate_hz = _read_sample_rate(config_path)
        self._voice: Any = None
        self._synthesis: Any = None

    def load(self) -> None:
        if importlib.util.find_spec("piper") is None:
            raise BackendUnavailable(
                "Piper TTS needs the piper-tts package",
                fix="pip install 'voice-appliance[cpu]' (or the 'jetson' extra on the device)",
            )
        import onnxruntime as ort
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        if not self.model_path.is_file():
            raise ModelFileError(f"Piper voice model {self.model_path} is missing", fix=_BUNDLE_FIX)
        options = cpu_session_options(ort, self.threads)
        # The appliance runs several engines on shared cores: idle threads that spin for work steal
        # CPU from the others (measured on a busy 2-core machine: 1.61 s -> 1.19 s for one sentence).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            config = PiperConfig.from_dict(json.loads(self.config_path.read_text(encoding="utf-8")))
            session = ort.InferenceSession(str(self.model_path), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # bad JSON, missing keys, or onnxruntime's untyped load errors
            raise ModelFileError(
                f"cannot load Piper voice {self.model_path} ({err})", fix=_BUNDLE_FIX
            ) from err
        # Built directly (not PiperVoice.load) to set the thread count; no download folder is ever used
        # for espeak voices.
        self._voice = PiperVoice(session=session, config=config)
        self._synthesis = SynthesisConfig(length_scale=self.length_scale, normalize_audio=False)
        for _ in self.synthesize("Ready."):
            pass
        log.info("Piper voice %s loaded (%d Hz)", self.model_path.name, self.sample_rate_hz)

    def synthesize(self, text: str, *, sample_rate_hz: int | None = None) -> Iterator[np.ndarray]:
        """Speak ``text`` clause by clause; each chunk is yielded as soon as its clause is synthesized."""
        if self._voice is None:
            raise RuntimeError("the TTS engine is not loaded; call load() first")
        if not isinstance(text, str):
            raise InputError(f"text to speak must be a string, got {type(text).__name__}")
        clauses = [piece for piece in (speakable(c) for c in split_text(text)) if piece]
        if not clauses:
            raise InputError(
                f"nothing to speak in {text[:60]!r}", fix="pass text with at least one word or number"
            )
        target_hz = sample_rate_hz or self.sample_rate_hz
        for index, clause in enumerate(clauses):
            sentence_end = clause.rstrip("\"')]").endswith((".", "!", "?"))
            last = index == len(clauses) - 1
            for chunk in self._voice.synthesize(clause, self._synthesis):
                audio = np.asarray(chunk.audio_float_array, dtype=np.float32)
                if not (sentence_end or last):
                    audio = _trim_trailing_silence(audio, self.sample_rate_hz, keep_s=_CLAUSE_PAUSE_S)
                if audio.size == 0:
                    continue
                if target_hz != self.sample_rate_hz:
                    audio = resample(audio, self.sample_rate_hz, target_hz)
                yield audio

    def phonemes(self, words: Sequence[str]) -> list[str]:
        """Each word's phonemes from the voice's own espeak-ng, without stress, length, word breaks or
        punctuation, which say little of which word it was (not thread-safe: call it on the worker
        that synthesizes)."""
        if self._voice is None:
            raise RuntimeError("the TTS engine is not loaded; call load() first")
        return [
            "".join("".join(sentence) for sentence in self._voice.phonemize(word)).translate(_NOT_SOUNDS)
            for word in words
        ]

    def close(self) -> None:
        self._voice = None
        self._synthesis = None


def _read_sample_rate(config_path: Path) -> int:
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        return int(config["audio"]["sample_rate"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelFileError(
            f"Piper voice config {config_path} is unreadable or has no audio.sample_rate ({err})",
            fix=_BUNDLE_FIX,
        ) from err


def _trim_trailing_silence(audio: np.ndarray, sample_rate_hz: int, *, keep_s: float) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio) > _SILENCE_LEVEL)
    if loud.size == 0:
        return audio
    end = min(audio.size, int(loud[-1]) + 1 + int(keep_s * sample_rate_hz))
    return audio[:end]
