"""A bundle version activated while the daemon runs is switched to between turns, without dropping
anyone (``appliance bundle activate`` only writes ``bundles.json``; the daemon watches it).

When there is memory for both engine sets, the new one is loaded beside the running one while calls go
on; then new turns run on it: each session moves at its next quiet moment (no turn running, nobody
speaking), and the old set is closed once no session uses it. A set that cannot load leaves the running
one serving and makes it the active version again, loudly. When there is no room for both, the daemon
waits until no call is in progress and no turn is running, then stops cleanly to be started again by
systemd on the new version (EXIT_RESTART; the SIP port answers 503 while it loads).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from appliance.daemon.bundle_view import summarize_bundle
from appliance.daemon.crash_guard import CrashGuard
from appliance.service.runner import ServiceControl
from engines.bundle_store import BundleStore
from engines.errors import BundleError, EngineError
from engines.labels import Label

if TYPE_CHECKING:
    from appliance.daemon.load import Daemon
    from appliance.pipeline.engines import SessionEngines
    from engines.bundle import Bundle

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
ROOM_FACTOR = 1.2  # the new set is taken to need what the whole process holds now, and a fifth more
RETIRE_POLL_S = 0.1


class SwitchHow(Label):
    HOT = "hot"  # loaded beside the running engines; sessions moved between turns
    RESTART = "restart"  # no memory for both: the daemon restarts on it once no call is in progress
    FAILED = "failed"  # it cannot load: the running version serves on and is the active one again


@dataclass(frozen=True)
class Switched:
    version: str
    how: SwitchHow
    load_s: float = 0.0  # the new set's loading, while the old one served
    moved_s: float = 0.0  # from the new set ready to the last session on it
    peak_rss_bytes: int = 0
    problem: str = ""


def room_for_both(available_bytes: int, process_rss_bytes: int) -> bool:
    return available_bytes >= process_rss_bytes * ROOM_FACTOR


async def watch_bundle(
    daemon: Daemon,
    control: ServiceControl,
    announce: Callable[[Switched], None],
    *,
    interval_s: float = WATCH_INTERVAL_S,
) -> None:
    """Until cancelled: switch to the active version of ``bundle.dir`` whenever it is not the running one."""
    store = BundleStore(daemon.settings.bundle.dir)
    while True:
        await asyncio.sleep(interval_s)
        try:
            active = store.state().active
        except BundleError as err:
            log.warning("bundle switch: %s", err)
            continue
        if active is None or active == daemon.bundle.version:
            continue
        result = await switch_bundle(daemon, control, store, active)
        announce(result)
        if result.how == SwitchHow.RESTART:
            return


async def switch_bundle(
    daemon: Daemon, control: ServiceControl, store: BundleStore, version: str
) -> Switched:
    process = psutil.Process()
    if not room_for_both(psutil.virtual_memory().available, process.memory_info().rss):
        return await _restart_when_idle(daemon, control, version)
    running = daemon.bundle.version
    log.info("bundle version %s activated: loading its engines beside those of %s", version, running)
    started = time.monotonic()
    try:
        new_engines, bundle, seconds = await _load_beside(daemon)
    except (EngineError, OSError) as err:
        problem = (
            f"the engine bundle version {version} was activated but cannot load ({err}); version "
            f"{running} goes on serving and is the active one again"
        )
        log.error("%s", problem)
        if running is not None:
            store.activate(running)
        return Switched(version, SwitchHow.FAILED, time.monotonic() - started, problem=problem)
    load_s = time.monotonic() - started
    peak = process.memory_info().rss
    old = daemon.engines
    daemon.serve_with(new_engines, summarize_bundle(bundle), seconds)
    if daemon.bundle.version is not None:
        CrashGuard.of(daemon.settings.bundle).now_running(daemon.bundle.version)
    ready = time.monotonic()
    while any(session.engines is old for session in daemon.sessions):
        await asyncio.sleep(RETIRE_POLL_S)
    moved_s = time.monotonic() - ready
    await old.close(keep=[new_engines.aec, new_engines.denoise, new_engines.wake])
    log.info(
        "bundle version %s serves: loaded in %.1f s beside %s, every session on it %.2f s later "
        "(peak %.0f MB)",
        version,
        load_s,
        running,
        moved_s,
        peak / 1e6,
    )
    return Switched(version, SwitchHow.HOT, load_s, moved_s, peak)


async def _load_beside(daemon: Daemon) -> tuple[SessionEngines, Bundle, dict[str, float]]:
    from appliance.engine_set import build_engines, check_llm_runs, load_engines, open_bundle

    settings, old = daemon.settings, daemon.engines
    bundle = await asyncio.to_thread(open_bundle, settings, daemon_start=True)
    await asyncio.to_thread(check_llm_runs, bundle)
    engines = await asyncio.to_thread(build_engines, settings, bundle)
    engines.aec, engines.aec_worker = old.aec, old.aec_worker  # the room's echo model is no bundle's
    # A session's suppressor and wake word streams outlive the switch (a call goes on): they keep
    # their engines and workers.
    engines.denoise, engines.denoise_worker = old.denoise, old.denoise_worker
    engines.wake, engines.wake_worker = old.wake, old.wake_worker
    try:
        # One at a time beside the serving set: +0.6 s of load, and the calls' longest RTP gap was
        # 145-217 ms instead of 224-313 ms (docs/model-updates.md).
        seconds = await load_engines(engines, one_at_a_time=True)
    except BaseException:
        await engines.close(keep=[old.aec, old.denoise, old.wake])
        raise
    return engines, bundle, seconds


async def _restart_when_idle(daemon: Daemon, control: ServiceControl, version: str) -> Switched:
    available, rss = psutil.virtual_memory().available, psutil.Process().memory_info().rss
    log.warning(
        "bundle version %s activated: no room to load it beside the running engines (%.0f MB free, "
        "about %.0f MB needed); the daemon restarts on it once no call is in progress",
        version,
        available / 1e6,
        rss * ROOM_FACTOR / 1e6,
    )
    while any(session.in_use for session in daemon.sessions):
        await asyncio.sleep(RETIRE_POLL_S)
    control.request_restart()
    return Switched(version, SwitchHow.RESTART, peak_rss_bytes=rss)
