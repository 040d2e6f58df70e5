"""The LLM engine on llama.cpp: several conversations at once, each in its own KV slot, one batched
decode loop, the system prompt evaluated once.

KV layout: the context holds ``slots`` sequences. The system prefix (the same for every
conversation) is evaluated once in ``load()`` and copied into every sequence, where it is never
removed. Each conversation keeps its slot (``slots.py``): its next turn keeps the longest cached
prefix of its prompt (the whole previous turn) and evaluates only the rest. ``prefill()`` fills a
conversation's slot with the words of an unfinished user message (a partial transcript) while the
person is still speaking; the turn that follows then evaluates only the tokens after the longest
prefix it shares with them. Every evaluation runs on the decode loop's thread (``scheduler.py``),
which batches the token steps of all replies being generated.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engines.cores import CoreShare
from engines.errors import EngineError, InputError
from engines.llm import GenerationStats, LlmOccupancy, Message, PrefillStats
from engines.llm.chat_template import ChatTemplate, validate_history
from engines.llm.gguf import read_gguf
from engines.llm.history import trim_history
from engines.llm.memory import check_kv_fits
from engines.llm.params import LlmParams
from engines.llm.scheduler import PREFILL_BATCH_TOKENS, DecodeLoop, MessageEnd, PrefillJob, ReplyJob
from engines.llm.slots import SlotTable, common_prefix_length

__all__ = ["PREFILL_BATCH_TOKENS", "LlamaCppLlm", "judged_words", "system_prompt_tokens"]

log = logging.getLogger(__name__)

_WARMUP_HISTORY = (Message("user", "Hello."),)
# Appended to an unfinished message to find where its text ends in the template's tokens.
_PROBE = " \u2026zq"
# What may end a sentence: stripped from the words judged, and, as tokens, counted as their end.
SENTENCE_END = ".?!\u2026"
SENTENCE_FINAL = (".", "?", "!", "\u2026", "...", "?!", "!?", "!!", "??", ".\n", "?\n", "!\n")


class LlamaCppLlm:
    def __init__(
        self,
        model_path: Path,
        params: LlmParams,
        *,
        system_prompt: str,
        seed: int | None = None,
        slots: int = 1,
        tools: Sequence[dict[str, Any]] = (),
    ) -> None:
        context_tokens, max_reply_tokens = params.context_tokens, params.max_reply_tokens
        if max_reply_tokens >= context_tokens:
            raise InputError(
                f"max_reply_tokens ({max_reply_tokens}) must be below context_tokens ({context_tokens})",
                fix="raise llm.context_tokens or lower llm.max_reply_tokens",
            )
        if slots < 1:
            raise InputError(f"llm.slots = {slots}: at least one conversation slot", fix="set llm.slots >= 1")
        self.model_path = Path(model_path)
        self.system_prompt = system_prompt
        self.gpu_layers = params.gpu_layers
        self.context_tokens = context_tokens
        self.max_reply_tokens = max_reply_tokens
        self.temperature = params.temperature
        self.threads = params.threads
        self.stop = params.stop
        self.seed = seed
        self.slots = slots
        self.max_queue = params.max_queue
        self.tools = list(tools)  # shown to the model only if its template has a tool format
        self.kv_cache_bytes: int | None = None
        self._runtime: Any = None  # LlamaRuntime once loaded
        self._template: ChatTemplate | None = None
        self._system_prefix = ""  # the rendered text of the system prefix
        self._system_tokens: list[int] = []
        self._final_punctuation: tuple[int, ...] = ()  # tokens of sentence-final punctuation
        self._table: SlotTable | None = None
        self._loop: DecodeLoop | None = None
        self._lock = threading.Lock()  # load and close
        self._cores: CoreShare | None = None
        self.yield_s = params.yield_ms / 1000.0

    def share_cores(self, cores: CoreShare) -> None:
        """Before each step, let the other engines' jobs counted in ``cores`` finish (llm.yield_ms)."""
        self._cores = cores
        if self._loop is not None:
            self._loop.cores = cores

    # lifecycle -------------------------------------------------------------------------------

    def load(self) -> None:
        with self._lock:
            if self._runtime is None:
                self._load()

    def _load(self) -> None:
        info = read_gguf(self.model_path)  # clear errors for foreign or truncated files
        self.kv_cache_bytes = check_kv_fits(info, slots=self.slots, context_tokens=self.context_tokens)
        from engines.llm.llama_runtime import LlamaRuntime

        started = time.perf_counter()
        runtime = LlamaRuntime(
            self.model_path,
            gpu_layers=self.gpu_layers,
            context_tokens=self.context_tokens,
            threads=self.threads,
            sequences=self.slots,
        )
        try:
            self._template = _template(runtime, info.architecture)
            if self.tools and not self._template.supports_tools:
                log.warning(
                    "%s's chat template has no tool format: the %d configured tools are not offered "
                    "to it (use a model whose template has one, such as qwen-1.5b)",
                    self.model_path.name,
                    len(self.tools),
                )
                self.tools = []
            prefix = self._template.system_prefix(self.system_prompt, tools=self.tools)
            tokens = _prefix_tokens(runtime, prefix)
            if len(tokens) + self.max_reply_tokens >= runtime.context_tokens:
                raise InputError(
                    f"the system prompt takes {len(tokens)} tokens, too many for a "
                    f"{runtime.context_tokens}-token context with {self.max_reply_tokens} reply tokens",
                    fix="shorten the persona or raise llm.context_tokens",
                )
            self._runtime, self._system_prefix, self._system_tokens = runtime, prefix, tokens
            self._final_punctuation = _single_tokens(runtime, SENTENCE_FINAL)
            runtime.decode(tokens)
            self._warm_up()
            for seq in range(1, self.slots):
                runtime.copy_sequence(0, seq)
        except BaseException:
            self._runtime = None
            runtime.close()
            raise
        self._table = SlotTable(self.slots, tokens)
        self._loop = DecodeLoop(runtime, self._table, new_sampler=self._new_sampler)
        self._loop.cores, self._loop.yield_s = self._cores, self.yield_s
        self._loop.start()
        log.info(
            "llm ready: %s (%s, %s, template %s), system prompt %d tokens, %d slots x %d tokens, %.2f s",
            self.model_path.name,
            info.architecture,
            info.file_type_name,
            self._template.origin,
            len(tokens),
            self.slots,
            runtime.context_tokens,
            time.perf_counter() - started,
        )

    def _warm_up(self) -> None:
        """A prompt and one token step, so graph allocation is not paid by the first real turn."""
        runtime, prompt = self._runtime, self.prompt_tokens(_WARMUP_HISTORY)
        runtime.decode(prompt[len(self._system_tokens) :])
        sampler = self._new_sampler()
        try:
            runtime.decode_step([(runtime.sample(sampler), len(prompt), 0)])
        finally:
            runtime.free_sampler(sampler)
        runtime.truncate(len(self._system_tokens))

    def close(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.stop()
                self._loop = None
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None
            self._table = None

    # facts for callers and tests ---------------------------------------------------------------

    @property
    def system_prompt_tokens(self) -> int:
        return len(self._system_tokens)

    @property
    def offers_tools(self) -> bool:
        return bool(self.tools) and self._template is not None

    @property
    def template_origin(self) -> str:
        return self._template.origin if self._template else ""

    @property
    def judges_turns(self) -> bool:
        # A fallback template's end token is a guess at the format; only the model's own is trained.
        return self._template is not None and self._template.origin == "gguf"

    def prompt_tokens(self, history: Sequence[Message]) -> list[int]:
        """The token sequence a turn with ``history`` evaluates (system prefix included)."""
        if self._runtime is None or self._template is None:
            raise EngineError("the LLM engine is not loaded", fix="call load() first")
        _, rest = self._template.split(
            self.system_prompt, history, prefix=self._system_prefix, tools=self.tools
        )
        return self._system_tokens + self._runtime.tokenize(rest)

    def cached_tokens(self, conversation: str | None = None) -> list[int]:
        """What the KV cache holds for ``conversation`` (None: the slot used last)."""
        table = self._require_loaded()
        slot = table.owned_by(conversation) or max(table.slots, key=lambda s: s.last_used)
        return list(slot.tokens)

    def occupancy(self) -> LlmOccupancy:
        table = self._table
        if table is None or self._loop is None:
            return LlmOccupancy(slots=self.slots, running=0, waiting=0, max_queue=self.max_queue)
        loop = self._loop
        running, waiting = loop.occupancy()
        return LlmOccupancy(
            slots=self.slots,
            running=running,
            waiting=waiting,
            max_queue=self.max_queue,
            evictions=table.evictions,
            decode_steps=loop.decode_steps,
            decode_step_tokens=loop.decode_step_tokens,
            decode_step_s=loop.decode_step_s,
        )

    def end_conversation(self, conversation: str) -> None:
        if self._loop is not None:
            self._loop.forget(conversation)

    # prefill ---------------------------------------------------------------------------------

    def prefill(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        conversation: str | None = None,
    ) -> PrefillStats:
        self._require_loaded()
        validate_history(history)
        found = self._unfinished_prompt(list(history))
        if found is None:
            return PrefillStats()  # does not fit the context: the turn itself will trim the history
        target, end = found
        job = PrefillJob(conversation, target, cancel, message_end=end)
        job.stats.target_tokens = len(target)
        self._submit(job)
        job.finished.wait()
        return job.stats

    def _unfinished_prompt(self, history: list[Message]) -> tuple[list[int], MessageEnd | None] | None:
        """The prompt tokens of ``history`` up to the end of the last message's text: what the
        prompt of any longer version of that message begins with (up to the last word's token);
        and where the person's words end, when this engine judges turns."""
        budget = min(self.context_tokens, self._runtime.context_tokens) - self.max_reply_tokens
        try:
            kept, _ = trim_history(history, lambda messages: len(self.prompt_tokens(messages)) <= budget)
        except InputError:
            return None
        full = self.prompt_tokens(kept)
        length = self._words_end(kept, full)
        return full[:length], self._message_end(kept, full, length)

    def _words_end(self, kept: Sequence[Message], full: list[int], content: str | None = None) -> int:
        """Where the last message's text (or ``content``, a prefix of it) ends in ``full``."""
        *earlier, last = kept
        probe = [*earlier, Message(last.role, (last.content if content is None else content) + _PROBE)]
        return common_prefix_length(full, self.prompt_tokens(probe))

    def _message_end(self, kept: Sequence[Message], full: list[int], length: int) -> MessageEnd | None:
        """The person's message ends at ``length`` of ``full`` when the token there ends a turn (Qwen's
        <|im_end|>). The words are judged without their trailing punctuation: ASR writes a full stop
        where a pause only may be the end, and the model then expects the end of the message."""
        if not self.judges_turns or kept[-1].role != "user" or length >= len(full):
            return None
        token = full[length]
        if not self._runtime.is_end_of_generation(token):
            return None
        text = kept[-1].content
        words = judged_words(text)
        if not words:
            return None
        index = length if words == text else self._words_end(kept, full, words)
        return MessageEnd(index, (token, *self._final_punctuation))

    # generation ------------------------------------------------------------------------------

    def stream(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        stats: GenerationStats | None = None,
        conversation: str | None = None,
        on_end_of_message: Callable[[float], None] | None = None,
    ) -> Iterator[str]:
        self._require_loaded()
        validate_history(history)
        stats = stats if stats is not None else GenerationStats()
        budget = min(self.context_tokens, self._runtime.context_tokens) - self.max_reply_tokens
        prompts: list[list[int]] = []

        def fits(messages: Sequence[Message]) -> bool:
            prompts.append(self.prompt_tokens(messages))
            return len(prompts[-1]) <= budget

        kept, stats.dropped_messages = trim_history(history, fits)
        prompt = prompts[-1]  # the last call was for the kept messages, and they fitted
        stats.prompt_tokens = len(prompt)
        if stats.dropped_messages:
            log.debug("dropped the %d oldest messages to fit the context", stats.dropped_messages)
        end = None
        if on_end_of_message is not None and self.judges_turns and kept[-1].role == "user":
            end = self._message_end(kept, prompt, self._words_end(kept, prompt))
        job = ReplyJob(
            conversation,
            prompt,
            cancel,
            message_end=end,
            stats=stats,
            max_tokens=self.max_reply_tokens,
            stop=self.stop,
            on_end_of_message=on_end_of_message,
        )
        return self._reply(job)

    def _reply(self, job: ReplyJob) -> Iterator[str]:
        # Submitted on the first next(), so a generator never started never takes a slot.
        self._submit(job)
        yield from job.read()

    def _submit(self, job: PrefillJob | ReplyJob) -> None:
        loop = self._loop
        if loop is None:
            raise EngineError("the LLM engine is not loaded", fix="call load() first")
        loop.submit(job)

    def _new_sampler(self) -> Any:
        from engines.llm.llama_runtime import SamplingParams

        return self._runtime.sampler(SamplingParams(temperature=self.temperature, seed=self.seed))

    def _require_loaded(self) -> SlotTable:
        if self._runtime is None or self._table is None:
            raise EngineError("the LLM engine is not loaded", fix="call load() first")
        return self._table


def _template(runtime: Any, architecture: str) -> ChatTemplate:
    """The model's own chat template (or the architecture's fallback), as the engine renders it."""
    return ChatTemplate.for_model(
        runtime.chat_template(),
        architecture,
        bos_token=runtime.token_text(runtime.bos_token),
        eos_token=runtime.token_text(runtime.eos_token),
    )


def judged_words(text: str) -> str:
    """The words whose end is judged: ``text`` without trailing sentence-ending punctuation."""
    return text.rstrip().rstrip(SENTENCE_END + ",;:").rstrip()


def _single_tokens(runtime: Any, texts: Sequence[str]) -> tuple[int, ...]:
    """The tokens of those ``texts`` that are one token each."""
    found = {tokens[0] for text in texts if len(tokens := runtime.tokenize(text)) == 1}
    return tuple(sorted(found))


def _prefix_tokens(runtime: Any, prefix: str) -> list[int]:
    tokens: list[int] = runtime.tokenize(prefix)
    if runtime.adds_bos and (not tokens or tokens[0] != runtime.bos_token):
        tokens.insert(0, runtime.bos_token)
    return tokens


def system_prompt_tokens(model_path: Path, system_prompt: str, tools: Sequence[dict[str, Any]] = ()) -> int:
    """How many tokens ``system_prompt`` takes in the model's chat template, from the vocabulary
    alone (no weights loaded: a fraction of a second): what a configuration check needs to know
    whether the persona fits the context before the daemon tries."""
    info = read_gguf(model_path)
    from engines.llm.llama_runtime import LlamaRuntime

    runtime = LlamaRuntime(model_path, gpu_layers=0, context_tokens=256, threads=1, vocab_only=True)
    try:
        template = _template(runtime, info.architecture)
        prefix = template.system_prefix(system_prompt, tools=tools if template.supports_tools else ())
        return len(_prefix_tokens(runtime, prefix))
    finally:
        runtime.close()
