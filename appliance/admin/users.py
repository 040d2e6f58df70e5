"""Admin page accounts: user name, role and scrypt hash, in a mode 0600 file.

One line per user: ``NAME ROLE HASH`` (hash from :mod:`appliance.auth.passwords`). The admin password
that provisioning sets (``admin.password_file``, a single hash) is the account ``admin`` with the admin
role, unless the users file has its own ``admin`` line. There is no default password: with neither
file, nobody can log in.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from appliance.admin.schemas import Role
from appliance.auth.passwords import (
    PasswordFileError,
    check_new_password,
    hash_password,
    read_password_file,
    verify_password,
)
from engines.files import atomic_write
from engines.setting_files import ACCOUNTS, read_setting_text

log = logging.getLogger(__name__)

ROLES: tuple[Role, ...] = ("viewer", "admin")
PROVISIONED_USER = "admin"
USERNAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
USERS_FILE_MODE = 0o600
# Verifying costs ~32 MiB and ~0.1 s of one core: at most this many at once.
MAX_CONCURRENT_VERIFICATIONS = 2


class UserFileError(Exception):
    """A users file that cannot be read or has a malformed line."""


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    password_hash: str


def check_username(name: str) -> None:
    if not USERNAME_PATTERN.match(name):
        raise ValueError(
            f"user name {name!r} is not allowed; use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def check_role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise ValueError(f"role {role!r} is unknown; use one of: {', '.join(ROLES)}")


def read_users(path: Path) -> dict[str, User]:
    """The users in ``path`` (an absent file has none)."""
    try:
        text = read_setting_text(path, ACCOUNTS)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise UserFileError(f"cannot read the admin users file {path}: {err}") from err
    users: dict[str, User] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        try:
            if len(fields) != 3:
                raise ValueError("expected: NAME ROLE HASH")
            check_username(fields[0])
            users[fields[0]] = User(fields[0], check_role(fields[1]), fields[2])
        except ValueError as err:
            raise UserFileError(
                f"{path} line {number}: {err} (fix: appliance admin passwd --user NAME --role ROLE)"
            ) from err
    return users


def write_users(path: Path, users: dict[str, User]) -> None:
    lines = ["# Admin page users: NAME ROLE HASH. Change with `appliance admin passwd`."]
    lines += [f"{u.name} {u.role} {u.password_hash}" for u in sorted(users.values(), key=lambda u: u.name)]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n".join(lines) + "\n", mode=USERS_FILE_MODE)
    if os.geteuid() == 0:
        # Root (a technician with sudo) writing into the daemon's state folder: the file must stay
        # readable by the daemon's own user, who owns that folder.
        folder = path.parent.stat()
        os.chown(path, folder.st_uid, folder.st_gid)


def set_password(path: Path, name: str, role: str, password: str) -> User:
    """Add or change one user (password policy of :func:`check_new_password`)."""
    check_username(name)
    checked_role = check_role(role)
    check_new_password(password)
    users = read_users(path)
    users[name] = User(name, checked_role, hash_password(password))
    write_users(path, users)
    return users[name]


def remove_user(path: Path, name: str) -> bool:
    users = read_users(path)
    if users.pop(name, None) is None:
        return False
    write_users(path, users)
    return True


def grant_of(user: User) -> str:
    """What a login was granted: the user's role and password hash, as a digest (a session keeps
    it, not the hash); any change of either gives another."""
    return hashlib.sha256(f"{user.name}\n{user.role}\n{user.password_hash}".encode()).hexdigest()


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    try:
        found = path.stat() if path is not None else None
    except OSError:
        return None
    return None if found is None else (found.st_ino, found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=1)
def _dummy_hash() -> str:
    """Checked against for unknown names, so they cost as much as known ones."""
    return hash_password("not-a-password-of-anyone")


class UserDirectory:
    """Checks logins against the users file and the provisioned admin password (re-read each time,
    so `appliance admin passwd` takes effect without a restart)."""

    def __init__(self, users_file: Path, password_file: Path | None = None) -> None:
        self.users_file = users_file
        self.password_file = password_file
        self._verifications = threading.BoundedSemaphore(MAX_CONCURRENT_VERIFICATIONS)
        self._grants: tuple[object, dict[str, str]] | None = None  # (the files' stamps, grant per user)
        self._grants_lock = threading.Lock()

    def users(self) -> dict[str, User]:
        users: dict[str, User] = {}
        if self.password_file is not None and self.password_file.exists():
            try:
                users[PROVISIONED_USER] = User(
                    PROVISIONED_USER, "admin", read_password_file(self.password_file)
                )
            except PasswordFileError as err:
                log.error("ignoring the provisioned admin password: %s", err)
        users.update(read_users(self.users_file))
        return users

    def grant(self, name: str) -> str | None:
        """The current grant of user ``name`` (``grant_of``), None when there is no such user or the
        files cannot be read. Checked on every request, so re-read only when a file changed."""
        stamps = (_stamp(self.users_file), _stamp(self.password_file))
        with self._grants_lock:
            if self._grants is None or self._grants[0] != stamps:
                try:
                    grants = {n: grant_of(u) for n, u in self.users().items()}
                except UserFileError as err:
                    log.error("%s", err)
                    grants = {}
                self._grants = (stamps, grants)
            return self._grants[1].get(name)

    def authenticate(self, name: str, password: str) -> User | None:
        """The user when ``password`` is right; None otherwise (same cost for unknown names)."""
        try:
            user = self.users().get(name)
        except UserFileError as err:
            log.error("%s", err)
            user = None
        with self._verifications:
            try:
                ok = verify_password(password, user.password_hash if user else _dummy_hash())
            except PasswordFileError as err:
                log.error("the password hash of user %s is malformed: %s", name, err)
                return None
        return user if ok and user is not None else None
