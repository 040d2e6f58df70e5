"""The watchdog pinger: a task on the daemon's own event loop.

Because the pings come from the loop itself, a loop that is blocked (a synchronous engine call
made on it by mistake, a deadlock) stops pinging and systemd restarts the daemon. An optional
health check lets the daemon also stop pinging when, say, an engine worker thread is stuck.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from appliance.service.notify import Notifier, WatchdogSettings, watchdog_settings

log = logging.getLogger(__name__)

HealthCheck = Callable[[], bool]


async def ping_watchdog(
    notifier: Notifier, ping_every_s: float, *, healthy: HealthCheck | None = None
) -> None:
    """Send ``WATCHDOG=1`` every ``ping_every_s`` until cancelled; skip a ping when unhealthy."""
    if ping_every_s <= 0:
        raise ValueError(f"ping_every_s must be positive (got {ping_every_s})")
    while True:
        if healthy is None or _is_healthy(healthy):
            notifier.watchdog()
        else:
            log.error("health check failed: withholding the watchdog ping so systemd restarts the daemon")
        await asyncio.sleep(ping_every_s)


def _is_healthy(healthy: HealthCheck) -> bool:
    try:
        return bool(healthy())
    except Exception:
        log.exception("health check raised")
        return False


def start_watchdog(
    notifier: Notifier,
    settings: WatchdogSettings | None = None,
    *,
    healthy: HealthCheck | None = None,
) -> asyncio.Task[None] | None:
    """Start pinging on the running loop when systemd asked for a watchdog; None when it did not."""
    chosen = settings or watchdog_settings()
    if chosen is None:
        return None
    log.debug("watchdog: interval %.1f s, pinging every %.1f s", chosen.interval_s, chosen.ping_every_s)
    return asyncio.get_running_loop().create_task(
        ping_watchdog(notifier, chosen.ping_every_s, healthy=healthy), name="systemd-watchdog"
    )
