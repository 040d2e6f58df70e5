"""appliance transcribe WAV... [--json]: Whisper on files.

Any sample rate, channel count or format soundfile reads is converted to 16 kHz mono. A file that
cannot be read is reported (on stderr, and as a JSON line with ``error`` under ``--json``) and the
other files are still transcribed; the exit status is 1 when any file failed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from appliance.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_option,
    loaded_or_none,
    report_file_error,
    settings_or_exit,
)
from engines.errors import EngineError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("transcribe", help="transcribe audio files with the ASR engine")
    parser.add_argument("wav", type=Path, nargs="+")
    parser.add_argument("--json", action="store_true", help="one JSON line per file")
    parser.add_argument(
        "--real-length",
        choices=("on", "off"),
        default=None,
        help="encode only the real audio length (default: asr.encode_real_length)",
    )
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    from appliance.config import override
    from appliance.engine_set import asr_engine, open_bundle
    from engines.audio import load_audio_16k

    if args.real_length is not None:
        settings = override(settings, asr={"encode_real_length": args.real_length == "on"})
    engine = loaded_or_none(lambda: asr_engine(settings, open_bundle(settings)))
    if engine is None:
        return EXIT_FAILED
    failed = 0
    try:
        for path in args.wav:
            try:
                transcript = engine.transcribe(load_audio_16k(path))
            except EngineError as err:
                failed += 1
                report_file_error(path, err, as_json=args.json)
                continue
            if args.json:
                record = {
                    "file": str(path),
                    "text": transcript.text,
                    "audio_s": round(transcript.audio_s, 3),
                    "asr_s": round(transcript.asr_s, 3),
                }
                print(json.dumps(record), flush=True)
            else:
                print(f"{path}: {transcript.text}", flush=True)
    finally:
        engine.close()
    return EXIT_FAILED if failed else EXIT_OK
