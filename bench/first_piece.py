"""How short the reply's first spoken piece may be: intelligibility and time to the first audio.

    .venv/bin/python -m bench first_piece [--words 2 3 4] [--judge whisper-base]

Each reply (sentences of generated sites, seed 7, that no test or tuning used, and the TTS benchmark's
sentences) is spoken as the appliance speaks it: split by the clause splitter with a first piece of N
words (``tts.first_clause_words``), each piece synthesized by Piper on its own and played one after the
other; and whole, in one synthesis, for comparison. A Whisper model (base by default: a better listener
than the product's tiny.en) transcribes each, and its word error rate against the text says what the
cut costs a listener; the first piece's synthesis time says what it saves. 16 kHz, interleaved per
reply. Writes ~/.cache/appliance/bench-results/first-piece-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np

from bench.paths import RESULTS
from bench.tts import SENTENCES

RATE_HZ = 16000


def replies(count: int) -> list[str]:
    from bench.site_generator import generate_sites

    facts = [
        line.strip()
        for site in generate_sites(3, seed=7)
        for _, text in site.sections
        for line in re.split(r"(?<=[.!?])\s+", text)
        if len(line.split()) >= 6
    ]
    return (list(SENTENCES) + facts)[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench first_piece", description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--judge", default="whisper-base", help="the bundle's Whisper that listens")
    parser.add_argument("--replies", type=int, default=40)
    args = parser.parse_args(argv)

    from appliance.config import load_settings
    from appliance.engine_set import asr_engine, open_bundle, tts_engine
    from engines.asr.text import word_error_rate
    from engines.tts.clauses import ClauseSplitter

    settings = load_settings(None)
    bundle = open_bundle(settings)
    tts, judge = tts_engine(settings, bundle), asr_engine(settings, bundle, model=args.judge)
    tts.load()
    judge.load()
    ways = [f"first {n} words" for n in args.words] + ["whole"]
    heard: dict[str, list[str]] = {way: [] for way in ways}
    first_ms: dict[str, list[float]] = {way: [] for way in ways}
    texts = replies(args.replies)
    for text in texts:
        for way, words in [*zip(ways, args.words, strict=False), ("whole", None)]:
            if words is None:
                pieces = [text]
            else:
                splitter = ClauseSplitter(first_clause_words=words)
                pieces = splitter.push(text) + splitter.flush()
            audio = []
            for index, piece in enumerate(pieces):
                started = time.perf_counter()
                chunks = list(tts.synthesize(piece, sample_rate_hz=RATE_HZ))
                if index == 0:
                    first_ms[way].append((time.perf_counter() - started) * 1000)
                audio += chunks
            heard[way].append(judge.transcribe(np.concatenate(audio).astype(np.float32)).text)
    result: dict[str, Any] = {"judge": args.judge, "replies": len(texts), "ways": {}}
    print(f"{len(texts)} replies, Piper {settings.tts.voice}, heard by {args.judge}")
    from appliance.trace.stats import percentile

    for way in ways:
        wer = word_error_rate(texts, heard[way])
        first = {f"p{q}": round(percentile(first_ms[way], q), 1) for q in (50, 95, 99)}
        result["ways"][way] = {"wer": round(wer, 4), "first_audio_ms": first}
        print(
            f"  {way:<14} WER {wer * 100:5.1f}%  first audio p50 {first['p50']:.1f} p95 {first['p95']:.1f} ms"
        )
    result["examples"] = {way: heard[way][:5] for way in ways}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"first-piece-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
