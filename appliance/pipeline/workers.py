"""One worker thread per engine: blocking engine calls run there, never on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_ITEM, _DONE, _ERROR = "item", "done", "error"
_POLL_S = 0.02


class EngineWorker:
    """A single thread owning one engine. Calls are queued in order (one at a time per engine)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-{name}")

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    async def stream(
        self,
        produce: Callable[[], Iterator[T]],
        *,
        cancel: threading.Event,
        max_pending: int = 8,
    ) -> AsyncGenerator[T, None]:
        """Iterate ``produce()`` on the worker thread, handing items to the loop.

        At most ``max_pending`` items wait for the consumer (the thread blocks beyond that). Closing
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
                for item in items:
                    while not room.acquire(timeout=_POLL_S):
                        if cancel.is_set():
                            return
                    if cancel.is_set():
                        return
                    post(_ITEM, item)
            except BaseException as err:  # handed to the consumer, re-raised there
                post(_ERROR, err)
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    with contextlib.suppress(Exception):
                        close()  # a generator's own cleanup runs here, on this thread
                post(_DONE, None)

        loop.run_in_executor(self._executor, run)
        try:
            while True:
                kind, value = await queue.get()
                if kind == _ITEM:
                    room.release()
                    yield value
                elif kind == _ERROR:
                    raise value
                else:
                    return
        finally:
            cancel.set()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
