"""appliance run: the daemon."""

from __future__ import annotations

import argparse

from appliance.commands.common import add_config_option, not_built


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run the daemon (microphone/speaker, SIP, admin page)")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    return not_built("run", "the streaming pipeline")
