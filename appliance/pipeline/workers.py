"""One worker thread per engine: blocking engine calls run there, never on the event loop.

Work for a reply (``call``, ``stream``) comes first. Background work (``background``: a partial
transcript, an LLM prefill while the person is still speaking) starts only when a thread of the worker
is free (with one thread: an idle worker), and any reply work queued after it sets its cancel event, so
it yields at its next check. A worker with several threads serves an engine that schedules concurrent
calls itself (the LLM batches the replies of several sessions).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from engines.cores import CoreShare

log = logging.getLogger(__name__)

T = TypeVar("T")

_ITEM, _DONE, _ERROR = "item", "done", "error"
_NO_ITEM = object()
_POLL_S = 0.02


class EngineWorker:
    """The thread(s) owning one engine. Calls are queued in order; with one thread (the default)
    they run one at a time."""

    def __init__(self, name: str, *, threads: int = 1, cores: CoreShare | None = None) -> None:
        """``cores``: each job is counted there while it runs (the LLM lets it finish first)."""
        self.name = name
        self.threads = threads
        self._cores = cores
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"engine-{name}")
        self._count_lock = threading.Lock()
        self._queued = 0  # calls submitted and not finished (reply and background alike)
        self._background: set[threading.Event] = set()  # cancel events of background calls queued or running

    def expect(self) -> None:
        """A call is about to come (within engines.cores.EXPECT_S): the LLM's next step waits for it
        as for a running one."""
        if self._cores is not None:
            self._cores.expect()

    @property
    def idle(self) -> bool:
        """Nothing queued or running."""
        with self._count_lock:
            return self._queued == 0

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        self._preempt()
        return await self._run(fn, *args)

    async def background(self, fn: Callable[..., T], *args: Any, cancel: threading.Event) -> T | None:
        """Run ``fn(*args)`` if a thread is free (else None at once, nothing run). ``cancel`` is set
        when reply work arrives behind it; ``fn`` is expected to pass it on to the engine."""
        with self._count_lock:
            if self._queued >= self.threads:
                return None
            self._background.add(cancel)
        try:
            return await self._run(fn, *args)
        finally:
            with self._count_lock:
                self._background.discard(cancel)

    def _preempt(self) -> None:
        with self._count_lock:
            for cancel in self._background:
                cancel.set()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._submit(fn, *args))

    def _submit(self, fn: Callable[..., T], *args: Any, counted: bool = True) -> Future[T]:
        """``counted`` False: ``fn`` counts its own work in ``cores`` (a stream, not its waits)."""
        # Counted until the job finishes or is cancelled before it started (a consumer that gave up
        # on a queued call): the done callback runs in both cases.
        with self._count_lock:
            self._queued += 1
        try:
            future = (
                self._executor.submit(self._counted, fn, *args)
                if counted
                else self._executor.submit(fn, *args)
            )
        except RuntimeError:  # shut down
            self._job_done(None)
            raise
        future.add_done_callback(self._job_done)
        return future

    def _counted(self, fn: Callable[..., T], *args: Any) -> T:
        with self._running():
            return fn(*args)

    def _running(self) -> contextlib.AbstractContextManager[None]:
        return self._cores.running() if self._cores is not None else contextlib.nullcontext()

    def _job_done(self, _future: Future[Any] | None) -> None:
        with self._count_lock:
            self._queued -= 1

    async def stream(
        self,
        produce: Callable[[], Iterator[T]],
        *,
        cancel: threading.Event,
        max_pending: int = 8,
    ) -> AsyncGenerator[T, None]:
        """Iterate ``produce()`` on the worker thread, handing items to the loop.

        At most ``max_pending`` items are made and not yet handled by the consumer (an item counts
        until the consumer asks for the next one; the thread waits before making more): with 1, the
        next item is asked of ``produce`` only once the consumer is done with the last. Closing
        the generator (``contextlib.aclosing`` around an ``async for`` that may break) or cancelling
        its consumer sets ``cancel``: the thread stops before its next item (the engine itself checks
        ``cancel`` too, e.g. between LLM tokens).
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        room = threading.Semaphore(max_pending)

        def post(kind: str, value: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

        def run() -> None:
            items: Iterator[T] | None = None
            try:
                if cancel.is_set():  # cancelled while queued behind another call: do not start
                    return
                items = produce()
                iterator = iter(items)
                while True:
                    while not room.acquire(timeout=_POLL_S):
                        if cancel.is_set():
                            return
                    if cancel.is_set():
                        return
                    with self._running():  # making an item, not waiting for room, is work
                        item = next(iterator, _NO_ITEM)
                    if item is _NO_ITEM:
                        break
                    post(_ITEM, item)
            except BaseException as err:  # handed to the consumer, re-raised there
                post(_ERROR, err)
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    with contextlib.suppress(Exception):
                        close()  # a generator's own cleanup runs here, on this thread
                post(_DONE, None)

        self._preempt()
        self._submit(run, counted=False)
        try:
            while True:
                kind, value = await queue.get()
                if kind == _ITEM:
                    yield value
                    room.release()  # the consumer is back for more: it is done with this one
                elif kind == _ERROR:
                    raise value
                else:
                    return
        finally:
            cancel.set()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
