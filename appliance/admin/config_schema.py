"""The settings' schema as the admin page's control panel draws it: each section a form, each setting
with its description, unit, bounds, choices and default, read from the same pydantic declarations that
``appliance config check`` validates with (a new setting reaches the page by being declared once)."""

from __future__ import annotations

import enum
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from appliance.admin.schemas import SettingField, SettingsSection
from appliance.config import Settings

# A key's unit, by how its name ends (the settings' own naming rule).
_UNITS = (
    ("_ms", "ms"),
    ("_s", "s"),
    ("_hz", "Hz"),
    ("_db", "dB"),
    ("_dbfs", "dBFS"),
    ("_tokens", "tokens"),
    ("_bytes", "bytes"),
    ("_mb", "MB"),
    ("_chars", "characters"),
)


def settings_sections(live_keys: frozenset[str] = frozenset()) -> list[SettingsSection]:
    """Every section of the settings with its fields, in the order the schema declares them."""
    sections = []
    for name, field in Settings.model_fields.items():
        section_type = field.annotation
        assert isinstance(section_type, type) and issubclass(section_type, BaseModel)
        fields = [
            _field(f"{name}.{key}", key, info, live_keys) for key, info in section_type.model_fields.items()
        ]
        sections.append(SettingsSection(name=name, description=_about(section_type), fields=fields))
    return sections


def _about(section: type[BaseModel]) -> str:
    """A section's description: its class's docstring, as one line of plain text."""
    return " ".join((section.__doc__ or "").split()).replace("``", "")


def _field(dotted: str, key: str, info: FieldInfo, live_keys: frozenset[str]) -> SettingField:
    kind, choices, nullable = _kind(info.annotation)
    bounds = _bounds(info)
    return SettingField(
        key=dotted,
        kind=kind,
        description=info.description or "",
        unit=next((unit for suffix, unit in _UNITS if key.endswith(suffix)), ""),
        default=_plain(info.get_default(call_default_factory=True)),
        choices=choices,
        nullable=nullable,
        live=dotted in live_keys,
        **bounds,
    )


def _kind(annotation: Any) -> tuple[str, list[Any], bool]:
    """(integer | number | boolean | string | choice | json, the choices, may be unset)."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        nullable = len(present) < len(args)
        if len(present) == 1:
            kind, choices, _ = _kind(present[0])
            return kind, choices, nullable
        return "json", [], nullable
    if origin is Literal:
        return "choice", list(args), False
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "choice", [member.value for member in annotation], False
    if annotation is bool:
        return "boolean", [], False
    if annotation is int:
        return "integer", [], False
    if annotation is float:
        return "number", [], False
    if annotation is str or (isinstance(annotation, type) and issubclass(annotation, Path)):
        return "string", [], False
    return "json", [], False


def _bounds(info: FieldInfo) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Ge):
            found["minimum"] = rule.ge
        elif isinstance(rule, annotated_types.Gt):
            found["minimum"], found["exclusive_minimum"] = rule.gt, True
        elif isinstance(rule, annotated_types.Le):
            found["maximum"] = rule.le
        elif isinstance(rule, annotated_types.Lt):
            found["maximum"], found["exclusive_maximum"] = rule.lt, True
        elif isinstance(rule, annotated_types.MinLen):
            found["min_length"] = rule.min_length
        elif isinstance(rule, annotated_types.MaxLen):
            found["max_length"] = rule.max_length
        elif hasattr(rule, "pattern") and isinstance(rule.pattern, str):
            found["pattern"] = rule.pattern
    return found


def _plain(value: Any) -> Any:
    """A default as JSON shows it."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value
