"""The loop watch on a real event loop: a synchronous call made on the loop is a stall named with the
place it was made; a native call on another thread that keeps the interpreter is a stall too."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from appliance.service.loop_watch import NOT_SEEN, LoopWatch


def _reads_a_file_the_slow_way() -> None:
    time.sleep(0.5)  # the mistake: a blocking call on the loop


def _interpreter_held_for(seconds: float) -> None:
    """Builtin sum over a range runs in C without giving the interpreter up, as a native library's
    load can: sized on this machine to last about ``seconds``."""
    started = time.perf_counter()
    sum(range(1_000_000))
    per_million_s = max(time.perf_counter() - started, 1e-4)
    sum(range(int(seconds / per_million_s * 1_000_000)))


async def _watched(body, stall_s: float = 0.25) -> LoopWatch:
    watch = LoopWatch(stall_s)
    watch.start()
    try:
        await asyncio.sleep(0.2)
        await body()
        await asyncio.sleep(0.2)
    finally:
        await watch.stop()
    return watch


def test_a_blocking_call_on_the_loop_is_a_stall_named_with_its_place(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        for _ in range(3):
            await asyncio.sleep(0.05)  # awaiting is not a stall
        _reads_a_file_the_slow_way()

    with caplog.at_level(logging.WARNING, logger="appliance.service.loop_watch"):
        watch = asyncio.run(_watched(body))
    named = [s for s in watch.stalls if "_reads_a_file_the_slow_way" in s.where]
    assert len(named) == 1, watch.stalls
    assert 0.4 <= named[0].seconds < 2.0 and "tests/test_loop_watch.py:" in named[0].where
    figures = watch.figures()
    assert figures.stalls >= 1 and figures.longest_s >= named[0].seconds and figures.held_s >= 0.4
    assert any(
        "event loop was held" in r.getMessage() and "_reads_a_file" in r.getMessage() for r in caplog.records
    )


def test_a_native_call_keeping_the_interpreter_on_another_thread_is_a_stall() -> None:
    async def body() -> None:
        worker = threading.Thread(target=_interpreter_held_for, args=(0.8,))
        worker.start()
        await asyncio.to_thread(worker.join)

    watch = asyncio.run(_watched(body))
    assert watch.stalls, "a loop kept from the interpreter for ~0.8 s was not noticed"
    longest = max(watch.stalls, key=lambda s: s.seconds)
    assert longest.seconds >= 0.3
    # The watching thread could not run either, or saw the loop waiting for the interpreter: the stall
    # is counted with what could be seen, never with a place in the test's own body.
    assert longest.where == NOT_SEEN or "body" not in longest.where.split(" > ")[-1]
