"""[agent]: who the appliance says it is, the tools the model may call, what it says when it does not
know, and how its replies are kept to their sources."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from engines.params import Params, check_sentence


class ToolParameterConfig(Params):
    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str = ""
    enum: tuple[str, ...] = ()
    required: bool = True


class ToolConfig(Params):
    """A tool the model may call (``[[agent.tools]]``): ``facts`` searches a local file, ``device``
    answers about the appliance itself, ``http`` asks a service on the site's LAN, ``end_call`` hangs
    up a phone call after the reply (the goodbye) has been played, ``transfer`` puts the caller
    through to one of ``call.transfer_targets`` after the reply."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="what the model calls it")
    kind: Literal["facts", "device", "http", "end_call", "transfer"]
    description: str = Field(min_length=1, max_length=400, description="what the model is told it does")
    spoken_name: str = Field("", description='how a failure names it: "the maintenance system"')
    file: Path | None = Field(None, description="facts: the Markdown or question-and-answer file")
    url: str = Field("", description="http: URL template, {argument} replaced (percent-encoded)")
    method: Literal["GET", "POST"] = "GET"
    parameters: dict[str, ToolParameterConfig] = Field(default_factory=dict, description="http arguments")
    keep: tuple[str, ...] = Field((), description="http: fields of a JSON answer to keep (a.b for nested)")
    timeout_s: float | None = Field(None, gt=0, le=60, description="empty: agent.tool_timeout_s")

    @model_validator(mode="after")
    def _check_kind(self) -> ToolConfig:
        if self.kind == "facts" and self.file is None:
            raise ValueError(f"tool {self.name}: a facts tool needs file = the facts file's path")
        if self.kind == "http" and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"tool {self.name}: an http tool needs url = 'http://host:port/path'")
        if self.kind != "http" and self.parameters:
            raise ValueError(f"tool {self.name}: only http tools take parameters (facts takes the question)")
        return self

    @field_validator("file")
    @classmethod
    def _expand_file(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()


# The placeholders each sentence the agent says may use (none for the others).
_PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    "not_known_offer": ("target",),
    "unknown_item": ("item",),
    "known_items": ("items",),
    "offer": ("topics",),
    "offer_transfer": ("targets",),
    "tool_failed_reply": ("tool",),
}


class AgentParams(Params):
    """Who the appliance is at this site: its persona, its tools, and how it answers from the site's
    facts."""

    site_name: str = Field("Demo site", description="the site's name, as the persona says it")
    device_id: str = Field("appliance-dev", description="this device's name on the admin page and /metrics")
    persona: str = Field(
        "You are a helpful voice assistant on a device at {site_name}. {abilities} "
        "Answer in one or two short spoken sentences, without lists or markdown.",
        description="{site_name}, {device_id}; {abilities}: what the configured tools let it do, and not",
    )
    tools: tuple[ToolConfig, ...] = Field(
        (), description="the tools the model may call: facts, device, http, end_call, transfer"
    )
    allowed_hosts: tuple[str, ...] = Field(
        (), description="LAN hosts (names, addresses or networks) http tools may reach; nothing else"
    )
    tool_timeout_s: float = Field(3.0, gt=0, le=60, description="a tool that takes longer is given up")
    max_tool_calls: int = Field(2, ge=1, le=8, description="tool calls in one turn at most")
    tool_preamble: str = Field(
        "Let me check that.",
        description="said when a tool call has started and its answer has not begun after "
        "tool_preamble_after_ms",
    )
    tool_preamble_after_ms: int = Field(
        700,
        ge=0,
        le=10000,
        description="a tool call whose answer starts sooner than this says no preamble (0: always say it)",
    )
    facts_prompt_tokens: int = Field(
        800,
        ge=0,
        le=8000,
        description="the site's facts stay whole in the system prompt (evaluated once) when they take at "
        "most this many tokens, estimated at 4 characters a token; larger files give each question the "
        "facts_per_turn sections that match its words (0: always so)",
    )
    facts_per_turn: int = Field(
        2, ge=1, le=8, description="sections of a large facts file given per question"
    )
    site_words_by_sound: bool = Field(
        True,
        description="a heard word that is not in the facts but sounds like the facts' word in the same place "
        'is read as that word ("meeting room L" -> "meeting room Elm", "visitors spark" -> "visitors park")',
    )
    grounding: bool = Field(
        True,
        description="check each clause of a reply before it is spoken: one stating a figure (number, time, "
        "extension, room, price) that no source gave (the site's facts, a tool's answer, the conversation, "
        "allowed_figures) is not said, and the reply ends with not_known_reply",
    )
    allowed_figures: tuple[str, ...] = Field(
        (), description='figures any reply may state besides the sources: "112", "24 hours a day"'
    )
    not_known_reply: str = Field(
        "Sorry, I don't have that information here.",
        min_length=1,
        description="said when the facts do not answer a question (the model is told to say it too)",
    )
    answers: Literal["select", "paraphrase"] = Field(
        "select",
        description="select: for a question about the site the model chooses which of the facts' numbered "
        "sentences answer it and the appliance speaks them as written (a figure always with its own "
        "subject), after checking that everything the person named is in them; paraphrase: the model "
        "answers in its own words, checked figure by figure (the grounding check)",
    )
    unknown_item: str = Field(
        "I have nothing on {item} here.",
        description="select: said when the person named something ({item}: the M6 bolts, hall 3) that no "
        "chosen sentence of the facts is about",
    )
    known_items: str = Field(
        "I know about {items}.",
        description="select: said after unknown_item with the facts' items of the same kind ({items})",
    )
    offer: str = Field(
        "I can tell you about {topics}.",
        description="select: what the appliance offers when asked what it can do ({topics}: the facts' "
        "section titles)",
    )
    offer_transfer: str = Field(
        "I can also put you through to {targets}.",
        description="select: said after offer when a transfer tool can reach call.transfer_targets",
    )
    not_known_offer: str = Field(
        "I can put you through to {target}.",
        description="said after not_known_reply when a clause was withheld and a transfer tool can reach "
        "{target} (the first of call.transfer_targets)",
    )
    goodbye_reply: str = Field(
        "Thank you for calling. Goodbye.", min_length=1, description="said when the model ends a call"
    )
    tool_failed_reply: str = Field(
        "Sorry, I could not reach {tool} just now.",
        description="said when a tool fails ({tool}: its spoken_name)",
    )
    tool_result_chars: int = Field(1200, ge=100, le=20000, description="a tool's answer is cut to this")
    tool_misunderstood_reply: str = Field(
        "Sorry, I could not work out how to look that up.",
        description="said when the model's tool call is malformed, unknown or over agent.max_tool_calls",
    )

    @field_validator(
        "not_known_reply",
        "goodbye_reply",
        "tool_preamble",
        "tool_misunderstood_reply",
        "not_known_offer",
        "unknown_item",
        "known_items",
        "offer",
        "offer_transfer",
        "tool_failed_reply",
    )
    @classmethod
    def _sentence(cls, value: str, info: ValidationInfo) -> str:
        return check_sentence(value, _PLACEHOLDERS.get(info.field_name or "", ()))
