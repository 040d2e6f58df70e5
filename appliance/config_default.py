"""The default configuration as a file, written from the schema: every key with its default and its
description (``appliance config default``), so a new setting reaches it by being declared, with its
description, once. ``tests/test_defaults.py`` loads it back and finds the defaults."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from appliance.config import Settings

WIDTH = 110
HEADER = """\
# The appliance's configuration, with every key at its default: runs on a machine without a GPU,
# with the default engine bundle. Every key is optional; `appliance config check FILE` validates a
# file. Environment variables override the file: APPLIANCE_<SECTION>__<KEY>, e.g.
# APPLIANCE_LLM__MODEL=gemma-270m. What each section does: docs/configuration.md.
# (Written by `appliance config default` from the settings' own descriptions.)
"""


def default_toml() -> str:
    parts = [HEADER]
    for name, field in Settings.model_fields.items():
        section = field.default
        assert isinstance(section, BaseModel)
        parts.append(_section(name, section))
    return "\n".join(parts)


def _section(name: str, section: BaseModel) -> str:
    lines = [f"[{name}]"]
    for key, field in type(section).model_fields.items():
        value = field.get_default(call_default_factory=True)
        if _is_table_list(value, field.annotation):
            lines.append(f"# [[{name}.{key}]]: {field.description or ''} (docs/configuration.md)")
            continue
        if field.description:
            lines += textwrap.wrap(
                field.description, WIDTH, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
            )
        lines.append(f"# {key} = (unset)" if value is None else f"{key} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def _is_table_list(value: Any, annotation: Any) -> bool:
    args = getattr(annotation, "__args__", ())
    return isinstance(value, tuple) and any(isinstance(a, type) and issubclass(a, BaseModel) for a in args)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
