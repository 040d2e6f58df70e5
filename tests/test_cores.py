"""The LLM lets the other engines' running jobs finish before its next step (engines.cores): the engine
workers count their jobs, the wait ends when the last one does, and never lasts past its bound."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

from appliance.pipeline.workers import EngineWorker
from engines.cores import CoreShare


def test_the_wait_ends_when_the_other_engines_job_does() -> None:
    cores = CoreShare()
    worker = EngineWorker("tts", cores=cores)
    started, release = threading.Event(), threading.Event()

    def synthesize() -> str:
        started.set()
        release.wait(5)
        return "audio"

    async def run() -> tuple[str, float]:
        job = asyncio.ensure_future(worker.call(synthesize))
        await asyncio.to_thread(started.wait, 5)
        waited = asyncio.create_task(asyncio.to_thread(_timed_wait, cores, 5.0))
        await asyncio.sleep(0.1)
        assert not waited.done()  # the job still runs: the LLM waits
        release.set()
        return await job, await waited

    audio, waited_s = asyncio.run(run())
    worker.shutdown()
    assert audio == "audio"
    assert 0.05 < waited_s < 4.0  # ended with the job, not at the bound
    assert cores.waits == 1


def test_the_wait_is_bounded_and_nothing_is_waited_for_when_no_job_runs() -> None:
    cores = CoreShare()
    assert _timed_wait(cores, 5.0) < 0.05 and cores.waits == 0
    with cores.running():
        waited = _timed_wait(cores, 0.2)
    assert 0.15 < waited < 2.0
    assert _timed_wait(cores, 5.0) < 0.05  # the job is over


def test_a_failed_job_is_no_longer_counted() -> None:
    cores = CoreShare()
    worker = EngineWorker("asr", cores=cores)

    def fails() -> None:
        raise RuntimeError("bad audio")

    async def run() -> None:
        with contextlib.suppress(RuntimeError):
            await worker.call(fails)

    asyncio.run(run())
    worker.shutdown()
    assert _timed_wait(cores, 5.0) < 0.05


def _timed_wait(cores: CoreShare, bound_s: float) -> float:
    started = time.monotonic()
    cores.wait_idle(bound_s)
    return time.monotonic() - started


def test_a_stream_waiting_for_its_consumer_is_not_counted_as_work() -> None:
    """Piper's stream held because playback has not taken its chunks computes nothing: the LLM (another
    call's, say) must not wait for it; while it makes a chunk, it is counted."""
    cores = CoreShare()
    worker = EngineWorker("tts", cores=cores)
    made = threading.Event()
    counted_while_making: list[bool] = []

    def chunks() -> Iterator[str]:
        counted_while_making.append(_timed_wait(cores, 0.05) >= 0.04)
        yield "first"
        yield "second"
        made.set()
        yield "third"  # made, then held: the consumer has not taken "second"

    async def run() -> float:
        stream = worker.stream(chunks, cancel=threading.Event(), max_pending=1)
        assert await stream.__anext__() == "first"
        await asyncio.to_thread(made.wait, 5)
        await asyncio.sleep(0.2)  # the thread now waits for room for "third"
        waited = await asyncio.to_thread(_timed_wait, cores, 5.0)
        await stream.aclose()
        return waited

    waited_s = asyncio.run(run())
    worker.shutdown()
    assert counted_while_making == [True]
    assert waited_s < 0.05


def test_an_announced_job_is_waited_for_until_it_has_run_and_the_announcement_lapses_alone() -> None:
    """A clause handed to Piper is on its worker a moment later: the LLM's step begun in between ran
    beside all of it (first audio 96-133 ms instead of 66-99). Announced, it is waited for from the
    announcement to its end; an announcement nothing follows ends by itself."""
    cores = CoreShare()
    finished = threading.Event()

    def job() -> None:
        time.sleep(0.05)  # the event loop's turns before the worker takes it
        with cores.running():
            time.sleep(0.05)
        finished.set()

    cores.expect(within_s=5.0)
    threading.Thread(target=job).start()
    cores.wait_idle(10.0)
    assert finished.is_set()  # not before the announced job had started and run
    cores.expect(within_s=0.1)
    assert 0.05 < _timed_wait(cores, 10.0) < 5.0  # nothing came: the announcement lapsed
    assert _timed_wait(cores, 10.0) < 0.05


def test_a_stream_of_one_asks_for_the_next_item_only_once_the_consumer_is_done_with_the_last() -> None:
    """The LLM's stream (max_pending=1): the next token is asked for once the turn has handled the
    piece before it, so whatever that piece started (Piper) is announced before the next step."""
    worker = EngineWorker("llm")
    log: list[str] = []

    def pieces() -> Iterator[str]:
        for name in ("a", "b", "c"):
            log.append(f"made {name}")
            yield name

    async def consume() -> None:
        async for piece in worker.stream(pieces, cancel=threading.Event(), max_pending=1):
            await asyncio.sleep(0.02)  # the turn's work on the piece
            log.append(f"handled {piece}")

    asyncio.run(consume())
    worker.shutdown()
    assert log == ["made a", "handled a", "made b", "handled b", "made c", "handled c"]
