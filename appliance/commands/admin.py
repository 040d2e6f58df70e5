"""appliance admin passwd | users | remove: accounts of the admin page."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from appliance.admin.users import ROLES, UserFileError, read_users, remove_user, set_password
from appliance.auth.passwords import PasswordError
from appliance.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_config_option, settings_or_exit


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("admin", help="accounts of the admin page")
    actions = parser.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    passwd = actions.add_parser("passwd", help="add a user or change a password or role")
    passwd.add_argument("--user", required=True, help="user name")
    passwd.add_argument("--role", required=True, choices=ROLES)
    passwd.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input (for scripts)"
    )
    _common(passwd)
    passwd.set_defaults(handler=handle_passwd)
    users = actions.add_parser("users", help="list the users and their roles")
    _common(users)
    users.set_defaults(handler=handle_users)
    remove = actions.add_parser("remove", help="remove a user")
    remove.add_argument("--user", required=True)
    _common(remove)
    remove.set_defaults(handler=handle_remove)


def _common(parser: argparse.ArgumentParser) -> None:
    add_config_option(parser)
    parser.add_argument(
        "--users-file", type=Path, default=None, help="default: admin.users_file of the config"
    )


def _users_file(args: argparse.Namespace) -> Path:
    if args.users_file is not None:
        return Path(args.users_file)
    return settings_or_exit(args).admin.users_file


def _read_password(from_stdin: bool) -> str | None:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        print("error: no terminal to ask for the password; use --password-stdin", file=sys.stderr)
        return None
    first = getpass.getpass("New password: ")
    if getpass.getpass("Repeat it: ") != first:
        print("error: the two passwords differ; nothing was changed", file=sys.stderr)
        return None
    return first


def handle_passwd(args: argparse.Namespace) -> int:
    path = _users_file(args)
    password = _read_password(args.password_stdin)
    if password is None:
        return EXIT_USAGE
    try:
        user = set_password(path, args.user, args.role, password)
    except (PasswordError, ValueError, UserFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as err:
        print(
            f"error: cannot write {path}: {err} (run as the daemon's user, or pass --users-file)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"{path}: user {user.name} ({user.role}) saved; it can log in now")
    return EXIT_OK


def handle_users(args: argparse.Namespace) -> int:
    path = _users_file(args)
    try:
        users = read_users(path)
    except UserFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if not users:
        print(f"{path}: no users (add one with: appliance admin passwd --user NAME --role admin)")
    for user in sorted(users.values(), key=lambda u: u.name):
        print(f"{user.name}\t{user.role}")
    return EXIT_OK


def handle_remove(args: argparse.Namespace) -> int:
    path = _users_file(args)
    try:
        removed = remove_user(path, args.user)
    except (UserFileError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if not removed:
        print(f"error: {path} has no user {args.user!r}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{path}: user {args.user} removed")
    return EXIT_OK
