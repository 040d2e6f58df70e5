"""appliance talk WAV: one full turn from a file through the pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.commands.common import add_config_option, not_built


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("talk", help="one full turn from a WAV file: transcript, reply, trace")
    parser.add_argument("wav", type=Path)
    parser.add_argument("--reply", type=Path, help="write the spoken reply to this WAV")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--fast", action="store_true", help="feed audio as fast as possible")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    return not_built("talk", "the streaming pipeline")
