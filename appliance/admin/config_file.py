"""Changing the configuration file from the admin page: merge, validate, write atomically.

The file is validated on its own (without environment overrides, which would hide a bad value) by
the same schema as ``appliance config check``. The file's own text is edited (``appliance.config_writer``):
comments, order and tables stay, and the file before the change is kept as ``FILE.bak``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from appliance.config import ENV_PREFIX, ConfigError, ConfigProblem, Settings, _problems
from appliance.config_moves import MOVED, MovedTwice, file_changes, moved
from appliance.config_writer import edited_toml, write_keeping_backup
from engines.files import TOMLDecodeError, loads_toml, toml_string, toml_value

HEADER = "Written by the admin page; `appliance config check FILE` validates it."


class _FileSettings(Settings):
    """The schema without environment variables: validates exactly what is in the file."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def environment_overrides(environ: dict[str, str] | None = None) -> list[str]:
    """Keys (``section.key``) that an ``APPLIANCE_SECTION__KEY`` variable sets."""
    env = os.environ if environ is None else environ
    keys = []
    for name in env:
        if name.upper().startswith(ENV_PREFIX):
            key = ".".join(name[len(ENV_PREFIX) :].lower().split("__"))
            keys.append(MOVED.get(key, key))
    return sorted(keys)


def merge_changes(
    current: dict[str, Any], changes: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """``current`` with ``changes`` applied (None removes a key); the changed keys, sorted."""
    merged = {
        section: dict(values) if isinstance(values, dict) else values for section, values in current.items()
    }
    changed = []
    for section, values in changes.items():
        target = merged.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError("changes", [ConfigProblem(section, "is not a section", target)])
        for key, value in values.items():
            if value is None:
                if key in target:
                    del target[key]
                    changed.append(f"{section}.{key}")
            elif target.get(key, _ABSENT) != value:
                target[key] = value
                changed.append(f"{section}.{key}")
        if not target:
            del merged[section]
    return merged, sorted(changed)


_ABSENT = object()


# The keys the bundle check can judge alone, when other keys of the file fail the schema.
_CHOICES = {"bundle": ("dir",), "llm": ("model",), "asr": ("model",), "tts": ("voice",)}


def validate_file_data(data: dict[str, Any], source: str) -> Settings:
    """The file's settings, checked by the schema and by what would stop the daemon from starting
    (``appliance.daemon.start_problems``: the bundle's models and voice, the persona's length)."""
    from appliance.daemon.start_problems import startup_problems

    settings = _schema_checked(data, source)
    problems = startup_problems(settings)
    if problems:
        raise ConfigError(source, problems)
    return settings


def _schema_checked(data: dict[str, Any], source: str) -> Settings:
    from appliance.daemon.start_problems import startup_problems

    try:
        return _FileSettings(**data)
    except ValidationError as err:
        problems = _problems(err)
        try:  # the bundle's choices too, so that one answer lists every problem
            chosen = {
                s: {k: v for k, v in data.get(s, {}).items() if k in keys} for s, keys in _CHOICES.items()
            }
            problems += startup_problems(_FileSettings.model_validate({s: v for s, v in chosen.items() if v}))
        except (ValidationError, AttributeError, TypeError):
            pass
        raise ConfigError(source, problems) from err


def read_file_data(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return loads_toml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, TOMLDecodeError) as err:
        raise ConfigError(str(path), [ConfigProblem("<file>", f"cannot read: {err}", None)]) from err


def to_toml(data: dict[str, Any]) -> str:
    """TOML for the settings schema's shapes: sections of scalars, strings and lists of strings."""
    lines = [f"# {HEADER}", ""]
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ValueError(f"top-level key {section!r} must be a section")
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{_toml_key(key)} = {toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_key(key: str) -> str:
    if key and all(c.isalnum() or c in "_-" for c in key):
        return key
    return toml_string(key)


def apply_changes(
    path: Path,
    changes: dict[str, dict[str, Any]],
    *,
    machine_check: Callable[[Settings], list[ConfigProblem]] | None = None,
) -> tuple[Settings, list[str]]:
    """Merge ``changes`` into the file at ``path``, validate (``machine_check``: whether the new
    settings can start on this machine, ``appliance.daemon.start_check``; without one, the bundle's choices
    alone), write; the file's settings and the changed keys."""
    from appliance.daemon.start_problems import startup_problems

    data = read_file_data(path)
    try:  # a key an older version wrote (the file, or a client's change) goes to its new place
        data, moves = moved(data)
        changes = moved(changes)[0]
    except MovedTwice as err:
        raise ConfigError(str(path), [ConfigProblem(err.key, err.message, None)]) from err
    merged, changed = merge_changes(data, changes)
    file_settings = _schema_checked(merged, "changes")
    problems = (machine_check or startup_problems)(file_settings)
    if problems:
        raise ConfigError("changes", problems)
    if not changed:
        return file_settings, changed
    edits = file_changes(moves)
    for section, values in changes.items():
        edits.setdefault(section, {}).update(values)
    text = edited_toml(path.read_text(encoding="utf-8") if path.exists() else "", edits, header=HEADER)
    # What is written must read back as the same settings (the schema alone: the rest was checked).
    if _schema_checked(loads_toml(text), str(path)) != file_settings:
        raise ValueError("the configuration did not survive a TOML round trip; nothing was written")
    write_keeping_backup(path, text)
    return file_settings, changed
