"""Helpers shared by subcommands: loading settings, reporting errors."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from appliance.config import ConfigError, Settings, load_settings
from engines.errors import EngineError

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


class _Loadable(Protocol):
    def load(self) -> None: ...


Engine = TypeVar("Engine", bound=_Loadable)


def loaded_or_none(build: Callable[[], Engine]) -> Engine | None:
    """The engine ``build`` makes, loaded; None (the error printed) when it cannot be."""
    try:
        engine = build()
        engine.load()
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    return engine


def report_file_error(path: Path, err: EngineError, *, as_json: bool) -> None:
    """A file a command could not use: on stderr, and as a JSON line with ``--json``."""
    print(f"error: {path}: {err}", file=sys.stderr)
    if as_json:
        print(json.dumps({"file": str(path), "error": str(err), "code": err.code}), flush=True)
