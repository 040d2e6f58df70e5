"""appliance say TEXT -o OUT.wav: Piper synthesis."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.commands.common import add_config_option, not_built


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("say", help="synthesize text to a WAV file")
    parser.add_argument("text")
    parser.add_argument("-o", "--output", type=Path, required=True)
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    return not_built("say", "the Piper TTS engine")
