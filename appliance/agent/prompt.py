"""Who the agent is: its persona, abilities and tools made into the system prompt, and the site's facts
put before a question's words.

What it remembers of a conversation is ``appliance.pipeline.conversation``; what it says when a turn
fails, ``conversation.fallback_reply``."""

from __future__ import annotations

import json
from typing import Literal

from appliance.agent.params import AgentParams, ToolConfig
from appliance.pipeline.conversation import capitalised
from engines.llm import Message

FactsPlace = Literal["none", "prompt", "question"]

NOT_ABLE = "You cannot set reminders, book appointments, send messages or control machines; say so if asked."
# The facts a question is given, before its words in the user's message (a large facts file).
FACTS_HEADER = "Site facts for this question:"
QUESTION_HEADER = "Question:"


def abilities(agent: AgentParams, *, tools_offered: bool = True, facts: FactsPlace = "none") -> str:
    """What the device can really do, from its tools (when the model is shown them): so the model
    stops offering what it cannot, and calls a tool instead of guessing what only a tool knows.
    (Small models follow this framing far better than a bare list of tools: measured with
    ``python -m bench tools``.) How it answers from the site's facts follows them (``facts_rule``)."""
    live = offered_tools(agent, has_facts=facts != "none")
    if live and tools_offered:
        known = "; ".join(tool.description.rstrip(".") for tool in live)
        return (
            f"{capitalised(known)} come only from your tools: for a question about these, reply with "
            f"only a tool call, for example {_example_call(live[0])}, never a guess. For anything else, "
            f"such as a greeting, answer without a tool. {NOT_ABLE}"
        )
    if facts == "none":
        return f"You answer from what you know and cannot look anything up. {NOT_ABLE}"
    return NOT_ABLE


def offered_tools(agent: AgentParams, *, has_facts: bool) -> list[ToolConfig]:
    """The tools the model is offered as calls: never the facts (they are in its prompt), and not the
    device's clock when the site has facts (it comes with each question, ToolBox.for_question)."""
    skipped = ("facts", "device") if has_facts else ("facts",)
    return [tool for tool in agent.tools if tool.kind not in skipped]


# agent.answers = "select": the model names the sentence, the appliance speaks it (tools/site_sentences.py).
SELECT_RULE = (
    "These are the site facts, one numbered sentence a line. For a question about the site or what you "
    "can do, reply with only the number of the sentence that answers it, in brackets, like [3], and "
    "nothing else; if no sentence answers it, reply [0]. For anything else, such as a greeting, answer in "
    "one short sentence and state no figure."
)


def facts_rule(agent: AgentParams, facts: FactsPlace, *, select: bool = False) -> str:
    """How the model answers from the site's facts. (Measured with Qwen 1.5B: said next to the facts,
    after the tools, it keeps the model from declining a tool's answer, which a rule inside the
    abilities made it do.) ``select``: it chooses the facts' numbered sentences instead."""
    if select and facts == "prompt":
        return SELECT_RULE
    where = (
        "These are the site facts" if facts == "prompt" else "A question about the site comes with site facts"
    )
    return (
        f"{where}. Answer other questions about the site only from them or a tool's data, with only what "
        "was asked, never a figure they do not give; if neither says, reply exactly: "
        f'"{agent.not_known_reply}"'
    )


def _example_call(tool: ToolConfig) -> str:
    examples = {"integer": 2, "number": 1.5, "boolean": True}
    arguments = {
        key: (p.enum[0] if p.enum else examples.get(p.type, "...")) for key, p in tool.parameters.items()
    }
    return f"<tool_call>{json.dumps({'name': tool.name, 'arguments': arguments})}</tool_call>"


def system_prompt(
    agent: AgentParams,
    *,
    tools_offered: bool = True,
    facts: FactsPlace = "none",
    facts_text: str = "",
    select: bool = False,
) -> str:
    """The persona with the site filled in (``{site_name}``, ``{device_id}``, ``{abilities}``);
    ``tools_offered``: the model's chat template can show it the tools; ``facts``: where the site's
    facts reach the model (``prompt``: ``facts_text`` follows the persona; ``question``: each
    question carries the sections that match it)."""
    persona = (
        agent.persona.replace("{site_name}", agent.site_name)
        .replace("{device_id}", agent.device_id)
        .replace("{abilities}", abilities(agent, tools_offered=tools_offered, facts=facts))
    )
    if facts == "none":
        return persona
    rule = facts_rule(agent, facts, select=select)
    return f"{persona}\n\n{rule}\n{facts_text}" if facts == "prompt" else f"{persona}\n\n{rule}"


def with_facts(messages: list[Message], facts_text: str, *, now: str = "") -> list[Message]:
    """``messages`` with ``facts_text`` (the facts a large file gives this question) and ``now`` (the
    device's clock) before the words of the last (the person's) message. The words stay last, where
    the turn's end is judged."""
    if not (facts_text or now) or not messages or messages[-1].role != "user":
        return messages
    last = messages[-1]
    head = "\n".join(part for part in (now, f"{FACTS_HEADER}\n{facts_text}" if facts_text else "") if part)
    return [*messages[:-1], Message("user", f"{head}\n\n{QUESTION_HEADER} {last.content}")]
