"""appliance vad WAV... [--json]: speech segments of audio files (Silero VAD + the endpointer).

Segments are what the appliance would take as utterances with the configured ``[vad]`` and
``[endpointer]`` settings: start of the first voiced frame to end of the last one, without pre-roll.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from appliance.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config_option,
    loaded_or_none,
    report_file_error,
    settings_or_exit,
)
from engines.errors import EngineError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "vad",
        help="print the speech segments of audio files",
        description="Print the speech segments of audio files (any rate, channels or format soundfile reads).",
    )
    parser.add_argument("wav", type=Path, nargs="+")
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per file (a line each): file, audio_s, speech_s, vad_s and "
        "segments [{start_s, end_s, forced}]; a file that fails gives {file, error, code}",
    )
    parser.add_argument("--backend", choices=("onnxruntime", "torch"), help="default: vad.backend")
    parser.add_argument(
        "--threshold", type=float, help="speech probability threshold (default: vad.threshold)"
    )
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    from appliance.config import ConfigError, override
    from appliance.engine_set import open_bundle, vad_engine
    from engines.audio import SAMPLE_RATE_HZ, load_audio_16k
    from engines.vad.frames import frame_probabilities
    from engines.vad.segments import speech_segments

    chosen = {"threshold": args.threshold, "backend": args.backend}
    try:
        settings = override(settings, vad={k: v for k, v in chosen.items() if v is not None})
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    engine = loaded_or_none(lambda: vad_engine(settings, open_bundle(settings)))
    if engine is None:
        return EXIT_FAILED
    failed = 0
    try:
        for path in args.wav:
            try:
                audio = load_audio_16k(path)
            except EngineError as err:
                failed += 1
                report_file_error(path, err, as_json=args.json)
                continue
            started = time.perf_counter()
            segments = speech_segments(
                frame_probabilities(engine.stream(), audio),
                settings.endpointer,
                threshold=settings.vad.threshold,
            )
            vad_s = time.perf_counter() - started
            audio_s = audio.size / SAMPLE_RATE_HZ
            speech_s = sum(s.duration_s for s in segments)
            if args.json:
                record = {
                    "file": str(path),
                    "audio_s": round(audio_s, 3),
                    "speech_s": round(speech_s, 3),
                    "vad_s": round(vad_s, 3),
                    "segments": [
                        {"start_s": round(s.start_s, 3), "end_s": round(s.end_s, 3), "forced": s.forced}
                        for s in segments
                    ],
                }
                print(json.dumps(record), flush=True)
                continue
            print(f"{path}: {len(segments)} segment(s), {speech_s:.2f} s of speech in {audio_s:.2f} s")
            for s in segments:
                note = "  (cut at max_utterance_s)" if s.forced else ""
                print(f"  {s.start_s:7.3f} - {s.end_s:7.3f} s  ({s.duration_s:.2f} s){note}", flush=True)
    finally:
        engine.close()
    return EXIT_FAILED if failed else EXIT_OK
