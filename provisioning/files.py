"""Small file helpers: atomic writes that survive an interruption or a power cut."""

from __future__ import annotations

import os
from pathlib import Path

from engines.files import atomic_write, fsync_dir

__all__ = ["atomic_write_bytes", "atomic_write_text", "fsync_dir", "give_to_service_user", "under_root"]


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    atomic_write(path, data, mode=mode)


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    atomic_write(path, text, mode=mode)


def under_root(root: Path, absolute: str | Path) -> Path:
    """``/etc/appliance`` inside ``root`` (``/`` on the device, a folder in tests or image builds)."""
    return root / str(absolute).lstrip("/")


SERVICE_USER = "appliance"


def service_user_ids(system_root: Path) -> tuple[int, int] | None:
    """(uid, gid) of the daemon's user from ``ROOT/etc/passwd``; None before the units step made it."""
    try:
        lines = under_root(system_root, "/etc/passwd").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == SERVICE_USER:
            return int(fields[2]), int(fields[3])
    return None


def give_to_service_user(path: Path, system_root: Path) -> bool:
    """Make ``path`` (a folder: everything in it, never following links) the daemon user's.

    Files written as root inside the state folder after the daemon's first start would otherwise be
    unreadable to it (systemd only re-owns StateDirectory= when the folder itself is not the user's).
    """
    ids = service_user_ids(system_root)
    if ids is None or os.geteuid() != 0 or not os.path.lexists(path):
        return False
    os.chown(path, *ids, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path, followlinks=False):
            for name in dirs + files:
                os.chown(os.path.join(folder, name), *ids, follow_symlinks=False)
    return True
