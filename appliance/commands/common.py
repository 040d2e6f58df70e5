"""Helpers shared by subcommands: loading settings, reporting errors."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.config import ConfigError, Settings, load_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_BUILT = 3


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="TOML file (default: the shipped default)")


def settings_or_exit(args: argparse.Namespace) -> Settings | None:
    """Settings from ``--config``; prints every problem and returns None when invalid."""
    try:
        return load_settings(getattr(args, "config", None))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def not_built(command: str, what: str) -> int:
    print(
        f"appliance {command}: not available yet: {what} is not part of this build.",
        file=sys.stderr,
    )
    return EXIT_NOT_BUILT
