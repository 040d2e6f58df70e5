"""Piper TTS: time to the first audio chunk vs whole-reply synthesis, for replies of 1-4 sentences.

    .venv/bin/python -m bench.tts [--repeats 3] [--rate 16000] [--first-clause-words 4]

For each reply, three ways to speak it, interleaved per reply so background load hits them alike:
- ``clauses``: what the appliance does: the reply streamed through the clause splitter (short first
  piece), each piece synthesized as soon as it is complete; first chunk = the first piece's audio.
- ``sentences``: Piper's own per-sentence chunks for the whole text (no short first piece).
- ``whole``: the whole reply synthesized before anything is played (the baseline).
Prints p50/p95/p99 of first-chunk and whole-reply times per sentence count and the ratio
first chunk / whole reply (goal: <= 0.3 for 2+ clauses), and writes ~/.cache/appliance/bench-results/tts-<time>.json.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bench.paths import RESULTS

REPO = Path(__file__).resolve().parents[1]

SENTENCES = [
    "The north entrance opens at nine tomorrow morning for all visitors.",
    "The cafe on the second floor serves breakfast until eleven.",
    "Tickets for the guided tour cost twelve dollars, and children go free.",
    "If you need help, ask at the front desk next to the lifts.",
    "Sure, the loading dock is behind building three, past the red gate.",
    "Line four stops when the red light comes on, so check the guard first.",
    "Your order will be ready in about ten minutes at the pickup window.",
    "Please wear safety glasses in the workshop at all times.",
]

log = logging.getLogger("bench.tts")


def replies(sentence_count: int) -> list[str]:
    """Three different replies of ``sentence_count`` sentences each."""
    n = len(SENTENCES)
    return [" ".join(SENTENCES[(start + i) % n] for i in range(sentence_count)) for start in (0, 3, 5)]


def _timed(chunks: Iterator[np.ndarray]) -> tuple[float, float, float]:
    """(first chunk s, all chunks s, audio samples) of a chunk iterator."""
    started = time.perf_counter()
    first = None
    samples = 0
    for chunk in chunks:
        if first is None:
            first = time.perf_counter() - started
        samples += chunk.size
    return first or 0.0, time.perf_counter() - started, float(samples)


def _clauses(engine: Any, text: str, rate_hz: int, first_words: int) -> Iterator[np.ndarray]:
    from engines.tts.clauses import ClauseSplitter

    splitter = ClauseSplitter(first_words)
    tokens = [t for t in text.replace(" ", " \0").split("\0") if t]  # word by word, as an LLM streams
    for token in tokens:
        for piece in splitter.push(token):
            yield from engine.synthesize(piece, sample_rate_hz=rate_hz)
    for piece in splitter.flush():
        yield from engine.synthesize(piece, sample_rate_hz=rate_hz)


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {q: float(np.percentile(a, p)) for q, p in (("p50", 50), ("p95", 95), ("p99", 99))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tts", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=int, default=16000, help="output sample rate in Hz")
    parser.add_argument("--first-clause-words", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from appliance.config import load_settings
    from appliance.engine_set import open_bundle, tts_engine

    settings = load_settings(None)
    engine = tts_engine(settings, open_bundle(settings))
    started = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - started
    voice = engine._voice  # type: ignore[attr-defined]  # Piper's own sentence chunks, for comparison
    synthesis = engine._synthesis  # type: ignore[attr-defined]

    def sentences(text: str) -> Iterator[np.ndarray]:
        for chunk in voice.synthesize(text, synthesis):
            yield chunk.audio_float_array

    ways: dict[str, Callable[[str], Iterator[np.ndarray]]] = {
        "clauses": lambda text: _clauses(engine, text, args.rate, args.first_clause_words),
        "sentences": sentences,
    }
    results: dict[str, Any] = {}
    print(f"Piper {settings.tts.voice}, output {args.rate} Hz, {args.repeats} repeats x 3 replies per row")
    print(
        f"{'sentences':>9} {'audio s':>8} | {'first chunk, clauses':^26} | {'first, sentences':>16} | "
        f"{'whole reply':^26} | {'first/whole':>11}"
    )
    print(
        f"{'':>9} {'':>8} | {'p50 / p95 / p99 s':^26} | {'p50 s':>16} | {'p50 / p95 / p99 s':^26} | {'p50':>11}"
    )
    for count in (1, 2, 3, 4):
        first: dict[str, list[float]] = {name: [] for name in ways}
        whole: list[float] = []
        ratios: list[float] = []
        audio_s: list[float] = []
        for _ in range(args.repeats):
            for text in replies(count):
                clause_first, clause_all, samples = _timed(ways["clauses"](text))
                sentence_first, sentence_all, _ = _timed(ways["sentences"](text))
                first["clauses"].append(clause_first)
                first["sentences"].append(sentence_first)
                # Whole reply: every sample of the text ready, which is what a non-streaming engine
                # waits for before playing anything.
                whole.append(sentence_all)
                ratios.append(clause_first / sentence_all)
                audio_s.append(samples / args.rate)
                log.debug("%d sentences: clauses all %.2f s", count, clause_all)
        row: dict[str, Any] = {
            "audio_s": float(np.mean(audio_s)),
            "first_chunk_clauses_s": _stats(first["clauses"]),
            "first_chunk_sentences_s": _stats(first["sentences"]),
            "whole_reply_s": _stats(whole),
            "first_over_whole": _stats(ratios),
        }
        results[str(count)] = row
        fc, ws = row["first_chunk_clauses_s"], row["whole_reply_s"]
        print(
            f"{count:>9} {row['audio_s']:8.2f} | {fc['p50']:8.3f} {fc['p95']:8.3f} {fc['p99']:8.3f} | "
            f"{row['first_chunk_sentences_s']['p50']:16.3f} | {ws['p50']:8.3f} {ws['p95']:8.3f} {ws['p99']:8.3f} | "
            f"{row['first_over_whole']['p50']:11.2f}"
        )
    engine.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"tts-{stamp}.json"
    record = {
        "voice": settings.tts.voice,
        "rate_hz": args.rate,
        "repeats": args.repeats,
        "first_clause_words": args.first_clause_words,
        "load_s": load_s,
        "by_sentence_count": results,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
