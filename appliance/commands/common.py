"""Helpers shared by subcommands: loading settings, reporting errors."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.config import ConfigError, Settings, load_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# sysexits' EX_CONFIG, from every command and the daemon alike: an invalid configuration file, or
# engines that cannot load as configured. systemd does not restart the daemon on it.
EXIT_CONFIG = 78


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="TOML file (default: the shipped default)")


def settings_or_exit(args: argparse.Namespace) -> Settings:
    """Settings from ``--config``; prints every problem and exits with EXIT_CONFIG when invalid."""
    try:
        return load_settings(getattr(args, "config", None))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from err
