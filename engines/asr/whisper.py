"""The Whisper engine: log-mel front end, encoder, greedy decoder, tokenizer, over any graph runner."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from engines.asr import Transcript
from engines.asr.config import WhisperConfig
from engines.asr.decoding import Decoded, GreedyDecoder, compression_ratio, without_repeats
from engines.asr.features import CHUNK_FRAMES, HOP_SAMPLES, LogMel, log_mel, pad_frames
from engines.asr.runner import GraphRunner
from engines.asr.tokenizer import WhisperTokenizer
from engines.audio import SAMPLE_RATE_HZ
from engines.errors import InputError, ModelFileError

log = logging.getLogger(__name__)
T = TypeVar("T")

CHUNK_SAMPLES = CHUNK_FRAMES * HOP_SAMPLES  # 30 s windows for longer files
FRAMES_PER_S = SAMPLE_RATE_HZ // HOP_SAMPLES


@dataclass(frozen=True)
class WhisperFiles:
    config: Path
    tokenizer: Path
    encoder: Path
    decoder: Path


@dataclass(frozen=True)
class EncodePolicy:
    """How much input the encoder sees.

    ``real_length=False``: every utterance is padded to Whisper's 30 s window (the reference).
    ``real_length=True``: the audio plus ``pad_s`` of silence, at least ``min_s``; when the result
    looks degenerate (token limit reached, or text compressing better than ``max_compression_ratio``)
    the utterance is decoded again with the full window.
    """

    real_length: bool = False
    pad_s: float = 5.0
    min_s: float = 0.0
    fallback: bool = True
    max_compression_ratio: float = 2.4
    max_new_tokens: int = 224
    # Speech is at most ~6 tokens a second; more is the decoder running away (a loop, or text made up
    # over silence), and every extra token costs a decoder step.
    tokens_per_s: float = 10.0
    tokens_floor: int = 16
    # The value that fills a 30 s window: 0.0 as faster-whisper pads its features (what Whisper base
    # transcribes best padded to 30 s); None for the silence floor, which real-length padding always uses.
    full_window_fill: float | None = 0.0

    def frames_for(self, content_frames: int) -> int:
        if not self.real_length:
            return CHUNK_FRAMES
        wanted = max(content_frames + round(self.pad_s * FRAMES_PER_S), round(self.min_s * FRAMES_PER_S))
        return min(CHUNK_FRAMES, 2 * math.ceil(wanted / 2))  # the encoder halves the frame count


RunnerFactory = Callable[[Path], GraphRunner]


class WhisperEngine:
    """Implements ``engines.asr.AsrEngine``; ``runner_factory`` decides how graphs execute."""

    def __init__(
        self,
        files: WhisperFiles,
        runner_factory: RunnerFactory,
        *,
        language: str,
        policy: EncodePolicy = EncodePolicy(),
        vocabulary: tuple[str, ...] = (),
    ) -> None:
        """``vocabulary``: words Whisper is told came before (its prompt), so it expects them."""
        self.files = files
        self.language = language
        self.policy = policy
        self.vocabulary = vocabulary
        self._runner_factory = runner_factory
        self._encoder: GraphRunner | None = None
        self._decoder: GraphRunner | None = None
        self._greedy: GreedyDecoder | None = None
        self._tokenizer: WhisperTokenizer | None = None
        self._prompt: list[int] = []
        self._no_speech: int | None = None
        self._n_mels = 80

    def load(self) -> None:
        for label, path in vars(self.files).items():
            if not Path(path).is_file():
                raise ModelFileError(
                    f"Whisper {label} file {path} is missing",
                    fix="build the bundle: python -m build_scripts bundle --out DIR",
                )
        config = WhisperConfig.read(self.files.config)
        self._n_mels = config.dims["n_mels"]
        self._tokenizer = WhisperTokenizer(self.files.tokenizer, eot=int(config.special["eot"]))
        self._prompt = self._vocabulary_tokens() + _prompt(config, self.language)
        self._no_speech = self._tokenizer.no_speech_id()
        self._encoder = self._runner_factory(self.files.encoder)
        self._decoder = self._runner_factory(self.files.decoder)
        self._greedy = GreedyDecoder(config, self._decoder)
        started = time.perf_counter()
        warm_up = np.random.default_rng(0).normal(0.0, 0.01, SAMPLE_RATE_HZ).astype(np.float32)
        self._transcribe_window(warm_up, max_new_tokens=4)
        log.info("whisper warmed up in %.2f s", time.perf_counter() - started)

    def _vocabulary_tokens(self) -> list[int]:
        """``<|startofprev|>`` and the vocabulary, as Whisper's prompt (at most MAX_VOCABULARY_TOKENS:
        a long prompt costs decoder time and pulls the transcript towards it)."""
        tokenizer = _loaded(self._tokenizer)
        previous = tokenizer.previous_text_id()
        words = ", ".join(word.strip() for word in self.vocabulary if word.strip())
        if previous is None or not words:
            return []
        return [previous, *tokenizer.encode(" " + words + ".")[:MAX_VOCABULARY_TOKENS]]

    def close(self) -> None:
        for runner in (self._encoder, self._decoder):
            if runner is not None:
                runner.close()
        self._encoder = self._decoder = self._greedy = None

    def transcribe(self, audio: np.ndarray, *, cancel: threading.Event | None = None) -> Transcript:
        audio = _checked_audio(audio)
        started = time.perf_counter()
        windows: list[tuple[Decoded, str]] = []
        for start in range(0, len(audio), CHUNK_SAMPLES):
            windows.append(self._transcribe_window(audio[start : start + CHUNK_SAMPLES], cancel=cancel))
        text = " ".join(t for _, t in windows if t)
        scored = sum(d.scored for d, _ in windows)
        return Transcript(
            text=text,
            language=self.language,
            audio_s=len(audio) / SAMPLE_RATE_HZ,
            asr_s=time.perf_counter() - started,
            tokens=tuple(t for d, _ in windows for t in d.tokens),
            avg_logprob=sum(d.logprob_sum for d, _ in windows) / scored if scored else None,
            no_speech_p=windows[0][0].no_speech_p if windows else None,
            compression_ratio=compression_ratio(text) if text else None,
        )

    def encode(self, features: np.ndarray, cancel: threading.Event | None = None) -> dict[str, np.ndarray]:
        """Cross-attention K/V for log-mel ``features`` [n_mels, frames] (frames even)."""
        encoder = _loaded(self._encoder)
        mel = features[None].astype(encoder.input_dtype("mel"), copy=False)
        return encoder.run({"mel": mel}, cancel)

    def _transcribe_window(
        self,
        audio: np.ndarray,
        max_new_tokens: int | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[Decoded, str]:
        mel = log_mel(audio, self._n_mels)
        policy = self.policy
        audio_budget = policy.tokens_floor + math.ceil(len(audio) / SAMPLE_RATE_HZ * policy.tokens_per_s)
        limit = min(max_new_tokens or policy.max_new_tokens, audio_budget)
        frames = self.policy.frames_for(mel.frames)
        decoded = self._decode(mel, frames, limit, cancel)
        text = _loaded(self._tokenizer).decode(decoded.tokens).strip()
        if frames < CHUNK_FRAMES and self.policy.fallback and self._degenerate(decoded, text):
            log.info(
                "real-length decode looks degenerate (%d tokens); decoding the full window",
                len(decoded.tokens),
            )
            decoded = self._decode(mel, CHUNK_FRAMES, limit, cancel)
            text = _loaded(self._tokenizer).decode(decoded.tokens).strip()
        if decoded.looped:
            kept = without_repeats(decoded.tokens)
            log.info("Whisper repeated itself; %d of %d tokens kept", len(kept), len(decoded.tokens))
            decoded = dataclasses.replace(decoded, tokens=kept)
            text = _loaded(self._tokenizer).decode(kept).strip()
        return decoded, text

    def _decode(
        self, mel: LogMel, frames: int, max_new_tokens: int, cancel: threading.Event | None
    ) -> Decoded:
        fill = self.policy.full_window_fill if frames == CHUNK_FRAMES else None
        cross = self.encode(pad_frames(mel, frames, fill), cancel)
        return _loaded(self._greedy).decode(
            cross,
            self._prompt,
            max_new_tokens,
            stop_on_loop=True,
            cancel=cancel,
            no_speech=self._no_speech,
        )

    def _degenerate(self, decoded: Decoded, text: str) -> bool:
        return decoded.hit_token_limit or compression_ratio(text) > self.policy.max_compression_ratio


MAX_VOCABULARY_TOKENS = 48

# English-only checkpoints (tiny.en, base.en, ...) have one token fewer than the multilingual ones.
MULTILINGUAL_VOCAB = 51865


def _prompt(config: WhisperConfig, language: str) -> list[int]:
    """The decoder's start: language and task tokens for a multilingual model; an English-only one
    was trained without them."""
    special = config.special
    if config.dims["n_vocab"] < MULTILINGUAL_VOCAB:
        if language != "en":
            raise InputError(
                f"this Whisper model is English-only; asr.language is {language!r}",
                fix='set asr.language = "en", or asr.model to a multilingual model (whisper-base)',
            )
        return [special["sot"], special["no_timestamps"]]
    languages = config.languages
    if language not in languages:
        raise InputError(
            f"Whisper has no language {language!r}",
            fix=f"set asr.language to one of: {', '.join(sorted(languages))}",
        )
    return [special["sot"], languages[language], special["transcribe"], special["no_timestamps"]]


def _loaded(value: T | None) -> T:
    if value is None:
        raise RuntimeError("the Whisper engine is not loaded; call load() first")
    return value


def _checked_audio(audio: np.ndarray) -> np.ndarray:
    array = np.asarray(audio)
    if array.ndim != 1:
        raise InputError(
            f"audio must be mono (one dimension), got shape {array.shape}",
            fix="mix the channels down first (engines.audio.load_audio_16k does)",
        )
    if array.size == 0:
        raise InputError("audio is empty (0 samples)", fix="pass at least some speech")
    if not np.issubdtype(array.dtype, np.floating):
        raise InputError(
            f"audio must be float samples in [-1, 1], got {array.dtype}",
            fix="convert with engines.audio.load_audio_16k or divide int16 samples by 32768",
        )
    array = array.astype(np.float32, copy=False)
    if not np.all(np.isfinite(array)):
        raise InputError("audio contains NaN or infinite samples", fix="check the audio source")
    return array
