"""appliance config check [FILE] | show [FILE] | default"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from appliance.commands.common import EXIT_CONFIG, EXIT_OK
from appliance.config import ConfigError, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("config", help="check or show the configuration")
    actions = parser.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="validate a TOML file (default: the shipped default)")
    check.add_argument("file", type=Path, nargs="?")
    check.set_defaults(handler=handle_check)
    show = actions.add_parser("show", help="print the effective settings as JSON")
    show.add_argument("file", type=Path, nargs="?")
    show.set_defaults(handler=handle_show)
    default = actions.add_parser(
        "default", help="print the default configuration, every key with its description"
    )
    default.set_defaults(handler=handle_default)


def handle_default(_args: argparse.Namespace) -> int:
    from appliance.daemon.config_default import default_toml

    print(default_toml(), end="")
    return EXIT_OK


def handle_check(args: argparse.Namespace) -> int:
    from appliance.admin.config_file import read_file_data, validate_file_data
    from appliance.daemon.start_check import check_start

    source = str(args.file or "default configuration")
    try:
        # The ports may be held by the running daemon itself: only clashes between them count here.
        problems = check_start(load_settings(args.file), config_path=args.file, ports_free=False).all
    except ConfigError as err:
        source, problems = err.source, err.problems
        if args.file is not None:  # the file alone: every schema problem and the bundle's choices
            try:
                validate_file_data(read_file_data(args.file), source)
            except ConfigError as whole:
                problems = whole.problems
    if problems:
        print(f"{source}: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"{args.file or 'default configuration'}: OK")
    return EXIT_OK


def handle_show(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.file)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(settings.model_dump(mode="json"), indent=2))
    return EXIT_OK
