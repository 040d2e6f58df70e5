"""Files the appliance, provisioning and the bundle build all write and read the same way: atomic
replacement that survives an interruption or a power cut, and TOML on Python 3.10 and 3.11."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (JetPack 6)
    import tomli as tomllib

__all__ = [
    "TOMLDecodeError",
    "atomic_write",
    "fsync_dir",
    "loads_toml",
    "remove_stale_temporaries",
    "toml_string",
    "toml_value",
]

TOMLDecodeError = tomllib.TOMLDecodeError


def loads_toml(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


def toml_value(value: Any) -> str:
    """A value of the settings' shapes (booleans, numbers, strings and paths, lists and tables of them)
    as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} cannot be written to TOML")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return toml_string(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table: call.transfer_targets
        return "{" + ", ".join(f"{toml_string(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write a {type(value).__name__} to TOML: {value!r}")


_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string: quotes and backslashes escaped, control characters as escapes."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(
        c if c >= " " and c != "\x7f" else _SHORT_ESCAPES.get(c, f"\\u{ord(c):04x}") for c in escaped
    )
    return f'"{escaped}"'


def atomic_write(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Write a temporary file beside ``path``, fsync it, rename it over ``path``, fsync the folder.

    The new file gets ``mode``, else the old file's mode, else 0644; it never exists half-written or
    with a wider mode than asked."""
    if mode is None:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


STALE_AFTER_S = 300.0


def remove_stale_temporaries(path: Path, *, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Delete what an interrupted write of ``path`` left behind (``.NAME.*.tmp`` beside it, untouched
    for ``older_than_s``: a writer still at work is never that slow); the paths removed."""
    removed = []
    cutoff = time.time() - older_than_s
    for leftover in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if leftover.stat().st_mtime < cutoff:
                leftover.unlink()
                removed.append(leftover)
        except OSError:
            continue  # gone already, or not ours to remove
    return removed


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
