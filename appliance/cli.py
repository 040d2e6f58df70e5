"""`appliance` command line: one module per subcommand under ``appliance.commands``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from appliance import __version__
from appliance.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description="Offline voice appliance.")
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args.handler(args)
    except SystemExit as stop:  # settings_or_exit: an invalid configuration (EXIT_CONFIG)
        if isinstance(stop.code, int):
            return stop.code
        raise
    return code
