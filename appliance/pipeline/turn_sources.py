"""What a turn's reply may state: the facts its question is given (in the system prompt already, or
before its words) and the sources its figures are checked against (``agent.grounding``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.grounding import Sources
from engines.llm import Message

if TYPE_CHECKING:
    from appliance.tools import ToolBox
    from appliance.tools.facts import Fact

# A reply repeating this many words of the system prompt in a row reads it out ("You are a helpful
# voice assistant on ..."); fewer may fairly say what the device is.
PERSONA_RUN_WORDS = 10


@dataclass(frozen=True)
class Grounding:
    """``agent.grounding`` for a turn without tools: a figure may come only from the conversation and
    these (``agent.allowed_figures``, the site's name); a clause with another is not said."""

    allowed: tuple[str, ...] = ()
    not_known_reply: str = "Sorry, I don't have that information here."


def sources_for(
    messages: list[Message],
    transcript: str,
    *,
    tools: ToolBox | None,
    grounding: Grounding | None,
    system_prompt: str,
    selects: bool,
) -> tuple[list[Message], Sources, list[Fact] | None]:
    """The messages the model is given for ``transcript``, the sources its reply is checked against,
    and the site's facts it was given (None without tools). ``selects``: the model names one of the
    facts' sentences, so its free text may state none of their figures."""
    checked = tools.agent.grounding if tools is not None else grounding is not None
    sources = Sources(check_figures=checked)
    if tools is not None and tools.facts_in_prompt:  # a reply may repeat the facts, not the rest
        system_prompt = system_prompt.replace(tools.facts_prompt_text(), "")
    sources.add_internal(system_prompt, run=PERSONA_RUN_WORDS)
    if tools is None:
        if grounding is not None:  # the conversation and the allowed figures are the only sources
            sources.add_all((message.content for message in messages), said=True)
            for allowed in grounding.allowed:
                sources.add(allowed, any_subject=True)
        return messages, sources, None
    given, facts = tools.for_question(messages, transcript)
    for text in tools.instructions():
        sources.add_internal(text)
    if sources.check_figures:
        for fact in [] if selects else facts:
            sources.add(fact.text, title=fact.title)
        sources.add_all((message.content for message in messages), said=True)  # before the facts
        for message in messages:
            if message.role == "user":
                sources.ask(message.content)
        sources.add(tools.clock_line(), title="time date day clock", moment=True)
        for allowed in (*tools.agent.allowed_figures, tools.agent.site_name, tools.agent.device_id):
            sources.add(allowed, any_subject=True)
    return given, sources, facts
