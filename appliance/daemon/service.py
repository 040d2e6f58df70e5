"""The daemon's composition root: settings -> bundle -> engines -> sessions and listeners.

``load`` (appliance/daemon/load.py) opens the bundle, proves llama.cpp runs, builds, loads and warms
the engines and opens the trace store; ``serve`` runs the local session (microphone, or one demo turn without one), the SIP
listener and the admin page side by side; ``close`` releases the engines. Every audio endpoint, a
microphone or a phone call, runs through ``run_session``: its own VAD state, endpointer and
conversation over the shared engines, registered with the admin page while it lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from appliance.config import Settings
from appliance.daemon.load import Daemon, close, load, load_with_fallback, open_store
from appliance.daemon.local_session import canceller_of, demo_turn, local_session, with_echo_cancellation
from appliance.daemon.sessions import NullRegistry, SessionRegistry, run_session
from appliance.engine_set import session_config
from appliance.pipeline.session import SessionConfig
from appliance.service.runner import ServiceControl
from appliance.trace.labels import SessionKind

if TYPE_CHECKING:
    from appliance.sip.server import SipServer
    from appliance.sip.tls import SipTls

log = logging.getLogger(__name__)

__all__ = ["Daemon", "close", "load", "load_with_fallback", "open_store", "run_session", "serve"]


CALL_DRAIN_S = 5.0  # the last audio of a call the appliance ends, before its BYE
LISTENERS_START_S = 15.0  # the admin page and SIP bind in well under a second


async def serve(daemon: Daemon, control: ServiceControl) -> None:
    """The daemon after READY; returns (demo) or runs until cancelled (SIGTERM/SIGINT)."""
    settings = daemon.settings
    if daemon.notice is not None:
        control.status(f"degraded: {daemon.notice}")
    config = session_config(settings)
    registry, background, listening = _start_listeners(daemon, config, control)
    switching = _watch_bundle(daemon, registry, control)
    try:
        await _remember_if_whole(daemon, listening, control)
        if daemon.local_problem is not None:
            await asyncio.Event().wait()  # SIP and the admin page serve; the notice says why nothing else
        elif settings.audio.input == "none":
            control.status("ready: no local audio session (audio.input = none)")
            await asyncio.Event().wait()  # until SIGTERM/SIGINT cancels serve
        elif daemon.microphone is None:
            await demo_turn(daemon, registry, config, control)
            if background:  # SIP calls or the admin page still need the daemon
                await asyncio.Event().wait()
        else:
            await local_session(daemon, registry, config, control)
    finally:
        for task in [*background, *switching]:
            task.cancel()
        await asyncio.gather(*background, *switching, return_exceptions=True)


def _watch_bundle(
    daemon: Daemon, registry: SessionRegistry, control: ServiceControl
) -> list[asyncio.Task[None]]:
    """With a versioned bundle root: a version activated while running is switched to
    (``appliance.daemon.bundle_switch``), and the admin page and systemd's STATUS say so."""
    from appliance.admin.backend import LiveRegistry
    from appliance.daemon.bundle_switch import Switched, SwitchHow, watch_bundle

    if daemon.bundle.version is None:
        return []

    def announce(result: Switched) -> None:
        if isinstance(registry, LiveRegistry):
            if result.how == SwitchHow.FAILED:
                registry.add_notice(result.problem)
            registry.set_bundle(daemon.bundle)
            from appliance.admin.daemon import engine_states

            for state in engine_states(daemon.settings, daemon.load_seconds):
                registry.set_engine(state)
        if result.how == SwitchHow.FAILED:
            control.status(f"degraded: {result.problem}")
        elif result.how == SwitchHow.RESTART:
            control.status(f"restarting on bundle version {result.version} (no room to load it beside)")
        else:
            control.status(f"ready: on bundle version {result.version} (switched in service)")

    work = _logged(watch_bundle(daemon, control, announce), "bundle switch")
    return [asyncio.create_task(work, name="bundle-switch")]


async def _remember_if_whole(
    daemon: Daemon, listening: dict[str, asyncio.Event], control: ServiceControl
) -> None:
    """This configuration becomes the last good one only when it runs as asked: no notice, and every
    listener it asked for up (the admin page, SIP on UDP and, with sip.tcp, TCP)."""
    from appliance.daemon import last_good

    waits = {name: asyncio.ensure_future(event.wait()) for name, event in listening.items()}
    if waits:
        await asyncio.wait(waits.values(), timeout=LISTENERS_START_S)
    missing = [name for name, wait in waits.items() if not wait.done()]
    for wait in waits.values():
        wait.cancel()
    if missing:
        why = f"{', '.join(missing)} did not start (see the log above)"
        log.error("%s: this configuration is not kept as the last one that started", why)
        control.status(f"degraded: {why}" + (f"; {daemon.notice}" if daemon.notice else ""))
    elif daemon.notice is None:
        last_good.remember(daemon.config_path)


def _start_listeners(
    daemon: Daemon, config: SessionConfig, control: ServiceControl
) -> tuple[SessionRegistry, list[asyncio.Task[None]], dict[str, asyncio.Event]]:
    """The admin page and the SIP listener, as tasks beside the local session, and for each listener
    asked for an event set once it accepts. A listener that fails (say, its port is taken) is logged
    and the rest of the daemon keeps running."""
    settings = daemon.settings
    tasks: list[asyncio.Task[None]] = []
    listening: dict[str, asyncio.Event] = {}
    registry: SessionRegistry = NullRegistry()
    if settings.admin.enabled:
        listening["the admin page"] = asyncio.Event()
    if settings.admin.enabled and daemon.store is not None:
        from appliance.admin.backend import LiveRegistry
        from appliance.admin.daemon import engine_states, llm_load, run_admin_page
        from appliance.daemon.panel import panel_hooks

        live = LiveRegistry()
        for state in engine_states(settings, daemon.load_seconds):
            live.set_engine(state)
        live.watch_llm(lambda: llm_load(daemon.engines.llm.occupancy()))  # the engines of the moment
        registry = live
        page = run_admin_page(
            settings,
            daemon.store,
            live,
            daemon.bundle,
            config_path=daemon.config_path,
            notice=daemon.notice,
            started=listening["the admin page"],
            hooks=panel_hooks(daemon, config, control),
        )
        tasks.append(asyncio.create_task(_logged(page, "admin page"), name="admin-page"))
    elif settings.admin.enabled:
        log.error("the admin page is not served: the turn store could not be opened (trace.db_path)")
    if settings.sip.enabled:
        listening["SIP"] = asyncio.Event()
        calls = _answer_calls(daemon, registry, config, listening["SIP"])
        tasks.append(asyncio.create_task(_logged(calls, "SIP"), name="sip"))
    return registry, tasks, listening


async def _logged(work: Awaitable[None], what: str) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s stopped; the rest of the appliance keeps running", what)


async def _answer_calls(
    daemon: Daemon, registry: SessionRegistry, config: SessionConfig, listening: asyncio.Event
) -> None:
    """Each SIP call is a session of its own on the shared engines. ``listening`` is set once the
    port takes calls on every transport asked for."""
    from appliance.audio.call import CallLine as SipLine
    from appliance.audio.call import CallSink, CallSource
    from appliance.sip.call import CallAudio
    from appliance.sip.server import SipServer

    async def handle_call(call: CallAudio) -> None:
        source, sink, call_config = with_echo_cancellation(
            daemon.settings,
            canceller_of(daemon),
            CallSource(call),
            CallSink(call),
            kind=SessionKind.SIP,
            speaker=True,
            config=config,
        )
        await run_session(
            daemon,
            registry,
            source,
            sink,
            session_id=f"call-{call.call_id}",
            kind=SessionKind.SIP,
            peer=str(call.caller),
            config=call_config,
            call=SipLine(call),
        )
        if not call.ended:  # the session ended the call (a goodbye, a silent caller): let it be heard
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(call.drain(), CALL_DRAIN_S)

    server = SipServer(daemon.settings.sip, handle_call, tls=_sip_tls(daemon.settings))
    await server.start()
    _show_registration(server, registry)
    if server.tcp_listening or not daemon.settings.sip.tcp:
        listening.set()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def _sip_tls(settings: Settings) -> SipTls | None:
    """SIP over TLS with the site's certificate, else the device's own (the admin page's)."""
    from appliance.certificates import device_certificate
    from appliance.sip.tls import sip_tls

    sip = settings.sip
    if not sip.tls_listening:
        return None
    host = sip.advertise_host or sip.bind_host
    return sip_tls(sip, lambda: device_certificate(settings.admin.tls_dir, settings.agent.device_id, host))


def _show_registration(server: SipServer, registry: SessionRegistry) -> None:
    """The extension's registration on the admin page and /metrics (with sip.registrar)."""
    from appliance.admin.backend import LiveRegistry
    from appliance.admin.schemas import SipRegistrationView

    if not isinstance(registry, LiveRegistry):
        return
    registry.watch_sip_events(server.stats.counters)
    registration = server.registration
    if registration is None:
        return
    registry.watch_registration(lambda: SipRegistrationView(**dataclasses.asdict(registration.status)))
