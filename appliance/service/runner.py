"""The daemon's life under systemd: load, READY, serve with watchdog pings, STOPPING, close.

``appliance run`` hands its three parts to :func:`run_service`:

- ``load()`` (blocking, in a worker thread): load and warm the engines; returns what ``serve`` needs;
- ``serve(resources, service)`` (a coroutine): the daemon itself, until cancelled;
- ``close(resources)`` (blocking, in a worker thread): release the engines.

READY=1 is sent only after ``load`` returned, so ``systemctl start`` returns when the appliance can
answer. SIGTERM and SIGINT stop it: STOPPING=1, ``serve`` is cancelled, ``close`` runs. Outside
systemd the same code runs and the notifications are no-ops.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from appliance.service.loop_watch import LoopWatch, stop_watching, watch_this_loop
from appliance.service.notify import Notifier, WatchdogSettings, watchdog_settings
from appliance.service.watchdog import HealthCheck, start_watchdog
from engines.errors import EngineError

log = logging.getLogger(__name__)

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
# sysexits' EX_CONFIG: the engines cannot load and a restart will not change that (a damaged bundle,
# a llama.cpp build this processor cannot run). The unit's RestartPreventExitStatus= names it.
EXIT_CANNOT_LOAD = 78
# sysexits' EX_TEMPFAIL: the daemon stopped cleanly to be started again (a bundle version activated that
# does not fit in memory beside the running one); Restart=on-failure starts it again.
EXIT_RESTART = 75


@dataclass
class ServiceControl:
    """What the running daemon can do with its service state."""

    notifier: Notifier
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    restart_requested: bool = False

    def status(self, text: str) -> None:
        """One line for ``systemctl status`` (e.g. "ready: 2 sessions, last turn 0.61 s")."""
        log.debug("status: %s", text)
        self.notifier.status(text)

    def request_stop(self) -> None:
        self.stop_requested.set()

    def request_restart(self) -> None:
        """Stop cleanly and exit with EXIT_RESTART, for systemd to start the daemon again."""
        self.restart_requested = True
        self.stop_requested.set()


@dataclass
class Service(Generic[T]):
    load: Callable[[], T]
    serve: Callable[[T, ServiceControl], Awaitable[None]]
    close: Callable[[T], None] | None = None
    notifier: Notifier = field(default_factory=Notifier)
    watchdog: WatchdogSettings | None = field(default_factory=watchdog_settings)
    healthy: HealthCheck | None = None
    stop_timeout_s: float = 10.0
    _loop_watch: LoopWatch | None = field(default=None, init=False, repr=False)

    async def run(self) -> int:
        control = ServiceControl(self.notifier)
        loop = asyncio.get_running_loop()
        installed = _install_stop_signals(loop, control.request_stop)
        pinger = start_watchdog(self.notifier, self.watchdog, healthy=self.healthy) if self.watchdog else None
        try:
            return await self._run(control)
        finally:
            if self._loop_watch is not None:
                await stop_watching(self._loop_watch)
            if pinger is not None:
                pinger.cancel()
                await asyncio.gather(pinger, return_exceptions=True)
            for signum in installed:
                loop.remove_signal_handler(signum)

    async def _run(self, control: ServiceControl) -> int:
        control.status("loading and warming the engines")
        try:
            resources = await asyncio.to_thread(self.load)
        except EngineError as err:
            log.error("the engines cannot load: %s", err)
            self.notifier.failed(str(err))
            return EXIT_CANNOT_LOAD
        except Exception as err:
            log.exception("loading the engines failed")
            self.notifier.failed(str(err))
            return EXIT_FAILED
        if control.stop_requested.is_set():
            self.notifier.stopping("stopping: asked to stop while loading")
            await self._close(resources)
            return EXIT_OK
        self.notifier.ready("ready")
        log.info("ready")
        # Watched from READY on: nobody is served while the engines load, and native libraries keep
        # the interpreter now and then while they load.
        self._loop_watch = watch_this_loop()
        code = await self._serve(resources, control)
        await self._close(resources)
        return code

    async def _serve(self, resources: T, control: ServiceControl) -> int:
        serving = asyncio.ensure_future(self.serve(resources, control))
        stopping = asyncio.ensure_future(control.stop_requested.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not serving.done():
            self.notifier.stopping("stopping")
            log.info("stopping")
            serving.cancel()
            done, _ = await asyncio.wait({serving}, timeout=self.stop_timeout_s)
            if not done:
                log.error("the daemon did not stop within %.1f s", self.stop_timeout_s)
                return EXIT_FAILED
            return EXIT_RESTART if control.restart_requested else EXIT_OK
        if serving.cancelled():
            self.notifier.stopping("stopping")
            return EXIT_OK
        error = serving.exception()
        if error is not None:
            log.error("the daemon failed: %s", error, exc_info=error)
            self.notifier.failed(str(error))
            return EXIT_FAILED
        self.notifier.stopping("stopping: finished")
        return EXIT_OK

    async def _close(self, resources: T) -> None:
        if self.close is None:
            return
        try:
            await asyncio.to_thread(self.close, resources)
        except Exception:
            log.exception("closing the engines failed")


def _install_stop_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> list[int]:
    installed: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop)
        except (NotImplementedError, RuntimeError):  # not the main thread
            continue
        installed.append(signum)
    return installed


def run_service(
    load: Callable[[], T],
    serve: Callable[[T, ServiceControl], Awaitable[None]],
    close: Callable[[T], None] | None = None,
    *,
    healthy: HealthCheck | None = None,
    notifier: Notifier | None = None,
) -> int:
    """Run the daemon until it is stopped; returns the process exit status."""
    service = Service(load, serve, close, healthy=healthy, notifier=notifier or Notifier())
    return asyncio.run(service.run())
