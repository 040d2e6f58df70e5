"""appliance transcribe WAV...: Whisper on files."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.commands.common import add_config_option, not_built


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("transcribe", help="transcribe audio files with the ASR engine")
    parser.add_argument("wav", type=Path, nargs="+")
    parser.add_argument("--json", action="store_true", help="one JSON line per file")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    return not_built("transcribe", "the Whisper ASR engine")
