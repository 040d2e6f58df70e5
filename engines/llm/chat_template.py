"""Chat prompt formatting: the GGUF's own Jinja template, or a fallback for models that lack one.

The engine caches the system prompt's KV state, so it needs the rendered prompt split into a
fixed system prefix (identical for every conversation) and the per-turn rest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engines.errors import InputError, ModelFileError
from engines.llm import Message

# Gemma's turn format (Gemma 3 has no system role: the system text opens the first user turn).
# Used for Gemma GGUFs that ship without a template, such as the base (pre-trained) checkpoints.
GEMMA_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if messages[0].role == 'system' -%}"
    "{%- set first_prefix = messages[0].content + '\\n\\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set first_prefix = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_prefix if loop.first else '') -}}"
    "{{- message.content | trim -}}"
    "{{- '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

FALLBACK_TEMPLATES: dict[str, str] = {
    "gemma": GEMMA_TEMPLATE,
    "gemma2": GEMMA_TEMPLATE,
    "gemma3": GEMMA_TEMPLATE,
}

# Two first user messages that differ in their first character: what their renders share is the
# part of the prompt that does not depend on the conversation.
_PROBES = ("x", "y")


def fallback_template_for(architecture: str) -> str | None:
    return FALLBACK_TEMPLATES.get(architecture)


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # Jinja text
    origin: str  # "gguf" or "fallback:<architecture>"
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def for_model(
        cls, gguf_template: str | None, architecture: str, *, bos_token: str, eos_token: str
    ) -> ChatTemplate:
        if gguf_template:
            return cls(gguf_template, "gguf", bos_token, eos_token)
        fallback = fallback_template_for(architecture)
        if fallback is None:
            known = ", ".join(sorted(FALLBACK_TEMPLATES))
            raise ModelFileError(
                f"the model ({architecture}) has no chat template in its GGUF and none is built in "
                f"(built in: {known})",
                fix="use an instruct GGUF that carries tokenizer.chat_template",
            )
        return cls(fallback, f"fallback:{architecture}", bos_token, eos_token)

    @property
    def supports_tools(self) -> bool:
        """The template shows the model a list of tools and how to call them (Qwen2.5's does)."""
        return "tools" in self.source and "tool_call" in self.source

    def render(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] = (),
    ) -> str:
        compiled = _compile(self.source)
        extra = {"tools": list(tools)} if tools else {}
        return str(
            compiled.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        )

    def split(
        self,
        system_prompt: str,
        history: Sequence[Message],
        *,
        prefix: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> tuple[str, str]:
        """(system prefix, rest) of the rendered prompt; the prefix depends on ``system_prompt`` (and
        the tools) only (pass it when known: ``system_prefix`` renders twice)."""
        prefix = self.system_prefix(system_prompt, tools=tools) if prefix is None else prefix
        full = self.render([Message("system", system_prompt), *history], tools=tools)
        if not full.startswith(prefix):
            raise ModelFileError(
                "the chat template renders the system prompt differently from turn to turn, "
                "so its KV state cannot be reused",
                fix="use a GGUF whose chat template puts the system message first",
            )
        return prefix, full[len(prefix) :]

    def system_prefix(self, system_prompt: str, *, tools: Sequence[dict[str, Any]] = ()) -> str:
        system = Message("system", system_prompt)
        first, second = (self.render([system, Message("user", probe)], tools=tools) for probe in _PROBES)
        length = 0
        for a, b in zip(first, second, strict=False):
            if a != b:
                break
            length += 1
        return first[:length]


def validate_history(history: Sequence[Message]) -> None:
    """The engine owns the system prompt; a turn needs a conversation that ends with the user (or
    with a tool's answer to the assistant's call)."""
    if not history:
        raise InputError("the history is empty", fix="pass at least one user message")
    for index, message in enumerate(history):
        if message.role not in ("user", "assistant", "tool"):
            raise InputError(
                f"history[{index}] has role {message.role!r}; only 'user', 'assistant' and 'tool' are allowed",
                fix="leave the system prompt out: the engine adds it (create_llm(system_prompt=...))",
            )
        if message.role == "tool" and (index == 0 or history[index - 1].role not in ("assistant", "tool")):
            raise InputError(
                f"history[{index}] is a tool answer without the call before it",
                fix="put each tool answer right after the assistant message that called the tool",
            )
    if history[0].role != "user":
        raise InputError("the history must start with a user message", fix="drop leading assistant turns")
    if history[-1].role not in ("user", "tool"):
        raise InputError("the history must end with a user message", fix="append the user's new words")


_COMPILED: dict[str, Any] = {}


def _compile(source: str) -> Any:
    if source not in _COMPILED:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda value, indent=None: json.dumps(
            value, ensure_ascii=False, indent=indent
        )
        env.globals["raise_exception"] = _raise_from_template
        try:
            _COMPILED[source] = env.from_string(source)
        except TemplateError as err:
            raise ModelFileError(
                f"the model's chat template is not valid Jinja: {err}", fix="use another GGUF"
            ) from err
    return _COMPILED[source]


def _raise_from_template(message: str) -> None:
    raise InputError(f"the chat template refused the conversation: {message}")
