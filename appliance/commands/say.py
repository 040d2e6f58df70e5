"""appliance say TEXT -o OUT.wav: Piper synthesis, clause by clause, to a 16-bit WAV file."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from appliance.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_config_option, settings_or_exit
from engines.errors import EngineError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("say", help="synthesize text to a WAV file")
    parser.add_argument("text")
    parser.add_argument("-o", "--output", type=Path, required=True, help="WAV file to write (16-bit PCM)")
    parser.add_argument(
        "--rate",
        type=int,
        default=None,
        help="sample rate in Hz, e.g. 8000, 16000, 48000 (default: the voice's)",
    )
    parser.add_argument("--voice", help="bundled Piper voice (default: tts.voice)")
    parser.add_argument("--length-scale", type=float, help="> 1 speaks slower (default: tts.length_scale)")
    parser.add_argument("--json", action="store_true", help="print one JSON object describing the result")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    if args.rate is not None and not 4000 <= args.rate <= 192000:
        print(f"error: --rate must be between 4000 and 192000 Hz, got {args.rate}", file=sys.stderr)
        return EXIT_USAGE
    from engines.tts.text import speakable

    if not speakable(args.text):
        print(f"error: nothing to speak in {args.text!r}; pass text with at least one word", file=sys.stderr)
        return EXIT_USAGE
    output: Path = args.output
    if not output.parent.is_dir():
        print(f"error: folder {output.parent} does not exist; create it first", file=sys.stderr)
        return EXIT_USAGE
    import numpy as np
    import soundfile as sf

    from appliance.config import ConfigError, override
    from appliance.engine_set import open_bundle, tts_engine

    chosen = {"voice": args.voice, "length_scale": args.length_scale}
    try:
        settings = override(settings, tts={k: v for k, v in chosen.items() if v is not None})
        engine = tts_engine(settings, open_bundle(settings))
        engine.load()
    except (EngineError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    rate_hz = args.rate or engine.sample_rate_hz
    try:
        started = time.perf_counter()
        first_chunk_s = None
        chunks = []
        for chunk in engine.synthesize(args.text, sample_rate_hz=rate_hz):
            if first_chunk_s is None:
                first_chunk_s = time.perf_counter() - started
            chunks.append(chunk)
        tts_s = time.perf_counter() - started
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        engine.close()
    audio = np.concatenate(chunks)
    # Written next to the target and renamed, so a reader never sees half a file.
    partial = output.with_name(f".{output.name}.partial")
    sf.write(str(partial), audio, rate_hz, subtype="PCM_16", format="WAV")
    os.replace(partial, output)
    audio_s = audio.size / rate_hz
    if args.json:
        record = {
            "file": str(output),
            "audio_s": round(audio_s, 3),
            "sample_rate_hz": rate_hz,
            "chunks": len(chunks),
            "first_chunk_s": round(first_chunk_s or 0.0, 3),
            "tts_s": round(tts_s, 3),
        }
        print(json.dumps(record))
    else:
        print(
            f"wrote {output}: {audio_s:.2f} s at {rate_hz} Hz in {len(chunks)} chunk(s); "
            f"first chunk after {first_chunk_s or 0.0:.2f} s, all after {tts_s:.2f} s"
        )
    return EXIT_OK
