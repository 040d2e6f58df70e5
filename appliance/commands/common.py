"""Helpers shared by subcommands: loading settings, reporting errors."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.config import ConfigError, Settings, load_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="TOML file (default: the shipped default)")


def settings_or_exit(args: argparse.Namespace) -> Settings | None:
    """Settings from ``--config``; prints every problem and returns None when invalid."""
    try:
        return load_settings(getattr(args, "config", None))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
