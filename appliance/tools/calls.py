"""The model's tool calls, as its chat template asks for them (Qwen2.5: a JSON object with ``name``
and ``arguments`` between ``<tool_call>`` tags), checked against the declared tools."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# How small models start a call besides the template's own tags: the tools list's tag, a JSON code
# block, or the JSON itself (with the doubled braces of the template's own example, which Qwen2.5's
# template renders literally).
STARTS = (OPEN, "<tools>", "```json", "```", "{")
_NAMED = re.compile(r'\{\s*"name"\s*:')


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
    """What was wrong with a call: ``kind`` is no_call (nothing named), malformed (not JSON),
    unknown_tool or bad_arguments."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def as_template_text(calls: list[ToolCall]) -> str:
    """The calls as the chat template writes them, for the conversation: a small model that reads its
    own call back in another format (a code block, doubled braces) calls again instead of answering."""
    return "\n".join(
        f"{OPEN}\n{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}\n{CLOSE}"
        for c in calls
    )


def starts_a_call(text: str) -> bool | None:
    """Whether a reply beginning with ``text`` is a tool call: True, False, or None (not known yet)."""
    stripped = text.lstrip()
    if any(stripped.startswith(start) for start in STARTS):
        return True
    return None if any(start.startswith(stripped) for start in STARTS) else False


_NAME_VALUE = re.compile(r'"name"\s*:\s*"([^"\\]{1,64})"')


def called_name(text: str) -> str | None:
    """The tool's name in the beginning of a call, once it is written out whole; None before."""
    match = _NAME_VALUE.search(text)
    return match.group(1) if match else None


def parse_calls(text: str, tools: Mapping[str, Mapping[str, ToolParameter]]) -> list[ToolCall]:
    """Every call in the model's output, with its arguments checked and coerced to their types."""
    body = text.replace("{{", "{")  # the doubled braces copied from the template's example
    decoder = json.JSONDecoder()
    calls, end = [], 0
    for match in _NAMED.finditer(body):
        if match.start() < end:
            continue  # an object inside the call before (an argument that has a "name")
        try:
            data, end = decoder.raw_decode(body, match.start())
        except json.JSONDecodeError as err:
            raise ToolCallError("malformed", f"the tool call is not JSON ({err.msg}): {text[:80]!r}") from err
        calls.append(_parse_one(data, tools))
    if not calls:
        raise ToolCallError("no_call", f"no tool call with a name in {text[:80]!r}")
    return calls


def _parse_one(data: object, tools: Mapping[str, Mapping[str, ToolParameter]]) -> ToolCall:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolCallError("malformed", f"the tool call has no name: {str(data)[:80]!r}")
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
