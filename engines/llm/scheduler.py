"""One decode loop for every conversation: the LLM engine's own thread batches the streams.

Each iteration of the loop:
1. finishes the jobs that were cancelled or abandoned by their reader;
2. waits, briefly, for each generating reply's reader to have handled the text it was given last, and
   then (``llm.yield_ms``) for the other engines' work, which that reader may just have started;
3. runs one decode step for every reply that is generating: one token per sequence, in one batch,
   and samples each sequence's next token with its own sampler;
4. evaluates one chunk of the prompt of the oldest reply still evaluating its prompt (in its own
   batch: llama.cpp's numbers for a sequence then do not depend on what else is running, so a reply
   at temperature 0 is the same alone or beside others), so a long prompt delays the others' next
   tokens by one chunk at a time, not by the whole prompt;
5. when no reply is queued or running: one small chunk of a prefill (a conversation's unfinished
   message, evaluated while the person is still speaking). A reply arriving ends any prefill.

Replies wait for a slot in the order they came; a reply of a conversation whose slot is still
running an earlier reply of the same conversation (a barge-in) cancels that earlier one.
"""

from __future__ import annotations

import codecs
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines.cores import CoreShare
from engines.errors import EngineError
from engines.llm import GenerationStats, PrefillStats
from engines.llm.slots import Slot, SlotTable, common_prefix_length
from engines.llm.stop import StopStringFilter

log = logging.getLogger(__name__)

# A reply's prompt is evaluated in chunks this long, always (the same chunks alone or beside other
# streams, so the numbers are the same): about 0.4 s of Qwen 1.5B on two CPU cores between two
# tokens of the other streams.
PROMPT_CHUNK_TOKENS = 64
# Prefill runs in batches this small so that a reply arriving waits at most one of them (about 0.1 s
# for Qwen 1.5B on two CPU cores); a prompt eval of 8 tokens costs ~2x one of 1 token.
PREFILL_BATCH_TOKENS = 8

# How long a token waits for its reply's reader to ask for more (about a millisecond when it is
# there: the piece goes to the event loop and back); a reader that is away costs no more than this.
READER_WAIT_S = 0.025

_END = object()
_POLL_S = 0.05


@dataclass(frozen=True)
class MessageEnd:
    """Where the person's words end in a job's prompt (``index``: the first token after them, trailing
    punctuation left out) and the tokens that would end them there: the chat template's
    end-of-message token and sentence-final punctuation. The logits after ``prompt[index - 1]``, which
    the evaluation computes anyway or for one more output row, give P(the words end here), the reply
    model's own judgement of whether the person has finished."""

    index: int
    tokens: tuple[int, ...]


def tokens_probability(logits: np.ndarray, tokens: tuple[int, ...]) -> float:
    """The softmax of ``logits`` summed over ``tokens``, computed stably."""
    peak = float(np.max(logits))
    chosen = np.asarray(tokens, dtype=np.int64)
    return float(np.sum(np.exp(logits[chosen] - peak)) / np.sum(np.exp(logits - peak)))


@dataclass
class Job:
    conversation: str | None
    prompt: list[int]
    cancel: threading.Event | None
    message_end: MessageEnd | None = None
    submitted: float = field(default_factory=time.perf_counter)
    slot: Slot | None = None
    pending: list[int] = field(default_factory=list)  # prompt tokens still to evaluate
    finished: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False  # the reader went away
    superseded: bool = False  # a newer job of the same conversation needs the slot
    blocked_since: float = 0.0  # when it first found no slot free

    def stopped(self) -> bool:
        return self.abandoned or self.superseded or (self.cancel is not None and self.cancel.is_set())


@dataclass
class PrefillJob(Job):
    stats: PrefillStats = field(default_factory=PrefillStats)


@dataclass
class ReplyJob(Job):
    stats: GenerationStats = field(default_factory=GenerationStats)
    max_tokens: int = 0
    stop: tuple[str, ...] = ()
    out: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    # Told P(end of message) once the prompt's evaluation has passed the person's words (on the loop's
    # thread, before the first token): the end-of-turn decision can use it while the reply is made.
    on_end_of_message: Callable[[float], None] | None = None
    sampler: Any = None
    next_token: int | None = None  # sampled, to be decoded in the next step
    # Set while the reader waits for the next piece: it has handled every piece before it.
    wanted: threading.Event = field(default_factory=threading.Event)
    _decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    _stops: StopStringFilter = field(init=False)
    _at_start: bool = True

    def __post_init__(self) -> None:
        self._stops = StopStringFilter(self.stop)

    @property
    def generating(self) -> bool:
        return self.next_token is not None

    def accept(self, token: int, piece: Callable[[int], bytes], is_end: Callable[[int], bool]) -> bool:
        """Take a sampled token: hand its text to the reader; False when the reply is complete."""
        stats = self.stats
        if is_end(token):
            stats.stop_reason = "end_of_turn"
            self._emit_tail()
            return False
        stats.generated_tokens += 1
        self._emit(self._stops.push(self._decoder.decode(piece(token))))
        if self._stops.stopped:
            stats.stop_reason = "stop_string"
            return False
        if stats.generated_tokens >= self.max_tokens:
            stats.stop_reason = "max_tokens"
            self._emit_tail()
            return False
        self.next_token = token
        return True

    def _emit_tail(self) -> None:
        self._emit(self._stops.push(self._decoder.decode(b"", final=True)) + self._stops.flush())

    def _emit(self, text: str) -> None:
        if self._at_start:
            text = text.lstrip()
            self._at_start = not text
        if text:
            if self.stats.first_token_s is None:
                self.stats.first_token_s = time.perf_counter() - self.submitted
            self.wanted.clear()
            self.out.put(text)

    def read(self) -> Iterator[str]:
        """The reply's text pieces, on the reader's thread; stops within one token once ``cancel``
        is set (waiting for the loop to record it)."""
        try:
            while True:
                if self.cancel is not None and self.cancel.is_set():
                    self.finished.wait()
                    return
                self.wanted.set()
                try:
                    item = self.out.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                if self.cancel is not None and self.cancel.is_set():
                    self.finished.wait()
                    return
                yield item
        finally:
            self.abandoned = True


class DecodeLoop:
    """The thread that owns the llama.cpp context once the engine is loaded."""

    def __init__(self, runtime: Any, slots: SlotTable, *, new_sampler: Callable[[], Any]) -> None:
        self.runtime = runtime
        self.slots = slots
        self.new_sampler = new_sampler
        self._cond = threading.Condition()
        self._waiting: list[Job] = []
        self._active: list[Job] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="llm-decode", daemon=True)
        self.cores: CoreShare | None = None  # the other engines' running jobs, let finish before a step
        self.yield_s = 0.0  # at most this long
        self.decode_steps = 0  # token steps run, the sequences they carried (batch sizes), their time
        self.decode_step_tokens = 0
        self.decode_step_s = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # submissions (any thread) ------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._stopping:
                raise EngineError("the LLM engine is closed", fix="load the engine again")
            self._waiting.append(job)
            self._cond.notify_all()

    def occupancy(self) -> tuple[int, int]:
        """Replies running and replies waiting for a slot (a cancelled one, ending within a token, is
        not counted: a barge-in's or a dropped speculative turn's reply is no longer work)."""
        with self._cond:
            running = sum(isinstance(job, ReplyJob) and not job.stopped() for job in self._active)
            waiting = sum(isinstance(job, ReplyJob) and not job.stopped() for job in self._waiting)
            return running, waiting

    def forget(self, conversation: str) -> None:
        with self._cond:
            self.slots.forget(conversation)

    # the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._iterate():
                pass
        except BaseException as err:  # never leave a reader waiting for a loop that is gone
            log.exception("the llm decode loop stopped")
            with self._cond:
                self._stopping = True
                self._fail_all(EngineError(f"the LLM engine stopped: {err}", fix="restart the appliance"))
            raise

    def _iterate(self) -> bool:
        with self._cond:
            while not self._stopping and not self._has_work():
                self._cond.wait(timeout=_POLL_S)
            if self._stopping:
                self._fail_all(EngineError("the LLM engine was closed during the reply", fix="retry"))
                return False
        try:
            with self._cond:
                self._admit()
            self._step()
        except Exception as err:  # a decode failure: the jobs in it fail, the loop goes on
            log.exception("llm decode step failed")
            with self._cond:
                for job in list(self._active):
                    self._finish(job, err)
        return True

    def _has_work(self) -> bool:
        return bool(self._waiting) or bool(self._active)

    def _admit(self) -> None:
        """Give waiting jobs their slots, replies first, each in the order it came (under the lock)."""
        replies = any(isinstance(job, ReplyJob) for job in self._waiting + self._active)
        if replies:  # reply work first: a prefill stops after its last chunk, freeing its slot
            for prefill in [j for j in self._active if isinstance(j, PrefillJob)]:
                self._finish(prefill, None)
        for job in list(self._waiting):
            if job.stopped() or (isinstance(job, PrefillJob) and replies):
                self._waiting.remove(job)
                self._finish(job, None)
                continue
            if isinstance(job, ReplyJob):
                self._supersede_earlier(job)
            slot = self.slots.claim(job.conversation, job.prompt)
            if slot is None:
                job.blocked_since = job.blocked_since or time.perf_counter()
                continue
            self._waiting.remove(job)
            job.slot = slot
            if isinstance(job, ReplyJob) and job.blocked_since:
                job.stats.queued_s = time.perf_counter() - job.blocked_since
            self._place(job)
            self._active.append(job)

    def _supersede_earlier(self, job: ReplyJob) -> None:
        slot = self.slots.owned_by(job.conversation)
        if slot is None or not slot.busy:
            return
        for other in self._active:
            if other.slot is slot and other is not job:
                other.superseded = True

    def _place(self, job: Job) -> None:
        """Keep the longest prefix of the slot's cache that the job's prompt starts with."""
        assert job.slot is not None
        slot, system = job.slot, len(self.slots.system_tokens)
        reuse = max(common_prefix_length(slot.tokens, job.prompt), system)
        if isinstance(job, ReplyJob):
            reuse = min(reuse, len(job.prompt) - 1)  # the last token gives the logits
            if job.message_end is not None:  # ... and the words' last token P(end of message)
                reuse = min(reuse, job.message_end.index - 1)
            reuse = max(reuse, system)
            stats = job.stats
            if slot.prefill_span is not None:
                start, end = slot.prefill_span
                stats.prefilled_tokens = max(0, min(reuse, end) - start)
            stats.discarded_prefill_tokens = slot.keep(reuse)
            slot.prefill_span = None  # what follows is this reply's own
            job.sampler = self.new_sampler()
        else:
            assert isinstance(job, PrefillJob)
            job.stats.cached_tokens = reuse
            if job.message_end is not None and job.message_end.index == len(job.prompt):
                reuse = max(min(reuse, len(job.prompt) - 1), system)  # the last token's row is read
            start = reuse if slot.prefill_span is None else min(slot.prefill_span[0], reuse)
            job.stats.discarded_tokens = slot.keep(reuse)
            slot.prefill_span = (start, reuse) if reuse > start else None
        self.runtime.truncate(reuse, slot.seq)
        job.pending = job.prompt[reuse:]

    def _step(self) -> None:
        self._wait_for_readers()
        if self.cores is not None and self.yield_s > 0:
            self.cores.wait_idle(self.yield_s)  # before the stopped jobs go: a wait may have stopped some
        with self._cond:
            for job in [j for j in self._active if j.stopped()]:
                self._finish(job, None)
            active = list(self._active)
        replies = [job for job in active if isinstance(job, ReplyJob)]
        done: list[Job] = []
        generating = [job for job in replies if job.generating]
        if generating:
            done += self._decode_step(generating)
        evaluating = [job for job in replies if job.pending]
        if evaluating:
            done += self._prompt_chunk(evaluating[0])
        elif not replies:
            prefills = [job for job in active if isinstance(job, PrefillJob)]
            if prefills:
                done += self._prefill_chunk(prefills[0])
        if done:
            with self._cond:
                for job in done:
                    self._finish(job, None)

    def _wait_for_readers(self) -> None:
        """Before a reply's next token: its reader has handled the text before it (at most
        READER_WAIT_S), so that what it started with that text (Piper on a finished clause, announced
        in ``cores``) is waited for instead of run beside the step."""
        with self._cond:
            replies = [
                j for j in self._active if isinstance(j, ReplyJob) and j.generating and not j.stopped()
            ]
        deadline = time.monotonic() + READER_WAIT_S
        for job in replies:
            job.wanted.wait(max(0.0, deadline - time.monotonic()))

    def _decode_step(self, jobs: list[ReplyJob]) -> list[Job]:
        runtime = self.runtime
        items = []
        for job in jobs:
            assert job.slot is not None and job.next_token is not None
            items.append((job.next_token, len(job.slot.tokens), job.slot.seq))
        started = time.perf_counter()
        runtime.decode_step(items)
        self.decode_step_s += time.perf_counter() - started
        self.decode_steps += 1
        self.decode_step_tokens += len(items)
        done: list[Job] = []
        for index, job in enumerate(jobs):
            assert job.slot is not None and job.next_token is not None
            job.slot.tokens.append(job.next_token)
            job.next_token = None
            if not job.accept(
                runtime.sample(job.sampler, index), runtime.piece, runtime.is_end_of_generation
            ):
                done.append(job)
        return done

    def _prompt_chunk(self, job: ReplyJob) -> list[Job]:
        assert job.slot is not None
        start = len(job.prompt) - len(job.pending)
        chunk, job.pending = job.pending[:PROMPT_CHUNK_TOKENS], job.pending[PROMPT_CHUNK_TOKENS:]
        end = job.message_end
        if end is not None and start <= end.index - 1 < start + len(chunk):
            logits = self.runtime.decode_with_row(chunk, end.index - 1 - start, job.slot.seq)
            job.slot.tokens.extend(chunk)
            self._tell_end_of_message(job, tokens_probability(logits, end.tokens))
        else:
            self.runtime.decode(chunk, job.slot.seq)
            job.slot.tokens.extend(chunk)
        job.stats.evaluated_prompt_tokens += len(chunk)
        if job.pending:
            return []
        token = self.runtime.sample(job.sampler)
        return [] if job.accept(token, self.runtime.piece, self.runtime.is_end_of_generation) else [job]

    def _prefill_chunk(self, job: PrefillJob) -> list[Job]:
        slot = job.slot
        assert slot is not None
        chunk, job.pending = job.pending[:PREFILL_BATCH_TOKENS], job.pending[PREFILL_BATCH_TOKENS:]
        start = len(slot.tokens) if slot.prefill_span is None else slot.prefill_span[0]
        self.runtime.decode(chunk, slot.seq)
        slot.tokens.extend(chunk)
        job.stats.evaluated_tokens += len(chunk)
        slot.prefill_span = (start, len(slot.tokens))
        if job.pending:
            return []
        end = job.message_end
        if end is not None and end.index == len(job.prompt):  # words with no trailing punctuation
            job.stats.end_of_message_p = tokens_probability(self.runtime.logits(-1), end.tokens)
        return [job]

    @staticmethod
    def _tell_end_of_message(job: ReplyJob, probability: float) -> None:
        job.stats.end_of_message_p = probability
        if job.on_end_of_message is None:
            return
        try:
            job.on_end_of_message(probability)
        except Exception:  # the listener's failure must not stop the reply
            log.exception("the end-of-message listener failed")

    def _finish(self, job: Job, error: BaseException | None) -> None:
        """Record how the job ended, free its slot and wake its reader (under the lock)."""
        if job in self._active:
            self._active.remove(job)
        if job.slot is not None:
            if error is not None:  # the cache may hold more than the mirror: make them agree
                self.runtime.truncate(len(job.slot.tokens), job.slot.seq)
            self.slots.release(job.slot)
        now = time.perf_counter()
        if isinstance(job, ReplyJob):
            stats = job.stats
            if error is None and not stats.stop_reason:
                stats.cancelled, stats.stop_reason = True, "cancelled"
            if job.sampler is not None:
                self.runtime.free_sampler(job.sampler)
                job.sampler = None
            stats.total_s = now - job.submitted
            job.out.put(error if error is not None else _END)
        elif isinstance(job, PrefillJob):  # cut short, or never started (a reply came first)
            job.stats.cancelled = bool(job.pending) or job.slot is None or error is not None
            job.stats.seconds = now - job.submitted
        job.finished.set()

    def _fail_all(self, error: BaseException) -> None:
        for job in self._waiting + self._active:
            self._finish(job, error)
        self._waiting.clear()
