"""Reading a file that a setting names (a facts file, the echo room, the accounts and password files).

Such a path comes from whoever may write the configuration, and the admin page lets a remote admin do
that: it may name a 400 MB log, ``/dev/zero``, a named pipe nobody writes to, or another setting's
secret. So every such file is read here, one way: opened without blocking (a pipe or a device is
refused, never waited on), only a regular file, at most its kind's size (checked before a byte is read,
and again while reading, for a file that grows), and a ``MemoryError`` is "this file is not usable",
never the daemon's end.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from engines.errors import InputError

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class FileKind:
    """What a file is for (said in every message) and the most it may hold."""

    what: str
    max_bytes: int


FACTS = FileKind("facts file", 1 * MIB)  # about 250,000 words: a site's facts are a few pages
ECHO_ROOM = FileKind("echo room file", 1 * MIB)  # a kept filter is 41 KB
ACCOUNTS = FileKind("admin users file", 1 * MIB)
SECRET = FileKind("password or token file", 64 * KIB)


class SettingFileError(InputError, OSError):
    """A file a setting names cannot be used: the message names the file, the problem and the fix.
    An ``OSError`` too, so that callers which already treat an unreadable file as such keep doing so."""


def read_setting_file(path: Path, kind: FileKind) -> bytes:
    """The bytes of ``path``, a regular file of at most ``kind.max_bytes``. Raises FileNotFoundError
    when it does not exist, else SettingFileError naming the problem and the fix."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise SettingFileError(
            f"cannot open the {kind.what} {path}: {err.strerror}", fix="check the path and its permissions"
        ) from err
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise SettingFileError(
                f"the {kind.what} {path} is {_not_regular(info.st_mode)}, not a regular file",
                fix="name an ordinary file",
            )
        if info.st_size > kind.max_bytes:
            raise _too_large(path, kind, info.st_size)
        chunks = []
        left = kind.max_bytes + 1
        while left > 0:
            chunk = os.read(descriptor, min(left, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except MemoryError:
        raise SettingFileError(
            f"the {kind.what} {path} could not be read: the machine ran out of memory",
            fix="name a smaller file",
        ) from None
    finally:
        os.close(descriptor)
    if len(data) > kind.max_bytes:
        raise _too_large(path, kind, len(data))
    return data


def read_setting_text(path: Path, kind: FileKind, *, encoding: str = "utf-8") -> str:
    """``read_setting_file`` decoded; a file that is not text raises SettingFileError."""
    data = read_setting_file(path, kind)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        raise SettingFileError(
            f"the {kind.what} {path} is not {encoding} text (byte {err.start})",
            fix=f"write it as {encoding} text",
        ) from None


def same_file(one: Path, other: Path) -> bool:
    """Whether two paths lead to one file (through links too); False when either does not exist."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _too_large(path: Path, kind: FileKind, size: int) -> SettingFileError:
    return SettingFileError(
        f"the {kind.what} {path} holds {size:,} bytes, more than the {kind.max_bytes:,} it may",
        fix=f"name the right file, or cut it below {kind.max_bytes // KIB:,} KiB",
    )


def _not_regular(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"
