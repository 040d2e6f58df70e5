"""The agent: who it is (persona -> system prompt) and what it remembers of a conversation.

What it says when a turn fails is ``agent.fallback_reply``, carried to the turn by the session
configuration (``appliance.engine_set.session_config``)."""

from __future__ import annotations

import json

from appliance.config import AgentConfig, ToolConfig
from appliance.pipeline.params import HistoryParams
from engines.llm import Message

NOT_ABLE = "You cannot set reminders, book appointments, send messages or control machines; say so if asked."


def abilities(agent: AgentConfig, *, tools_offered: bool = True) -> str:
    """What the device can really do, from its tools (when the model is shown them): so the model
    stops offering what it cannot, and calls a tool instead of guessing what only a tool knows.
    (Small models follow this framing far better than a bare list of tools: measured with
    ``python -m bench tools``.)"""
    if not agent.tools or not tools_offered:
        return f"You answer from what you know and cannot look anything up. {NOT_ABLE}"
    known = "; ".join(tool.description.rstrip(".") for tool in agent.tools)
    return (
        f"You know nothing about this site yourself: {known} come only from your tools. For a question "
        f"about these, reply with only a tool call, for example {_example_call(agent.tools[0])}, never a "
        f"guess. For anything else, such as a greeting, answer without a tool. {NOT_ABLE}"
    )


def _example_call(tool: ToolConfig) -> str:
    examples = {"integer": 2, "number": 1.5, "boolean": True}
    if tool.kind == "facts":
        arguments: dict[str, object] = {"question": "opening hours"}
    else:
        arguments = {
            key: (p.enum[0] if p.enum else examples.get(p.type, "...")) for key, p in tool.parameters.items()
        }
    return f"<tool_call>{json.dumps({'name': tool.name, 'arguments': arguments})}</tool_call>"


def system_prompt(agent: AgentConfig, *, tools_offered: bool = True) -> str:
    """The persona with the site filled in (``{site_name}``, ``{device_id}``, ``{abilities}``);
    ``tools_offered``: the model's chat template can show it the tools."""
    return (
        agent.persona.replace("{site_name}", agent.site_name)
        .replace("{device_id}", agent.device_id)
        .replace("{abilities}", abilities(agent, tools_offered=tools_offered))
    )


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


class Conversation:
    """The messages of one session (without the system prompt), bounded to ``max_messages``."""

    def __init__(self, max_messages: int = HistoryParams().max_history_messages) -> None:
        if max_messages < 2:
            raise ValueError(f"max_messages must be at least 2, got {max_messages}")
        self.max_messages = max_messages
        self._messages: list[Message] = []

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def with_user(self, text: str) -> list[Message]:
        """The history as the LLM should see it with ``text`` as the next user message (its first
        letter capitalised: Whisper writes "the birch canoe" for part of an utterance and "The birch
        canoe slid." for all of it, and a prefilled prompt must begin as the final one does)."""
        messages = list(self._messages)
        if messages and messages[-1].role == "user":
            # The previous question got no audible answer (barge-in before playback): one question.
            messages[-1] = Message("user", f"{messages[-1].content} {text.strip()}".strip())
        else:
            messages.append(Message("user", _capitalised(text.strip())))
        return messages

    def commit(self, user_text: str, assistant_text: str) -> None:
        """Record a finished turn: the question, and the part of the answer that was played."""
        self._messages = self.with_user(user_text)
        if assistant_text.strip():
            self._messages.append(Message("assistant", assistant_text.strip()))
        overflow = len(self._messages) - self.max_messages
        if overflow > 0:
            self._messages = self._messages[overflow:]
        while self._messages and self._messages[0].role != "user":
            self._messages.pop(0)
