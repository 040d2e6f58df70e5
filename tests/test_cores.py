"""The LLM lets the other engines' running jobs finish before its next step (engines.cores): the engine
workers count their jobs, the wait ends when the last one does, and never lasts past its bound."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

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
