"""A labelled end-of-turn set from real recordings: each English sentence of at least ``MIN_WORDS``
words as recorded (complete), and the same sentence with 300-1200 ms of the recording's own
background inserted at a word boundary: after a function word ("the", "of", "to", ...: the words
say plainly that more is coming), and elsewhere in the middle. Word timings come from Whisper
(faster-whisper on the bundle's CTranslate2 weights); the background is the quietest quarter second
of the recording, tiled.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.audio import SAMPLE_RATE_HZ, load_audio_16k

LEAD_S = 0.5  # background before the speech
TAIL_S = 2.5  # background after it: longer than any silence that may end a turn
MIN_WORDS = 5
PAUSE_S = (0.3, 1.2)
KINDS = ("complete", "pause_function", "pause_other")
# Words after which an English sentence cannot end: articles, prepositions, conjunctions, auxiliaries.
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "from",
        "by",
        "about",
        "into",
        "over",
        "under",
        "and",
        "or",
        "but",
        "nor",
        "so",
        "if",
        "that",
        "than",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "my",
        "your",
        "his",
        "her",
        "its",
        "our",
        "their",
        "this",
        "these",
        "those",
        "very",
        "some",
        "any",
        "no",
        "not",
    ]
)
# Keyword-spotting clips are isolated command words with gaps between them: no sentence to cut.
SKIP_PREFIXES = ("speechcommands_",)
_BACKGROUND_S = 0.25
_RMS_WINDOW = 320  # 20 ms


@dataclass(frozen=True)
class Clip:
    name: str
    kind: str  # "complete", "pause_function" or "pause_other"
    audio: np.ndarray  # 16 kHz float32: lead background, speech (with the pause), tail background
    speech_end_s: float  # where the recording's own audio ends (the tail background starts)
    pause_start_s: float | None = None  # pause clips: the inserted background
    pause_end_s: float | None = None
    cut_after: str = ""  # pause clips: the words before the pause

    @property
    def duration_s(self) -> float:
        return len(self.audio) / SAMPLE_RATE_HZ

    @property
    def pause_s(self) -> float:
        if self.pause_start_s is None or self.pause_end_s is None:
            return 0.0
        return self.pause_end_s - self.pause_start_s

    @property
    def paused(self) -> bool:
        return self.kind != "complete"


def sentences(data_dir: Path) -> list[tuple[Path, str]]:
    """(file, transcript) for the English sentences of at least MIN_WORDS words."""
    found: list[tuple[Path, str]] = []
    with (data_dir / "MANIFEST.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            text, name = row["transcript"], Path(row["file"]).name
            if not row["file"].startswith("speech/en/") or text == "-" or text.startswith("[partial]"):
                continue
            if name.startswith(SKIP_PREFIXES) or len(text.split()) < MIN_WORDS:
                continue
            found.append((data_dir / row["file"], text))
    return sorted(found, key=lambda item: item[0].name)


def background(audio: np.ndarray, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """``seconds`` of the recording's quietest quarter second, tiled from a random offset."""
    length = int(_BACKGROUND_S * SAMPLE_RATE_HZ)
    if len(audio) <= length:
        piece = audio
    else:
        windows = len(audio) // _RMS_WINDOW
        rms = np.sqrt(np.mean(audio[: windows * _RMS_WINDOW].reshape(windows, _RMS_WINDOW) ** 2, axis=1))
        span = max(1, length // _RMS_WINDOW)
        sums = np.convolve(rms, np.ones(span), mode="valid")
        start = int(np.argmin(sums)) * _RMS_WINDOW
        piece = audio[start : start + length]
    wanted = round(seconds * SAMPLE_RATE_HZ)
    tiled = np.tile(piece, wanted // max(1, len(piece)) + 2)
    offset = int(rng.integers(0, max(1, len(piece))))
    return np.ascontiguousarray(tiled[offset : offset + wanted], dtype=np.float32)


def word_times(whisper: Any, audio: np.ndarray) -> list[tuple[str, float, float]]:
    segments, _info = whisper.transcribe(audio, language="en", beam_size=1, word_timestamps=True)
    return [(w.word.strip(), float(w.start), float(w.end)) for s in segments for w in s.words or []]


def _bare(word: str) -> str:
    return word.strip().strip(".,?!;:\"'").lower()


def boundaries(words: list[tuple[str, float, float]]) -> list[tuple[int, float]]:
    """(words before the cut, cut time) for each word boundary, a word kept on each side."""
    return [(i, (words[i - 1][2] + words[i][1]) / 2.0) for i in range(1, len(words))]


def middle_boundary(
    words: list[tuple[str, float, float]], *, after_function_word: bool | None = None
) -> tuple[int, float] | None:
    """The boundary nearest the middle; ``after_function_word`` True: only after a function word,
    False: only after another word, None: any."""
    if len(words) < 3:
        return None
    middle = (words[0][1] + words[-1][2]) / 2.0
    found = [
        (i, at)
        for i, at in boundaries(words)
        if after_function_word is None or (_bare(words[i - 1][0]) in FUNCTION_WORDS) == after_function_word
    ]
    return min(found, key=lambda b: abs(b[1] - middle)) if found else None


def quietest_near(audio: np.ndarray, at_s: float, within_s: float = 0.06) -> int:
    """The sample index of the quietest 10 ms within ``within_s`` of ``at_s``: Whisper's word times are
    tens of ms off, and a cut inside a word's last sound would make it sound clipped, not paused."""
    hop = SAMPLE_RATE_HZ // 100
    centre = round(at_s * SAMPLE_RATE_HZ)
    starts = range(
        max(0, centre - round(within_s * SAMPLE_RATE_HZ)),
        min(len(audio) - hop, centre + round(within_s * SAMPLE_RATE_HZ)),
        hop // 2,
    )
    if not starts:
        return min(max(centre, 0), len(audio))
    best = min(starts, key=lambda i: float(np.sum(audio[i : i + hop] ** 2)))
    return best + hop // 2


def build_clips(
    data_dir: Path,
    whisper: Any,
    *,
    pause_s: tuple[float, float] = PAUSE_S,
    seed: int = 0,
    limit: int | None = None,
) -> list[Clip]:
    rng = np.random.default_rng(seed)
    clips: list[Clip] = []
    for path, _text in sentences(data_dir)[:limit]:
        speech = load_audio_16k(path)
        lead, tail = background(speech, LEAD_S, rng), background(speech, TAIL_S, rng)
        end_s = LEAD_S + len(speech) / SAMPLE_RATE_HZ
        clips.append(Clip(path.name, "complete", np.concatenate([lead, speech, tail]), end_s))
        words = word_times(whisper, speech)
        for kind, function in (("pause_function", True), ("pause_other", False)):
            boundary = middle_boundary(words, after_function_word=function)
            if boundary is None:
                continue
            index, cut_s = boundary
            cut = quietest_near(speech, cut_s)
            gap = background(speech, float(rng.uniform(*pause_s)), rng)
            clips.append(
                Clip(
                    path.name,
                    kind,
                    np.concatenate([lead, speech[:cut], gap, speech[cut:], tail]),
                    end_s + len(gap) / SAMPLE_RATE_HZ,
                    pause_start_s=LEAD_S + cut / SAMPLE_RATE_HZ,
                    pause_end_s=LEAD_S + (cut + len(gap)) / SAMPLE_RATE_HZ,
                    cut_after=" ".join(w for w, _s, _e in words[:index]),
                )
            )
    return clips


def call_path(audio_16k: np.ndarray) -> np.ndarray:
    """``audio_16k`` as a SIP call hands it to the session: 8 kHz G.711 u-law on the wire, decoded and
    brought back to 16 kHz by the call's own upsampler."""
    from appliance.rtp.g711 import decode, encode
    from appliance.rtp.resample import Upsampler2x, downsample_16k_to_8k

    return Upsampler2x().process(decode(encode(downsample_16k_to_8k(audio_16k), "PCMU"), "PCMU"))


def load_whisper(bundle: Any, threads: int = 2) -> Any:
    """faster-whisper on the bundle's CTranslate2 Whisper (a dev dependency: benchmarks and tests)."""
    from faster_whisper import WhisperModel

    folder = bundle.path("asr/whisper-base/ct2/model.bin").parent
    return WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=threads)


def clip_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a benchmark over this set: which recordings, the pauses' seed, the call path."""
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0, help="pause lengths and background offsets")
    parser.add_argument("--limit", type=int, default=None, help="only the first N recordings")
    parser.add_argument("--call-path", action="store_true", help="also as a SIP call delivers the audio")
    parser.add_argument("--out", type=Path, default=None)
