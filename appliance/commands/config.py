"""appliance config check [FILE] | show [FILE] | default | migrate FILE"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from appliance.commands.common import EXIT_CONFIG, EXIT_OK
from appliance.config import ConfigError, load_settings
from engines.files import loads_toml


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
    migrate = actions.add_parser(
        "migrate", help="move the keys an older version wrote to their new sections (FILE.bak keeps the old)"
    )
    migrate.add_argument("file", type=Path)
    migrate.set_defaults(handler=handle_migrate)


def handle_default(_args: argparse.Namespace) -> int:
    from appliance.daemon.config_default import default_toml

    print(default_toml(), end="")
    return EXIT_OK


def handle_check(args: argparse.Namespace) -> int:
    from appliance.admin.config_file import read_file_data, validate_file_data
    from appliance.daemon.start_check import check_start

    source = str(args.file or "default configuration")
    logging.getLogger("appliance.config_moves").setLevel(logging.ERROR)  # the moves are listed below
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
    _print_moves(args.file)
    print(f"{args.file or 'default configuration'}: OK")
    return EXIT_OK


def _print_moves(path: Path | None) -> None:
    from appliance.admin.config_file import read_file_data
    from appliance.config_moves import moves_in

    moves = moves_in(read_file_data(path)) if path is not None else []
    if moves:
        print(f"{path}: {len(moves)} key(s) of an older version, read at their new places:")
        for move in moves:
            print(f"  - {move}")
        print(f"  `appliance config migrate {path}` moves them in the file")


def handle_migrate(args: argparse.Namespace) -> int:
    from appliance.admin.config_file import read_file_data
    from appliance.config_moves import MovedTwice, file_changes, moved
    from appliance.config_writer import edited_toml, write_keeping_backup

    path: Path = args.file
    try:
        data = read_file_data(path)
        before, moves = moved(data)
        if not moves:
            print(f"{path}: every key is at its place; nothing to move")
            return EXIT_OK
        text = edited_toml(path.read_text(encoding="utf-8"), file_changes(moves))
    except (ConfigError, MovedTwice, ValueError, OSError) as err:
        print(f"error: {path}: {err}", file=sys.stderr)
        return EXIT_CONFIG
    after = {name: values for name, values in loads_toml(text).items() if values != {}}
    if after != before:  # the keys moved, nothing else changed (a section kept for its comments aside)
        print(
            f"error: {path}: the moved file would not read back the same; nothing was written",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    write_keeping_backup(path, text)
    for move in moves:
        print(f"  {move}")
    print(f"{path}: {len(moves)} key(s) moved; the file before is {path}.bak")
    return EXIT_OK


def handle_show(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.file)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(settings.model_dump(mode="json"), indent=2))
    return EXIT_OK
