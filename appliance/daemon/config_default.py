"""The default configuration as a file, written from the schema: every key with its default and its
description (``appliance config default``), so a new setting reaches it by being declared, with its
description, once. ``tests/test_defaults.py`` loads it back and finds the defaults."""

from __future__ import annotations

import textwrap
from typing import Any

from pydantic import BaseModel

from appliance.config import Settings
from engines.files import toml_value

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
    about = " ".join((type(section).__doc__ or "").split()).replace("``", "`")
    lines = [f"# ## {line}" for line in textwrap.wrap(about, WIDTH - 5, break_on_hyphens=False)]
    lines.append(f"[{name}]")
    for key, field in type(section).model_fields.items():
        value = field.get_default(call_default_factory=True)
        if _is_table_list(value, field.annotation):
            lines.append(f"# [[{name}.{key}]]: {field.description or ''} (docs/configuration.md)")
            continue
        if field.description:
            lines += textwrap.wrap(
                field.description, WIDTH, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
            )
        lines.append(f"# {key} = (unset)" if value is None else f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def _is_table_list(value: Any, annotation: Any) -> bool:
    args = getattr(annotation, "__args__", ())
    return isinstance(value, tuple) and any(isinstance(a, type) and issubclass(a, BaseModel) for a in args)
