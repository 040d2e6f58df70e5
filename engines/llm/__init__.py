"""Language model: streaming chat completion on llama.cpp, several conversations at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from engines.errors import ModelFileError

if TYPE_CHECKING:
    from engines.bundle import Bundle
    from engines.llm.params import LlmParams

GGUF_KIND = "llm-gguf"

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    evaluated_prompt_tokens: int = 0  # tokens actually run through the model (cache misses)
    generated_tokens: int = 0
    cancelled: bool = False
    first_token_s: float | None = None
    total_s: float = 0.0
    dropped_messages: int = 0  # oldest history messages left out to fit the context window
    stop_reason: str = ""  # end_of_turn | stop_string | max_tokens | cancelled
    prefilled_tokens: int = 0  # prompt tokens found in the cache because a prefill() put them there
    discarded_prefill_tokens: int = 0  # prefilled tokens this prompt did not match (a wrong guess)
    queued_s: float = 0.0  # waited for a free slot (every slot busy with other conversations' replies)
    backend: str = ""  # who answered, when it can be another than the device's model (llm.backend)
    # P(the person's words end here | the words): the template's end-of-message token or sentence-final
    # punctuation after them, read while the prompt was evaluated; None when the engine does not judge
    # turns (``LlmEngine.judges_turns``).
    end_of_message_p: float | None = None

    @property
    def cached_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.evaluated_prompt_tokens


@dataclass
class PrefillStats:
    """What one ``prefill()`` did to the KV cache."""

    target_tokens: int = 0  # the prompt up to the end of the last message's text
    cached_tokens: int = 0  # of those, already in the cache
    evaluated_tokens: int = 0  # run through the model by this call
    discarded_tokens: int = 0  # tokens an earlier prefill put in the cache, thrown away as not matching
    cancelled: bool = False
    seconds: float = 0.0
    end_of_message_p: float | None = None  # P(end of message | the words prefilled), as in GenerationStats


@dataclass(frozen=True)
class LlmOccupancy:
    """How busy the engine is: replies running in its slots and replies waiting for one."""

    slots: int
    running: int
    waiting: int
    max_queue: int  # replies that may wait silently
    evictions: int = 0  # conversations whose slot was given to another one
    decode_steps: int = 0  # token steps since load ...
    decode_step_tokens: int = 0  # ... the tokens they carried (their mean: the batch size) ...
    decode_step_s: float = 0.0  # ... and their time

    @property
    def full(self) -> bool:
        """A new reply would wait behind ``max_queue`` or more others: worth telling the person."""
        return self.running >= self.slots and self.waiting >= self.max_queue


class LlmEngine(Protocol):
    @property
    def system_prompt(self) -> str:
        """The engine's own, before every conversation (a reply must not read it out)."""
        ...

    def load(self) -> None: ...

    def prefill(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        conversation: str | None = None,
    ) -> PrefillStats:
        """Evaluate the prompt of ``history`` (its last message unfinished: the template's end of
        message and reply header are left out) into the conversation's KV cache without
        generating, so that a later ``stream()`` whose prompt begins the same way evaluates only
        what follows. Stops between two small batches once ``cancel`` is set or a reply needs the
        model."""
        ...

    def stream(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        stats: GenerationStats | None = None,
        conversation: str | None = None,
        on_end_of_message: Callable[[float], None] | None = None,
    ) -> Iterator[str]:
        """Yield text pieces of the assistant's reply to ``history`` (without the system prompt,
        which the engine owns); stop within one token once ``cancel`` is set. ``conversation``
        (a session id) keeps the conversation's cache for its next turn; several conversations'
        replies are generated at once. When the engine judges turns and ``history`` ends with the
        person's message, ``on_end_of_message(p)`` is called (from the engine's thread, before the
        first token) with P(end of message | their words)."""
        ...

    def occupancy(self) -> LlmOccupancy: ...

    @property
    def judges_turns(self) -> bool:
        """Whether ``stream`` and ``prefill`` report P(end of message): a local model with its own
        chat template, whose end-of-message token it was trained to put where a person stops."""
        ...

    @property
    def offers_tools(self) -> bool:
        """The model was shown the tools (``create_llm(tools=...)`` and a chat template that has a tool
        format); a reply may then be a tool call."""
        ...

    def end_conversation(self, conversation: str) -> None:
        """The conversation is over: its cache may go to another one first."""
        ...

    def close(self) -> None: ...


def available_models(bundle: Bundle) -> list[str]:
    """Model names the bundle holds (artifacts ``llm/<name>`` of kind ``llm-gguf``)."""
    return sorted(
        a.name.removeprefix("llm/") for a in bundle.manifest.artifacts.values() if a.kind == GGUF_KIND
    )


def create_llm(
    bundle: Bundle,
    params: LlmParams,
    *,
    system_prompt: str,
    slots: int,
    seed: int | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> LlmEngine:
    """An unloaded llama.cpp engine for the bundle's ``llm/<model>`` GGUF (``gpu_layers=-1``: all
    layers on the GPU) holding ``slots`` conversations of ``context_tokens`` each. ``seed`` fixes
    sampling for reproducible runs; None draws one. ``tools``: function definitions shown to the model
    when its chat template has a tool format."""
    model = params.model
    names = available_models(bundle)
    if model not in names:
        raise ModelFileError(
            f"unknown LLM model {model!r}; the bundle has: {', '.join(names) or 'none'}",
            fix="set llm.model to one of those, or add the GGUF: appliance bundle add-model GGUF --name NAME",
        )
    from engines.llm.llamacpp import LlamaCppLlm

    return LlamaCppLlm(
        bundle.path(f"llm/{model}"), params, system_prompt=system_prompt, seed=seed, slots=slots, tools=tools
    )
