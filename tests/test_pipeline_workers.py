"""Engine worker threads: calls run off the event loop, one at a time per engine; streams are
bounded and stop when their consumer leaves."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from appliance.pipeline.workers import EngineWorker


def test_calls_run_on_the_engines_own_thread_in_order() -> None:
    worker = EngineWorker("test")
    seen: list[tuple[int, str]] = []

    def job(n: int) -> int:
        time.sleep(0.01)
        seen.append((n, threading.current_thread().name))
        return n * 2

    async def main() -> list[int]:
        return list(await asyncio.gather(*(worker.call(job, n) for n in range(5))))

    assert asyncio.run(main()) == [0, 2, 4, 6, 8]
    assert [n for n, _ in seen] == [0, 1, 2, 3, 4]
    assert {name for _, name in seen} == {seen[0][1]} and seen[0][1].startswith("engine-test")
    worker.shutdown()


def test_a_stream_is_bounded_and_stops_when_the_consumer_leaves() -> None:
    worker = EngineWorker("test")
    produced: list[int] = []
    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                produced.append(n)
                yield n
                n += 1
        finally:
            closed.set()

    async def main() -> list[int]:
        taken: list[int] = []
        cancel = threading.Event()
        async with contextlib.aclosing(worker.stream(endless, cancel=cancel, max_pending=4)) as items:
            async for item in items:
                taken.append(item)
                if len(taken) == 3:
                    await asyncio.sleep(0.2)  # a slow consumer: the producer must wait, not run ahead
                    assert len(produced) <= 3 + 4 + 1
                    break
        assert cancel.is_set()
        await worker.call(lambda: None)  # the stream's job has ended
        return taken

    assert asyncio.run(main()) == [0, 1, 2]
    assert closed.is_set(), "the generator was closed on the worker thread"
    worker.shutdown()


def test_a_stream_error_reaches_the_consumer() -> None:
    worker = EngineWorker("test")

    def failing() -> Iterator[str]:
        yield "first"
        raise RuntimeError("decode failed")

    async def main() -> list[str]:
        got: list[str] = []
        async for item in worker.stream(failing, cancel=threading.Event()):
            got.append(item)
        return got

    with pytest.raises(RuntimeError, match="decode failed"):
        asyncio.run(main())
    worker.shutdown()


def test_a_stream_cancelled_before_it_starts_never_runs() -> None:
    worker = EngineWorker("test")
    started = threading.Event()
    gate = threading.Event()

    def produce() -> Iterator[int]:
        started.set()
        yield 1

    async def main() -> None:
        blocker = asyncio.ensure_future(worker.call(gate.wait, 5.0))  # occupies the thread
        cancel = threading.Event()
        stream = worker.stream(produce, cancel=cancel)
        consumer = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.05)
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await stream.aclose()
        gate.set()
        await blocker
        await worker.call(lambda: None)

    asyncio.run(main())
    assert not started.is_set()
    worker.shutdown()


def test_background_work_runs_only_on_an_idle_worker_and_yields_to_reply_work() -> None:
    worker = EngineWorker("test")
    order: list[str] = []
    started = threading.Event()

    def long_background(cancel: threading.Event) -> str:
        started.set()
        for _ in range(200):  # an engine checking its cancel event between small steps
            if cancel.is_set():
                order.append("background yielded")
                return "cancelled"
            time.sleep(0.01)
        order.append("background finished")
        return "done"

    def reply() -> str:
        order.append("reply")
        return "reply"

    async def main() -> tuple[object, object, object]:
        cancel = threading.Event()
        first = asyncio.ensure_future(worker.background(long_background, cancel, cancel=cancel))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5.0)
        assert not worker.idle
        skipped = await worker.background(reply, cancel=threading.Event())  # busy: not run at all
        answered = await worker.call(reply)
        assert worker.idle
        return await first, skipped, answered

    began = time.monotonic()
    result, skipped, answered = asyncio.run(main())
    assert (result, skipped, answered) == ("cancelled", None, "reply")
    assert order == ["background yielded", "reply"]
    assert time.monotonic() - began < 1.5  # the reply did not wait for the 2 s of background work
    worker.shutdown()
