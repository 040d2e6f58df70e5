"""appliance chat TEXT: stream a reply from the LLM."""

from __future__ import annotations

import argparse

from appliance.commands.common import add_config_option, not_built


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chat", help="stream a reply from the configured LLM")
    parser.add_argument("text")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    return not_built("chat", "the llama.cpp LLM engine")
