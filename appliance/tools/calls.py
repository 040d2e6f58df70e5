"""The model's tool calls, as its chat template asks for them (Qwen2.5: a JSON object with ``name``
and ``arguments`` between ``<tool_call>`` tags), checked against the declared tools."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


@dataclass(frozen=True)
class ToolParameter:
    type: str = "string"  # string | integer | number | boolean
    description: str = ""
    enum: tuple[str, ...] = ()
    required: bool = True


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


class ToolCallError(ValueError):
    """What was wrong with a call: ``kind`` is malformed, unknown_tool or bad_arguments."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def starts_a_call(text: str) -> bool | None:
    """Whether a reply beginning with ``text`` is a tool call: True, False, or None (not known yet)."""
    stripped = text.lstrip()
    if stripped.startswith(OPEN):
        return True
    return None if OPEN.startswith(stripped) else False


def parse_calls(text: str, tools: Mapping[str, Mapping[str, ToolParameter]]) -> list[ToolCall]:
    """Every call in the model's output, with its arguments checked and coerced to their types."""
    blocks = [block.strip() for block in _BLOCK.findall(text)]
    if not blocks:
        raise ToolCallError("malformed", f"no {OPEN} block in {text[:80]!r}")
    return [_parse_one(block, tools) for block in blocks]


def _parse_one(block: str, tools: Mapping[str, Mapping[str, ToolParameter]]) -> ToolCall:
    try:
        data = json.loads(block)
    except json.JSONDecodeError as err:
        raise ToolCallError("malformed", f"the tool call is not JSON ({err.msg}): {block[:80]!r}") from err
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolCallError("malformed", f"the tool call has no name: {block[:80]!r}")
    name = data["name"]
    if name not in tools:
        raise ToolCallError("unknown_tool", f"no tool is called {name[:40]!r}")
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError as err:
            raise ToolCallError("malformed", f"the arguments of {name} are not JSON") from err
    if not isinstance(arguments, dict):
        raise ToolCallError("bad_arguments", f"the arguments of {name} are not an object")
    return ToolCall(name, check_arguments(name, arguments, tools[name]))


def check_arguments(
    name: str, arguments: dict[str, Any], schema: Mapping[str, ToolParameter]
) -> dict[str, Any]:
    unknown = sorted(set(arguments) - set(schema))
    if unknown:
        raise ToolCallError("bad_arguments", f"{name} has no argument {', '.join(unknown)}")
    checked: dict[str, Any] = {}
    for key, parameter in schema.items():
        if key not in arguments or arguments[key] is None:
            if parameter.required:
                raise ToolCallError("bad_arguments", f"{name} needs the argument {key}")
            continue
        checked[key] = _coerce(name, key, arguments[key], parameter)
    return checked


def _coerce(name: str, key: str, value: Any, parameter: ToolParameter) -> Any:
    wrong = ToolCallError("bad_arguments", f"{name}: {key} must be {parameter.type}, got {str(value)[:40]!r}")
    if parameter.type == "integer":
        if isinstance(value, bool):
            raise wrong
        whole_float = isinstance(value, float) and value.is_integer()
        digits = isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()) is not None
        if not (isinstance(value, int) or whole_float or digits):
            raise wrong
        coerced: Any = int(value)
    elif parameter.type == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise wrong
        try:
            coerced = float(value)
        except ValueError as err:
            raise wrong from err
    elif parameter.type == "boolean":
        if not isinstance(value, bool):
            raise wrong
        coerced = value
    else:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise wrong
        coerced = str(value).strip()
        if len(coerced) > 200:
            raise ToolCallError("bad_arguments", f"{name}: {key} is longer than 200 characters")
    if parameter.enum and str(coerced) not in parameter.enum:
        raise ToolCallError(
            "bad_arguments",
            f"{name}: {key} must be one of {', '.join(parameter.enum)}, got {str(coerced)[:40]!r}",
        )
    return coerced
