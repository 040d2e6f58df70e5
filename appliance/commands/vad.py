"""appliance vad WAV: speech segments."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.commands.common import add_config_option, not_built


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("vad", help="print the speech segments of a WAV file")
    parser.add_argument("wav", type=Path)
    parser.add_argument("--json", action="store_true")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    return not_built("vad", "the Silero VAD engine")
