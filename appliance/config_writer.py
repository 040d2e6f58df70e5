"""Changes to a configuration file, written the way a person wrote it.

Every write (the admin page, ``appliance calibrate``, provisioning's site configuration) edits the file's
own text through a round-trip TOML parser (tomlkit): comments, the order of keys and sections, and
tables of tables (``[[agent.tools]]``) stay as they were; only the changed keys change. The file before
the change is kept beside it as ``FILE.bak``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.files import atomic_write

BACKUP_SUFFIX = ".bak"


def edited_toml(text: str, changes: dict[str, dict[str, Any]], *, header: str = "") -> str:
    """``text`` with ``changes`` (section -> key -> value; None removes the key) applied; a section
    left without keys or comments goes. ``header`` (comment lines) starts a file that had no text. ValueError when a
    top-level name is not a section, or the text is not TOML."""
    import tomlkit  # here: what only writes need stays out of the daemon's and the checks' imports
    from tomlkit.exceptions import TOMLKitError
    from tomlkit.items import Table

    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as err:
        raise ValueError(f"not TOML: {err}") from err
    if not text.strip():
        for line in header.splitlines():
            doc.add(tomlkit.comment(line))
    for section, values in changes.items():
        if not isinstance(values, dict):
            raise ValueError(f"top-level key {section!r} must be a section (a table)")
        table = doc.get(section)
        if table is None:
            if all(v is None for v in values.values()):
                continue
            table = tomlkit.table()
            doc[section] = table
        elif not isinstance(table, Table):
            raise ValueError(f"top-level key {section!r} must be a section (a table)")
        for key, value in values.items():
            if value is None:
                table.pop(key, None)
            elif key not in table or _plain(table[key]) != value:
                table[key] = _item(value)
        if not table and not _has_comments(table):  # a person's comment stays, under its header
            del doc[section]
    return tomlkit.dumps(doc)


def _has_comments(table: Any) -> bool:
    from tomlkit.items import Comment

    return any(isinstance(item, Comment) for _key, item in table.value.body)


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


def _item(value: Any) -> Any:
    """A list of tables as ``[[section.key]]`` tables (as a person writes tools), the rest as it is."""
    import tomlkit
    from tomlkit.items import AoT

    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        tables = AoT([])
        for entry in value:
            table = tomlkit.table()
            table.update(entry)
            tables.append(table)
        return tables
    return value


def write_keeping_backup(path: Path, text: str, *, mode: int | None = None) -> Path | None:
    """``text`` as ``path`` (atomically), the file it replaces kept as ``path.bak``; the backup's path."""
    backup = None
    if path.is_file():
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        atomic_write(backup, path.read_bytes(), mode=path.stat().st_mode & 0o777)
    atomic_write(path, text, mode=mode)
    return backup
