"""Step 5: set the admin page's password (scrypt hash in a mode-0600 file).

The password never appears on the command line (it would show in ``ps`` and the shell history): it
is read from a file (``--admin-password-file``, e.g. on the media), from stdin
(``--admin-password-stdin``), or typed twice at a prompt.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

from appliance.auth.passwords import PasswordError, PasswordFileError, read_password_file, write_password_file
from provisioning.context import ProvisioningContext
from provisioning.files import give_to_service_user
from provisioning.framework import StepFailed, StepOutcome

FIX_NO_SOURCE = "pass --admin-password-stdin (and pipe it in), or --admin-password-file FILE, or run the tool in a terminal"


def read_new_password(
    *, from_file: Path | None, from_stdin: bool, interactive: bool, prompt_twice: bool = True
) -> str:
    if from_file is not None:
        try:
            return from_file.read_text(encoding="utf-8").splitlines()[0] if from_file.stat().st_size else ""
        except OSError as err:
            raise StepFailed(
                f"cannot read the admin password file {from_file}: {err}", fix=FIX_NO_SOURCE
            ) from err
    if from_stdin:
        line = sys.stdin.readline()
        return line.rstrip("\r\n")
    if interactive and sys.stdin.isatty():
        first = getpass.getpass("New admin password: ")
        if prompt_twice and getpass.getpass("Again: ") != first:
            raise StepFailed("the two passwords differ", fix="run the same command again and type it twice")
        return first
    raise StepFailed("no admin password given", fix=FIX_NO_SOURCE)


def set_password(path: Path, password: str) -> None:
    try:
        write_password_file(path, password)
    except PasswordError as err:
        raise StepFailed(
            f"admin password refused: {err}", fix="choose a longer password and run again"
        ) from err


def run_admin_password(ctx: ProvisioningContext) -> StepOutcome:
    password = read_new_password(
        from_file=ctx.password_file_in, from_stdin=ctx.password_stdin, interactive=ctx.interactive
    )
    set_password(ctx.password_file, password)
    give_to_service_user(ctx.password_file, ctx.system_root)  # the admin page reads it
    return StepOutcome(
        f"admin password set ({ctx.password_file}, scrypt, mode 0600)",
        {"path": str(ctx.password_file), "kdf": "scrypt", "mode": "0600"},
    )


def password_still_valid(ctx: ProvisioningContext) -> bool:
    try:
        read_password_file(ctx.password_file)
    except PasswordFileError:
        return False
    return True
