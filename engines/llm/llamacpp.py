"""The LLM engine on llama.cpp: system prompt evaluated once, prefix reuse, streaming, cancellation.

KV layout: the system prefix (same for every conversation) is evaluated in ``load()`` and never
removed. Each turn keeps the longest cached prefix of its prompt (the whole previous turn, when
the same conversation continues) and evaluates only the rest; a turn of another conversation
falls back to the system prefix. ``prefill()`` fills the cache with a conversation and the words of
an unfinished user message (a partial transcript) while the person is still speaking; the turn
that follows then evaluates only the tokens after the longest prefix it shares with them.
"""

from __future__ import annotations

import codecs
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from engines.errors import EngineError, InputError
from engines.llm import GenerationStats, Message, PrefillStats
from engines.llm.chat_template import ChatTemplate, validate_history
from engines.llm.gguf import read_gguf
from engines.llm.history import trim_history
from engines.llm.stop import StopStringFilter

log = logging.getLogger(__name__)

_WARMUP_HISTORY = (Message("user", "Hello."),)
# Prefill runs in batches this small so that a reply waiting for the model waits at most one of them
# (about 0.1 s for Qwen 1.5B on two CPU cores); a prompt eval of 8 tokens costs ~2x one of 1 token.
PREFILL_BATCH_TOKENS = 8
# Appended to an unfinished message to find where its text ends in the template's tokens.
_PROBE = " \u2026zq"


class LlamaCppLlm:
    def __init__(
        self,
        model_path: Path,
        *,
        system_prompt: str,
        gpu_layers: int,
        context_tokens: int,
        max_reply_tokens: int,
        temperature: float,
        threads: int,
        stop: Sequence[str],
        seed: int | None = None,
    ) -> None:
        if max_reply_tokens >= context_tokens:
            raise InputError(
                f"max_reply_tokens ({max_reply_tokens}) must be below context_tokens ({context_tokens})",
                fix="raise llm.context_tokens or lower llm.max_reply_tokens",
            )
        self.model_path = Path(model_path)
        self.system_prompt = system_prompt
        self.gpu_layers = gpu_layers
        self.context_tokens = context_tokens
        self.max_reply_tokens = max_reply_tokens
        self.temperature = temperature
        self.threads = threads
        self.stop = tuple(stop)
        self.seed = seed
        self._runtime: Any = None  # LlamaRuntime once loaded
        self._template: ChatTemplate | None = None
        self._system_prefix = ""  # the rendered text of the system prefix
        self._system_tokens: list[int] = []
        self._kv_tokens: list[int] = []  # mirror of what the KV cache holds, in order
        # Positions [start, end) of the cache that prefill() evaluated and no turn has used yet.
        self._prefill_span: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._active: Iterator[str] | None = None  # the turn holding the lock
        self._active_thread: int | None = None

    # lifecycle -------------------------------------------------------------------------------

    def load(self) -> None:
        if self._runtime is not None:
            return
        info = read_gguf(self.model_path)  # clear errors for foreign or truncated files
        from engines.llm.llama_runtime import LlamaRuntime

        started = time.perf_counter()
        runtime = LlamaRuntime(
            self.model_path,
            gpu_layers=self.gpu_layers,
            context_tokens=self.context_tokens,
            threads=self.threads,
        )
        try:
            self._template = _template(runtime, info.architecture)
            prefix = self._template.system_prefix(self.system_prompt)
            tokens = _prefix_tokens(runtime, prefix)
            if len(tokens) + self.max_reply_tokens >= runtime.context_tokens:
                raise InputError(
                    f"the system prompt takes {len(tokens)} tokens, too many for a "
                    f"{runtime.context_tokens}-token context with {self.max_reply_tokens} reply tokens",
                    fix="shorten the persona or raise llm.context_tokens",
                )
            runtime.decode(tokens)
        except BaseException:
            runtime.close()
            raise
        self._runtime = runtime
        self._system_prefix = prefix
        self._system_tokens = tokens
        self._kv_tokens = list(tokens)
        self._warm_up()
        log.info(
            "llm ready: %s (%s, %s, template %s), system prompt %d tokens, %.2f s",
            self.model_path.name,
            info.architecture,
            info.file_type_name,
            self._template.origin,
            len(tokens),
            time.perf_counter() - started,
        )

    def _warm_up(self) -> None:
        """One short turn, so graph allocation is not paid by the first real turn."""
        for _ in self._generate(_WARMUP_HISTORY, None, GenerationStats(), max_tokens=1):
            pass
        self._runtime.truncate(len(self._system_tokens))
        self._kv_tokens = list(self._system_tokens)
        self._prefill_span = None

    def close(self) -> None:
        self._close_own_suspended_turn()
        with self._lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None
            self._kv_tokens = []
            self._prefill_span = None

    # facts for callers and tests ---------------------------------------------------------------

    @property
    def system_prompt_tokens(self) -> int:
        return len(self._system_tokens)

    @property
    def template_origin(self) -> str:
        return self._template.origin if self._template else ""

    def prompt_tokens(self, history: Sequence[Message]) -> list[int]:
        """The token sequence a turn with ``history`` evaluates (system prefix included)."""
        self._require_loaded()
        assert self._template is not None
        _, rest = self._template.split(self.system_prompt, history, prefix=self._system_prefix)
        return self._system_tokens + self._runtime.tokenize(rest)

    # prefill ---------------------------------------------------------------------------------

    def prefill(self, history: Sequence[Message], *, cancel: threading.Event | None = None) -> PrefillStats:
        self._require_loaded()
        validate_history(history)
        self._close_own_suspended_turn()
        with self._lock:
            self._require_loaded()
            return self._prefill(list(history), cancel)

    def _prefill(self, history: list[Message], cancel: threading.Event | None) -> PrefillStats:
        started = time.perf_counter()
        stats = PrefillStats()
        target = self._unfinished_prompt(history)
        if target is None:
            return stats  # does not fit the context: the turn itself will trim the history
        stats.target_tokens = len(target)
        runtime = self._runtime
        reuse = max(_common_prefix_length(self._kv_tokens, target), len(self._system_tokens))
        stats.cached_tokens = reuse
        stats.discarded_tokens = self._drop_prefill_after(reuse)
        start = reuse if self._prefill_span is None else min(self._prefill_span[0], reuse)
        runtime.truncate(reuse)
        self._kv_tokens = self._kv_tokens[:reuse]
        for begin in range(reuse, len(target), PREFILL_BATCH_TOKENS):
            if _is_set(cancel):
                stats.cancelled = True
                break
            chunk = target[begin : begin + PREFILL_BATCH_TOKENS]
            runtime.decode(chunk)
            self._kv_tokens.extend(chunk)
            stats.evaluated_tokens += len(chunk)
            self._prefill_span = (start, len(self._kv_tokens))
        stats.seconds = time.perf_counter() - started
        return stats

    def _unfinished_prompt(self, history: list[Message]) -> list[int] | None:
        """The prompt tokens of ``history`` up to the end of the last message's text: what the
        prompt of any longer version of that message begins with (up to the last word's token)."""
        budget = min(self.context_tokens, self._runtime.context_tokens) - self.max_reply_tokens
        try:
            kept, _ = trim_history(history, lambda messages: len(self.prompt_tokens(messages)) <= budget)
        except InputError:
            return None
        *earlier, last = kept
        probe = [*earlier, Message(last.role, last.content + _PROBE)]
        full, longer = self.prompt_tokens(kept), self.prompt_tokens(probe)
        return full[: _common_prefix_length(full, longer)]

    def _drop_prefill_after(self, position: int) -> int:
        """Forget that positions from ``position`` on were prefilled; how many prefilled tokens that
        throws away (the caller truncates the cache there)."""
        if self._prefill_span is None:
            return 0
        start, end = self._prefill_span
        discarded = max(0, end - max(position, start))
        self._prefill_span = None if position <= start else (start, min(end, position))
        return discarded

    # generation ------------------------------------------------------------------------------

    def stream(
        self,
        history: Sequence[Message],
        *,
        cancel: threading.Event | None = None,
        stats: GenerationStats | None = None,
    ) -> Iterator[str]:
        self._require_loaded()
        validate_history(history)
        box: list[Iterator[str]] = []
        turn = self._serialized(box, list(history), cancel, stats if stats is not None else GenerationStats())
        box.append(turn)
        return turn

    def _serialized(
        self,
        box: list[Iterator[str]],
        history: list[Message],
        cancel: threading.Event | None,
        stats: GenerationStats,
    ) -> Iterator[str]:
        # A turn running in another thread is waited for (the lock).
        self._close_own_suspended_turn()
        with self._lock:
            self._require_loaded()
            self._active, self._active_thread = box[0], threading.get_ident()
            try:
                yield from self._generate(history, cancel, stats, max_tokens=self.max_reply_tokens)
            finally:
                self._active, self._active_thread = None, None

    def _close_own_suspended_turn(self) -> None:
        """Close a turn this same thread left suspended (barge-in without draining it): it holds the
        lock, which this thread is about to take."""
        if self._active is None or self._active_thread != threading.get_ident():
            return
        active, self._active = self._active, None
        if hasattr(active, "close"):
            active.close()

    def _generate(
        self,
        history: Sequence[Message],
        cancel: threading.Event | None,
        stats: GenerationStats,
        *,
        max_tokens: int,
    ) -> Iterator[str]:
        started = time.perf_counter()
        runtime = self._runtime
        budget = min(self.context_tokens, runtime.context_tokens) - max_tokens
        prompts: list[list[int]] = []

        def fits(messages: Sequence[Message]) -> bool:
            prompts.append(self.prompt_tokens(messages))
            return len(prompts[-1]) <= budget

        _, stats.dropped_messages = trim_history(history, fits)
        prompt = prompts[-1]  # the last call was for the kept messages, and they fitted
        stats.prompt_tokens = len(prompt)
        if stats.dropped_messages:
            log.debug("dropped the %d oldest messages to fit the context", stats.dropped_messages)

        # Reuse the longest cached prefix; at least the last prompt token is evaluated for logits.
        reuse = _common_prefix_length(self._kv_tokens, prompt)
        reuse = max(min(reuse, len(prompt) - 1), len(self._system_tokens))
        if self._prefill_span is not None:
            start, end = self._prefill_span
            stats.prefilled_tokens = max(0, min(reuse, end) - start)
            stats.discarded_prefill_tokens = self._drop_prefill_after(reuse)
            self._prefill_span = None  # what follows is this turn's own
        runtime.truncate(reuse)
        self._kv_tokens = self._kv_tokens[:reuse]
        before = runtime.kv_length()
        if _is_set(cancel):
            stats.cancelled, stats.stop_reason = True, "cancelled"
            stats.total_s = time.perf_counter() - started
            return
        runtime.decode(prompt[reuse:])
        self._kv_tokens.extend(prompt[reuse:])
        stats.evaluated_prompt_tokens = runtime.kv_length() - before

        sampler = runtime.sampler(self._sampling())
        try:
            yield from self._decode_loop(runtime, sampler, cancel, stats, max_tokens, started)
        finally:
            runtime.free_sampler(sampler)
            stats.total_s = time.perf_counter() - started

    def _decode_loop(
        self,
        runtime: Any,
        sampler: Any,
        cancel: threading.Event | None,
        stats: GenerationStats,
        max_tokens: int,
        started: float,
    ) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stops = StopStringFilter(self.stop)
        at_start = True
        stats.stop_reason = "max_tokens"
        while True:
            if _is_set(cancel):
                stats.cancelled, stats.stop_reason = True, "cancelled"
                return
            token = runtime.sample(sampler)
            if runtime.is_end_of_generation(token):
                stats.stop_reason = "end_of_turn"
                break
            stats.generated_tokens += 1
            text = stops.push(decoder.decode(runtime.piece(token)))
            if at_start:
                text = text.lstrip()
                at_start = not text
            if text:
                if stats.first_token_s is None:
                    stats.first_token_s = time.perf_counter() - started
                yield text
            if stops.stopped:
                stats.stop_reason = "stop_string"
                return
            if stats.generated_tokens >= max_tokens:
                break
            if _is_set(cancel):
                stats.cancelled, stats.stop_reason = True, "cancelled"
                return
            runtime.decode([token])
            self._kv_tokens.append(token)
        tail = stops.push(decoder.decode(b"", final=True)) + stops.flush()
        tail = tail.lstrip() if at_start else tail
        if tail:
            if stats.first_token_s is None:
                stats.first_token_s = time.perf_counter() - started
            yield tail

    def _sampling(self) -> Any:
        from engines.llm.llama_runtime import SamplingParams

        return SamplingParams(temperature=self.temperature, seed=self.seed)

    def _require_loaded(self) -> None:
        if self._runtime is None:
            raise EngineError("the LLM engine is not loaded", fix="call load() first")


def _common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def _is_set(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


def _template(runtime: Any, architecture: str) -> ChatTemplate:
    """The model's own chat template (or the architecture's fallback), as the engine renders it."""
    return ChatTemplate.for_model(
        runtime.chat_template(),
        architecture,
        bos_token=runtime.token_text(runtime.bos_token),
        eos_token=runtime.token_text(runtime.eos_token),
    )


def _prefix_tokens(runtime: Any, prefix: str) -> list[int]:
    tokens: list[int] = runtime.tokenize(prefix)
    if runtime.adds_bos and (not tokens or tokens[0] != runtime.bos_token):
        tokens.insert(0, runtime.bos_token)
    return tokens


def system_prompt_tokens(model_path: Path, system_prompt: str) -> int:
    """How many tokens ``system_prompt`` takes in the model's chat template, from the vocabulary
    alone (no weights loaded: a fraction of a second): what a configuration check needs to know
    whether the persona fits the context before the daemon tries."""
    info = read_gguf(model_path)
    from engines.llm.llama_runtime import LlamaRuntime

    runtime = LlamaRuntime(model_path, gpu_layers=0, context_tokens=256, threads=1, vocab_only=True)
    try:
        prefix = _template(runtime, info.architecture).system_prefix(system_prompt)
        return len(_prefix_tokens(runtime, prefix))
    finally:
        runtime.close()
