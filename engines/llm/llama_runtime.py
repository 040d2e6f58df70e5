"""A thin layer over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

One model and one context holding ``sequences`` independent sequences (conversations), each with
its own ``context_tokens`` of KV cache (llama.cpp's non-unified cache: one stream per sequence).
A sequence's cache is addressed by token count: ``kv_length(seq)`` is what llama.cpp's own memory
holds, so callers can count what a call really evaluated. ``decode`` evaluates tokens of one
sequence; ``decode_step`` one token for each of several sequences in one batch.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# llama.cpp's CPU backend runs its threads with OpenMP, which by default spin-waits at each of the
# hundreds of barriers per token. When ASR, TTS or anything else shares the cores, a spinning
# thread waits for a descheduled one: 2 threads ran 5-10x slower than 1 on a busy 2-core machine.
# Waiting passively keeps 2 threads fast there. Read once, when libgomp loads; an operator's own
# setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp  # imported after the OpenMP setting above

from engines.errors import BackendUnavailable, ModelFileError

log = logging.getLogger(__name__)
llama_log = logging.getLogger("engines.llm.llama_cpp")

_ALL_LAYERS = 2**31 - 1
_backend_lock = threading.Lock()
_backend_ready = False


@llama_cpp.llama_log_callback
def _route_llama_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # Everything llama.cpp prints goes to logging at DEBUG (stderr stays quiet unless -v).
    if llama_log.isEnabledFor(logging.DEBUG):
        llama_log.debug("%s", text.decode("utf-8", errors="replace").rstrip())


def init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_log_set(_route_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True


@dataclass(frozen=True)
class SamplingParams:
    temperature: float
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None


class LlamaRuntime:
    def __init__(
        self,
        path: Path,
        *,
        gpu_layers: int,
        context_tokens: int,
        threads: int,
        batch_tokens: int = 512,
        sequences: int = 1,
        vocab_only: bool = False,
    ) -> None:
        """``context_tokens`` per sequence. ``vocab_only``: the vocabulary and metadata without the
        weights and without a context (to count tokens quickly); only the text <-> token methods
        work then."""
        init_backend()
        if gpu_layers != 0 and not llama_cpp.llama_supports_gpu_offload():
            raise BackendUnavailable(
                f"llm.gpu_layers = {gpu_layers} but this llama.cpp build has no GPU offload",
                fix='set llm.gpu_layers = 0, or install llama-cpp-python built with CMAKE_ARGS="-DGGML_CUDA=on"',
            )
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = _ALL_LAYERS if gpu_layers < 0 else gpu_layers
        model_params.vocab_only = vocab_only
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise ModelFileError(
                f"llama.cpp could not load {path} (run with -v for its log)",
                fix="check the file is a GGUF for a model architecture this llama.cpp supports",
            )
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self._piece = ctypes.create_string_buffer(256)
        self.ctx = None
        self._batch: Any = None
        if vocab_only:
            return
        batch_tokens = min(batch_tokens, context_tokens)  # llama.cpp caps a batch at the context
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = context_tokens * sequences
        ctx_params.n_seq_max = sequences
        ctx_params.kv_unified = False  # each sequence its own cells: no attention over the others'
        ctx_params.n_batch = batch_tokens
        ctx_params.n_ubatch = batch_tokens
        ctx_params.n_threads = threads
        ctx_params.n_threads_batch = threads
        ctx_params.swa_full = True  # sliding-window layers keep every position, so prefixes can be reused
        ctx_params.no_perf = False
        self.ctx = llama_cpp.llama_init_from_model(self.model, ctx_params)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise BackendUnavailable(
                f"llama.cpp could not create a {context_tokens}-token context for {path}",
                fix="lower llm.context_tokens or free memory",
            )
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.sequences = int(llama_cpp.llama_n_seq_max(self.ctx))
        self.context_tokens = int(llama_cpp.llama_n_ctx_seq(self.ctx))
        self.batch_tokens = int(llama_cpp.llama_n_batch(self.ctx))
        self._batch = llama_cpp.llama_batch_init(self.batch_tokens, 0, self.sequences)

    # model facts ---------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        length = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if length >= 0 else None

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8") if raw else None

    def token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return str(llama_cpp.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="replace"))

    @property
    def bos_token(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self.vocab))

    @property
    def eos_token(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self.vocab))

    @property
    def adds_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    # text <-> tokens -----------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """Tokens of ``text`` with special tokens (``<|im_start|>``) parsed, nothing added."""
        raw = text.encode("utf-8")
        capacity = len(raw) + 16
        tokens = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), tokens, capacity, False, True)
        if count < 0:
            capacity = -count
            tokens = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), tokens, capacity, False, True)
        return list(tokens[:count])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (control tokens give none)."""
        length = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, False)
        if length < 0:
            self._piece = ctypes.create_string_buffer(-length)
            length = llama_cpp.llama_token_to_piece(
                self.vocab, token, self._piece, len(self._piece), 0, False
            )
        return bytes(self._piece.raw[:length])

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    # KV cache --------------------------------------------------------------------------------

    def kv_length(self, seq: int = 0) -> int:
        """Tokens llama.cpp holds for sequence ``seq`` (its highest position + 1)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq)) + 1

    def truncate(self, length: int, seq: int = 0) -> None:
        """Forget every position of ``seq`` from ``length`` on."""
        if not llama_cpp.llama_memory_seq_rm(self.memory, seq, length, -1):
            llama_cpp.llama_memory_clear(self.memory, True)
            raise BackendUnavailable("llama.cpp could not trim this model's KV cache")

    def copy_sequence(self, source: int, target: int) -> None:
        """Make ``target`` hold what ``source`` holds (its whole stream is copied)."""
        llama_cpp.llama_memory_seq_rm(self.memory, target, -1, -1)
        llama_cpp.llama_memory_seq_cp(self.memory, source, target, -1, -1)

    def decode(self, tokens: Sequence[int], seq: int = 0) -> None:
        """Evaluate ``tokens`` of ``seq`` after what its cache holds, in batches; the logits of the
        last one stay (output index -1)."""
        position = self.kv_length(seq)
        for start in range(0, len(tokens), self.batch_tokens):
            chunk = tokens[start : start + self.batch_tokens]
            last = start + len(chunk) == len(tokens)
            items = [(token, position + start + i, seq) for i, token in enumerate(chunk)]
            self._run(items, outputs=[len(chunk) - 1] if last else [])

    def decode_with_row(self, tokens: Sequence[int], row: int, seq: int = 0) -> np.ndarray:
        """``decode`` of at most one batch, with the logits after ``tokens[row]`` too (one more output
        row of the same pass); returns those. The last token's stay at output index -1."""
        if not 0 <= row < len(tokens) <= self.batch_tokens:
            raise ValueError(f"row {row} of {len(tokens)} tokens in one batch of {self.batch_tokens}")
        position = self.kv_length(seq)
        self._run(
            [(t, position + i, seq) for i, t in enumerate(tokens)], outputs=sorted({row, len(tokens) - 1})
        )
        return self.logits(row)

    def decode_step(self, items: Sequence[tuple[int, int, int]]) -> None:
        """One batch of ``(token, position, seq)`` (one token per sequence, each sequence at most
        once); the logits of item ``i`` are at output index ``i``."""
        self._run(items, outputs=range(len(items)))

    def _run(self, items: Sequence[tuple[int, int, int]], *, outputs: Sequence[int]) -> None:
        batch = self._batch
        batch.n_tokens = len(items)
        for i, (token, position, seq) in enumerate(items):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = False
        for i in outputs:
            batch.logits[i] = True
        result = llama_cpp.llama_decode(self.ctx, batch)
        if result != 0:
            raise BackendUnavailable(f"llama_decode failed with code {result}")

    def evaluate(self, tokens: Sequence[int], seq: int = 0) -> np.ndarray:
        """Evaluate ``tokens`` of ``seq`` in one batch and return the logits after every one of them
        ([len(tokens), vocab]): for checking one backend's numbers against another's."""
        if len(tokens) > self.batch_tokens:
            raise ValueError(f"{len(tokens)} tokens do not fit one batch of {self.batch_tokens}")
        position = self.kv_length(seq)
        self._run([(t, position + i, seq) for i, t in enumerate(tokens)], outputs=range(len(tokens)))
        return np.stack([self.logits(i) for i in range(len(tokens))])

    def logits(self, index: int = -1) -> np.ndarray:
        """A copy of the logits at ``index`` of the last decode: a position in its batch that had an
        output, or a negative index counting outputs from the end."""
        size = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        pointer = llama_cpp.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(size,)).copy()

    def prompt_tokens_evaluated(self) -> int:
        """llama.cpp's own counter of prompt tokens evaluated since the context was made."""
        llama_cpp.llama_synchronize(self.ctx)
        return int(llama_cpp.llama_perf_context(self.ctx).n_p_eval)

    # sampling --------------------------------------------------------------------------------

    def sampler(self, params: SamplingParams) -> Any:
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if params.temperature <= 0.0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else params.seed
        for stage in (
            llama_cpp.llama_sampler_init_top_k(params.top_k),
            llama_cpp.llama_sampler_init_top_p(params.top_p, 1),
            llama_cpp.llama_sampler_init_min_p(params.min_p, 1),
            llama_cpp.llama_sampler_init_temp(params.temperature),
            llama_cpp.llama_sampler_init_dist(seed),
        ):
            llama_cpp.llama_sampler_chain_add(chain, stage)
        return chain

    def sample(self, sampler: Any, index: int = -1) -> int:
        """A token from the logits at output ``index`` of the last decode."""
        return int(llama_cpp.llama_sampler_sample(sampler, self.ctx, index))

    @staticmethod
    def free_sampler(sampler: Any) -> None:
        llama_cpp.llama_sampler_free(sampler)

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None
