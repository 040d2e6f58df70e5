"""The admin password: scrypt hashes in a file only the daemon's user can read.

A hash is stored as one line in the PHC string format, for example
``$scrypt$ln=15,r=8,p=1$<salt>$<hash>`` (base64 without padding), so the cost can be raised later
and older hashes still verify (:func:`needs_rehash` says when to re-hash after a good login).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from engines.files import atomic_write
from engines.setting_files import SECRET, read_setting_text

MIN_PASSWORD_CHARS = 10
MAX_PASSWORD_CHARS = 1024
SALT_BYTES = 16
HASH_BYTES = 32
FILE_MODE = 0o600


class PasswordError(ValueError):
    """A password that does not meet the policy."""


class PasswordFileError(Exception):
    """A password file that is missing, unreadable or not a password hash."""


@dataclass(frozen=True)
class ScryptParams:
    log2_n: int = 15  # N = 32768: about 32 MiB and 0.1 s per hash on one core
    r: int = 8
    p: int = 1

    @property
    def max_memory_bytes(self) -> int:
        return 2 * 128 * self.r * (2**self.log2_n) * self.p


DEFAULT_PARAMS = ScryptParams()


def check_new_password(password: str) -> None:
    """Raise PasswordError naming the rule a new admin password breaks."""
    if not isinstance(password, str) or not password.strip():
        raise PasswordError("the admin password is empty; choose one of at least 10 characters")
    if len(password) < MIN_PASSWORD_CHARS:
        raise PasswordError(
            f"the admin password has {len(password)} characters; use at least {MIN_PASSWORD_CHARS}"
        )
    if len(password) > MAX_PASSWORD_CHARS:
        raise PasswordError(f"the admin password is longer than {MAX_PASSWORD_CHARS} characters")
    if password != password.strip():
        raise PasswordError("the admin password starts or ends with a space; remove it")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def _scrypt(password: str, salt: bytes, params: ScryptParams, length: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=2**params.log2_n,
        r=params.r,
        p=params.p,
        maxmem=params.max_memory_bytes + 1024 * 1024,
        dklen=length,
    )


def hash_password(password: str, params: ScryptParams = DEFAULT_PARAMS) -> str:
    """A new salted scrypt hash of ``password`` in PHC string format."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(password, salt, params, HASH_BYTES)
    return f"$scrypt$ln={params.log2_n},r={params.r},p={params.p}${_b64(salt)}${_b64(digest)}"


def _parse(encoded: str) -> tuple[ScryptParams, bytes, bytes]:
    parts = encoded.strip().split("$")
    if len(parts) != 5 or parts[0] != "" or parts[1] != "scrypt":
        raise PasswordFileError("not a scrypt password hash ($scrypt$ln=..,r=..,p=..$salt$hash)")
    try:
        fields = dict(item.split("=", 1) for item in parts[2].split(","))
        params = ScryptParams(int(fields["ln"]), int(fields["r"]), int(fields["p"]))
        salt, digest = _unb64(parts[3]), _unb64(parts[4])
    except (KeyError, ValueError, binascii.Error) as err:
        raise PasswordFileError(f"malformed scrypt password hash: {err}") from err
    if not (1 <= params.log2_n <= 22 and 1 <= params.r <= 64 and 1 <= params.p <= 16):
        raise PasswordFileError(f"scrypt parameters out of range: {params}")
    if not salt or not digest:
        raise PasswordFileError("malformed scrypt password hash: empty salt or hash")
    return params, salt, digest


def verify_password(password: str, encoded: str) -> bool:
    """True when ``password`` matches; compares in constant time. Raises on a malformed hash."""
    params, salt, expected = _parse(encoded)
    actual = _scrypt(password, salt, params, len(expected))
    return hmac.compare_digest(actual, expected)


def needs_rehash(encoded: str, params: ScryptParams = DEFAULT_PARAMS) -> bool:
    current, _, digest = _parse(encoded)
    return current != params or len(digest) != HASH_BYTES


def write_password_file(path: Path, password: str, params: ScryptParams = DEFAULT_PARAMS) -> None:
    """Check the policy, hash, and replace ``path`` atomically with a mode 0600 file."""
    check_new_password(password)
    write_hash_file(path, hash_password(password, params))


def write_hash_file(path: Path, encoded: str) -> None:
    _parse(encoded)
    atomic_write(path, encoded + "\n", mode=FILE_MODE)


def read_password_file(path: Path) -> str:
    try:
        encoded = read_setting_text(path, SECRET, encoding="ascii").strip()
    except FileNotFoundError as err:
        raise PasswordFileError(
            f"no admin password file at {path}; set one with: python -m provisioning set-password"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise PasswordFileError(f"cannot read the admin password file {path}: {err}") from err
    _parse(encoded)
    return encoded


def check_password_file(path: Path, password: str) -> bool:
    """True when ``password`` is the admin password stored at ``path``."""
    return verify_password(password, read_password_file(path))
