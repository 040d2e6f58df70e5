"""One round of tool calls in a turn: the calls the model wrote, checked and run, as messages for the
model's next round, or the sentence to say instead (a call refused, a tool failed, a transfer or a
goodbye, which end the reply with a fixed sentence)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from appliance.tools import ToolBox, ToolCall, ToolCallError, parse_calls
from appliance.trace.record import TurnTrace
from engines.llm import Message

log = logging.getLogger(__name__)


@dataclass
class ToolRound:
    calls: list[ToolCall] = field(default_factory=list)
    answers: list[Message] = field(default_factory=list)  # the tools' answers, for the model
    sources: list[str] = field(default_factory=list)  # ... which a reply's figures may come from
    say: str | None = None  # said instead of a reply; the turn ends with it
    transfer_to: str | None = None  # a transfer the reply promised


async def run_tool_calls(
    tools: ToolBox, call_text: str, calls_left: int, transcript: str, trace: TurnTrace
) -> ToolRound:
    """Run the calls in ``call_text`` (at most ``calls_left``) for the question ``transcript``; each
    call, refusal and failure is noted in ``trace``."""
    turn_id = trace.turn_id
    try:
        calls = parse_calls(call_text, tools.schemas())
    except ToolCallError as err:
        repaired = tools.facts_lookup(transcript) if err.kind == "no_call" else None
        if repaired is None:
            log.error("turn %s: the model's tool call was refused (%s): %s", turn_id, err.kind, err)
            trace.tool_calls.append(f"refused:{err.kind}")
            return ToolRound(say=tools.agent.tool_misunderstood_reply)
        log.warning(
            "turn %s: unreadable tool call (%s); the facts are searched for the question", turn_id, err
        )
        trace.tool_calls.append("repaired:no_call")
        calls = [repaired]
    if len(calls) > calls_left:
        log.error(
            "turn %s: %d more tool calls than agent.max_tool_calls allows", turn_id, len(calls) - calls_left
        )
        trace.tool_calls.append("refused:too_many")
        return ToolRound(say=tools.agent.tool_misunderstood_reply)
    done = ToolRound(calls=calls)
    for call in calls:
        if not tools.asked_for(call, transcript):
            # The model copied the prompt's example call (line 2 for "when does the canteen open"), or
            # was talked into a transfer nobody asked for: nothing is called, and it is told why.
            log.warning("turn %s: a call of %s the person did not ask for", turn_id, call.name)
            trace.tool_calls.append(f"refused:not_asked:{call.name}")
            done.answers.append(Message("tool", tools.not_asked_note(call)))
            continue
        outcome = await tools.run(call)
        trace.tool_ms += round(outcome.seconds * 1000.0, 1)
        trace.tool_calls.append(call.name if outcome.ok else f"{call.name}:{outcome.error_kind}")
        if outcome.transfer_to is not None:
            done.transfer_to = outcome.transfer_to
        if not outcome.ok:
            log.error(
                "turn %s: tool %s failed (%s): %s", turn_id, call.name, outcome.error_kind, outcome.detail
            )
            done.say = outcome.text
            return done
        if outcome.final:
            done.say = outcome.text  # a transfer, a goodbye: fixed sentences
            return done
        done.sources.append(outcome.text)
        if outcome.removed_instructions:
            log.error(
                "turn %s: the answer of tool %s gave orders to the model; %d sentence(s) left out",
                turn_id,
                call.name,
                outcome.removed_instructions,
            )
        done.answers.append(Message("tool", outcome.text))
    return done
