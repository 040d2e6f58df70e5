"""What the admin page's control panel asks of the running daemon: a typed question answered through its
own answer path (the facts and engines in service), and a restart once no call is in progress.

The page calls these from its worker threads; the work runs on the daemon's event loop."""

from __future__ import annotations

import asyncio
import logging
import time

from appliance.admin.local import PanelHooks
from appliance.admin.schemas import TriedAnswer
from appliance.daemon.load import Daemon
from appliance.pipeline.session import SessionConfig
from appliance.pipeline.typed_turn import answer_typed
from appliance.service.runner import ServiceControl

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 60.0
IDLE_POLL_S = 0.5
RESTART_NOTE = (
    "the daemon starts again once no call is in progress (systemd starts it; run by hand, it stops); "
    "this page reconnects when it is back"
)


def panel_hooks(daemon: Daemon, config: SessionConfig, control: ServiceControl) -> PanelHooks:
    loop = asyncio.get_running_loop()

    def ask(question: str) -> TriedAnswer:
        started = time.perf_counter()
        work = answer_typed(daemon.engines, config.turn, question, session_id="admin-try")
        trace = asyncio.run_coroutine_threadsafe(work, loop).result(timeout=ASK_TIMEOUT_S)
        return TriedAnswer(
            said=trace.played_reply or trace.reply,
            chosen=list(trace.chosen),
            declined=trace.declined,
            why=trace.answer_check or None,
            seconds=round(time.perf_counter() - started, 3),
        )

    def restart() -> str:
        log.warning("restart asked from the admin page: %s", RESTART_NOTE)
        loop.call_soon_threadsafe(lambda: loop.create_task(_restart_when_idle(daemon, control)))
        return RESTART_NOTE

    return PanelHooks(ask=ask, restart=restart)


async def _restart_when_idle(daemon: Daemon, control: ServiceControl) -> None:
    control.status("restarting (asked from the admin page) once no call is in progress")
    while any(session.in_use for session in daemon.sessions):
        await asyncio.sleep(IDLE_POLL_S)
    control.request_restart()
