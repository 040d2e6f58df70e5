"""Where a turn's milliseconds go: every piece of engine work timed as it runs in the pipeline.

``EngineTimeline.install(engines)`` wraps the session's engine workers (ASR, partial ASR, Smart Turn,
TTS, ...: each job named by worker and function) and the LLM's decode loop (the reply's prompt, the
partials' prefill, each token step, its waits for the other engines: llm.yield_ms). ``profile(trace)`` then says, for each stage of the turn's trace
(``asr``, ``llm_first_token``, ``first_clause``, ``tts_first_audio``), how many of its milliseconds each
kind of work was running, and how many no engine was (Python, the event loop, waiting): what the stage
cost, and what ran beside it on the same cores. A measuring tool for the benchmarks; the product does
not load it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from appliance.trace.record import STAGES

PROFILED_STAGES = ("asr", "llm_first_token", "first_clause", "tts_first_audio")
IDLE = "no_engine"  # a stage's time when no engine work ran: Python between stages, the loop, waits

Span = tuple[str, float, float]  # (what, start, end) in time.monotonic() seconds


class EngineTimeline:
    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def record(self, what: str, start: float, end: float) -> None:
        with self._lock:
            self._spans.append((what, start, end))

    @contextmanager
    def timed(self, what: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.record(what, start, time.monotonic())

    def spans(self, start: float, end: float) -> list[Span]:
        """The work that overlapped [start, end], clipped to it."""
        with self._lock:
            return [(w, max(s, start), min(e, end)) for w, s, e in self._spans if s < end and e > start]

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    # --- hooks ------------------------------------------------------------------------------------

    def install(self, engines: Any) -> None:
        """Time the jobs of ``engines``' workers (except the LLM's, timed inside its decode loop)."""
        from appliance.pipeline.workers import EngineWorker
        from engines.llm.scheduler import DecodeLoop

        for worker in {id(w): w for w in vars(engines).values() if isinstance(w, EngineWorker)}.values():
            if worker is not getattr(engines, "llm_worker", None):
                self._wrap_worker(worker)
        from engines.cores import CoreShare

        for name, label in (
            ("_prompt_chunk", "llm_prompt"),
            ("_prefill_chunk", "llm_prefill"),
            ("_decode_step", "llm_token"),
        ):
            self._patch(DecodeLoop, name, label)
        self._patch(CoreShare, "wait_idle", "llm_waits_for_others")

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _wrap_worker(self, worker: Any) -> None:
        submit = worker._submit

        def timed_submit(fn: Callable[..., Any], *args: Any, **options: Any) -> Any:
            what = f"{worker.name}:{getattr(fn, '__name__', 'job')}"

            def run(*inner: Any) -> Any:
                with self.timed(what):
                    return fn(*inner)

            return submit(run, *args, **options)

        worker._submit = timed_submit
        self._undo.append(lambda: vars(worker).pop("_submit", None))

    def _patch(self, cls: type, name: str, label: str) -> None:
        original = getattr(cls, name)
        timeline = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with timeline.timed(label):
                return original(*args, **kwargs)

        setattr(cls, name, timed)
        self._undo.append(lambda: setattr(cls, name, original))

    # --- the profile ------------------------------------------------------------------------------

    def profile(self, trace: Any) -> dict[str, dict[str, float]]:
        """Per stage of ``trace``: ms of each kind of work inside it, and ``no_engine``."""
        result: dict[str, dict[str, float]] = {}
        for stage in PROFILED_STAGES:
            first, last = STAGES[stage]
            start, end = getattr(trace, first), getattr(trace, last)
            if start is None or end is None or end <= start:
                continue
            spans = self.spans(start, end)
            busy: dict[str, float] = {}
            for what, s, e in spans:
                busy[what] = busy.get(what, 0.0) + (e - s) * 1000.0
            busy[IDLE] = (end - start) * 1000.0 - _covered_ms(spans)
            result[stage] = {k: round(v, 1) for k, v in sorted(busy.items())}
        return result


def _covered_ms(spans: list[Span]) -> float:
    """The time at least one span covers (their union)."""
    total, reach = 0.0, float("-inf")
    for _, s, e in sorted(spans, key=lambda span: span[1]):
        if e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total * 1000.0
