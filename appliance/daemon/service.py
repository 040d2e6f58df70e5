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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from appliance.audio.base import AudioSink, AudioSource
from appliance.audio.denoise import suppress_noise
from appliance.audio.echo import cancel_echo
from appliance.audio.echo_room import RoomMemory, room_key
from appliance.audio.files import NullSink
from appliance.config import Settings
from appliance.daemon.load import Daemon, close, load, load_with_fallback, open_store
from appliance.engine_set import cancels_echo, echo_gate, session_config
from appliance.pipeline.call_policy import CallLine
from appliance.pipeline.session import Session, SessionConfig
from appliance.pipeline.workers import EngineWorker
from appliance.service.runner import ServiceControl
from appliance.trace.record import TurnTrace
from appliance.turn_report import describe_turn, turn_summary
from engines.aec import EchoCanceller
from engines.audio import SAMPLE_RATE_HZ, resample

if TYPE_CHECKING:
    from appliance.sip.server import SipServer
    from appliance.sip.tls import SipTls

log = logging.getLogger(__name__)

__all__ = ["Daemon", "close", "load", "load_with_fallback", "open_store", "run_session", "serve"]

DEMO_QUESTION = "Hello! What kinds of things can you help me with here?"
DEMO_REPLY_NAME = "last-demo-reply.wav"


class SessionRegistry(Protocol):
    """Where live sessions are shown (the admin page's ``LiveRegistry``)."""

    def open_session(
        self,
        session_id: str,
        kind: str,
        peer: str = "",
        state_of: Callable[[], str] | None = None,
        heard_of: Callable[[], str] | None = None,
        wakes_of: Callable[[], int] | None = None,
    ) -> None: ...

    def update_session(
        self, session_id: str, *, state: str | None = None, turn_done: bool = False
    ) -> None: ...

    def close_session(self, session_id: str) -> None: ...


class NullRegistry:
    """The registry when the admin page is off: sessions are shown nowhere."""

    def open_session(
        self,
        session_id: str,
        kind: str,
        peer: str = "",
        state_of: Callable[[], str] | None = None,
        heard_of: Callable[[], str] | None = None,
        wakes_of: Callable[[], int] | None = None,
    ) -> None:
        return None

    def update_session(self, session_id: str, *, state: str | None = None, turn_done: bool = False) -> None:
        return None

    def close_session(self, session_id: str) -> None:
        return None


async def run_session(
    daemon: Daemon,
    registry: SessionRegistry,
    source: AudioSource,
    sink: AudioSink,
    *,
    session_id: str,
    kind: str,
    peer: str,
    config: SessionConfig,
    max_turns: int | None = None,
    on_turn: Callable[[TurnTrace], None] | None = None,
    call: CallLine | None = None,
) -> Session:
    """One audio endpoint as a session on the shared engines, shown in ``registry`` while it runs."""

    def turn_done(trace: TurnTrace) -> None:
        registry.update_session(session_id, turn_done=True)
        if on_turn is not None:
            on_turn(trace)

    engines = daemon.engines
    source = suppress_noise(
        source, engines.denoise, engines.denoise_worker, feed=daemon.settings.denoise.feed
    )
    session = Session(
        engines=engines,
        source=source,
        sink=sink,
        config=config,
        store=daemon.store,
        session_id=session_id,
        on_turn=turn_done,
        engines_offered=lambda: daemon.engines,
        call=call,
    )
    registry.open_session(
        session_id,
        kind,
        peer,
        state_of=lambda: session.state,
        heard_of=lambda: session.heard,
        wakes_of=lambda: session.wakes,
    )
    daemon.sessions.add(session)
    try:
        await session.run(max_turns=max_turns)
    finally:
        daemon.sessions.discard(session)
        registry.close_session(session_id)
    return session


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
            await _demo_turn(daemon, registry, config, control)
            if background:  # SIP calls or the admin page still need the daemon
                await asyncio.Event().wait()
        else:
            await _local_session(daemon, registry, config, control)
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
    from appliance.daemon.bundle_switch import Switched, watch_bundle

    if daemon.bundle.version is None:
        return []

    def announce(result: Switched) -> None:
        if isinstance(registry, LiveRegistry):
            if result.how == "failed":
                registry.add_notice(result.problem)
            registry.set_bundle(daemon.bundle)
            from appliance.admin import engine_states

            for state in engine_states(daemon.settings, daemon.load_seconds):
                registry.set_engine(state)
        if result.how == "failed":
            control.status(f"degraded: {result.problem}")
        elif result.how == "restart":
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
        from appliance.admin import engine_states, llm_load, run_admin_page
        from appliance.admin.backend import LiveRegistry
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
            _canceller(daemon),
            CallSource(call),
            CallSink(call),
            kind="sip",
            speaker=True,
            config=config,
        )
        await run_session(
            daemon,
            registry,
            source,
            sink,
            session_id=f"call-{call.call_id}",
            kind="sip",
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


async def _local_session(
    daemon: Daemon, registry: SessionRegistry, config: SessionConfig, control: ServiceControl
) -> None:
    source, sink = _local_audio(daemon.settings)
    speaker = not isinstance(sink, NullSink)
    source, sink, config = with_echo_cancellation(
        daemon.settings, _canceller(daemon), source, sink, kind="microphone", speaker=speaker, config=config
    )
    turns = 0

    def on_turn(trace: TurnTrace) -> None:
        nonlocal turns
        turns += 1
        latency = trace.stage_s("turn_latency")
        shown = f"{latency:.2f} s" if latency is not None else "n/a"
        control.status(f"listening on {daemon.microphone}: {turns} turn(s), last latency {shown}")

    control.status(f"listening on {daemon.microphone}")
    print(f"listening on {daemon.microphone}; speak, or press Ctrl+C to stop", flush=True)
    try:
        await run_session(
            daemon,
            registry,
            source,
            sink,
            session_id="local",
            kind="microphone",
            peer=str(daemon.microphone),
            config=config,
            on_turn=on_turn,
        )
    finally:
        await source.close()
        await sink.close()


def with_echo_cancellation(
    settings: Settings,
    aec: tuple[EchoCanceller, EngineWorker] | None,
    source: AudioSource,
    sink: AudioSink,
    *,
    kind: str,
    speaker: bool,
    config: SessionConfig,
) -> tuple[AudioSource, AudioSink, SessionConfig]:
    """The session's source, sink and configuration, with the echo canceller (``aec``: the engine
    and its worker, when loaded) between them when ``audio.echo_cancellation`` says this session
    uses it."""
    audio = settings.audio
    if aec is None or not cancels_echo(settings, kind=kind, speaker=speaker):
        return source, sink, config
    engine, worker = aec
    # A call's far end is another phone each time; the local microphone's room stays where it is.
    memory = None
    if kind == "microphone" and audio.echo_room_file is not None:
        memory = RoomMemory(audio.echo_room_file, room_key(audio))
    source, sink = cancel_echo(
        source,
        sink,
        stream=engine.stream(None if memory is None else memory.recall()),
        worker=worker,
        echo_delay_ms=audio.echo_delay_ms,
        memory=memory,
    )
    log.info("%s: echo cancellation on (echo delay %.0f ms)", source.name, audio.echo_delay_ms)
    return source, sink, dataclasses.replace(config, echo=echo_gate(settings, echo_cancelled=True))


def _canceller(daemon: Daemon) -> tuple[EchoCanceller, EngineWorker] | None:
    engines = daemon.engines
    return None if engines.aec is None or engines.aec_worker is None else (engines.aec, engines.aec_worker)


def _local_audio(settings: Settings) -> tuple[AudioSource, AudioSink]:
    from appliance.audio.devices import MicrophoneSource, SpeakerSink, probe_device

    rate = settings.audio.device_sample_rate_hz
    source = MicrophoneSource(settings.audio.input_device, device_sample_rate_hz=rate)
    sink: AudioSink
    speaker = probe_device("output", settings.audio.output_device)
    if settings.audio.output != "none" and speaker.available:
        sink = SpeakerSink(settings.audio.output_device, device_sample_rate_hz=rate)
    else:
        if settings.audio.output == "speaker":
            raise RuntimeError(
                f"no speaker: {speaker.reason} (fix: set audio.output_device, or audio.output = 'none')"
            )
        log.warning("no speaker (%s): replies are not played", speaker.reason)
        sink = NullSink(rate, realtime=True)
    return source, sink


async def _demo_turn(
    daemon: Daemon, registry: SessionRegistry, config: SessionConfig, control: ServiceControl
) -> None:
    """No microphone: one turn from a question spoken with the bundle's own voice."""
    from appliance.audio.files import ArraySource, WavSink

    settings = daemon.settings
    engines = daemon.engines
    # With a wake word the demo says it first, as a person at the kiosk would.
    wake = engines.wake.phrase if settings.wake.activation == "wake_word" and engines.wake is not None else ""
    spoken = f"{wake}. {DEMO_QUESTION}" if wake else DEMO_QUESTION
    print(
        f"No microphone found ({daemon.no_microphone_reason}).\n"
        "To talk to the appliance, connect a microphone and set audio.input_device to its sounddevice "
        "name or index (python -m sounddevice lists them), or set audio.input = 'microphone'.\n"
        f"Meanwhile, one turn with a question spoken by the voice {settings.tts.voice!r}:\n"
        f'  "{spoken}"',
        flush=True,
    )
    control.status("no microphone: running one demo turn")
    voice_rate = engines.tts.sample_rate_hz

    def speak() -> npt.NDArray[np.float32]:
        chunks = list(engines.tts.synthesize(spoken, sample_rate_hz=voice_rate))
        return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)

    question = resample(await engines.tts_worker.call(speak), voice_rate, SAMPLE_RATE_HZ)
    lead, tail = np.zeros(SAMPLE_RATE_HZ // 2, np.float32), np.zeros(SAMPLE_RATE_HZ * 3 // 2, np.float32)
    audio = np.concatenate([lead, question, tail])
    reply_path = Path(settings.trace.db_path).parent / DEMO_REPLY_NAME
    sink = WavSink(reply_path, voice_rate)
    try:
        session = await run_session(
            daemon,
            registry,
            ArraySource(audio, realtime=True, name="demo"),
            sink,
            session_id="demo",
            kind="demo",
            peer="the bundle's voice",
            config=config,
            max_turns=1,
        )
    finally:
        await sink.close()
    if not session.traces:
        heard = f"after the wake word {wake!r} (wake.threshold)" if wake else "as speech"
        print(f"the demo question was not heard {heard}; check vad.threshold", flush=True)
        control.status("demo turn: no speech detected")
        return
    summary = turn_summary(session.traces[0], reply_wav=reply_path, reply_audio_s=sink.duration_s, fast=False)
    print(describe_turn(summary), flush=True)
    control.status(f"demo turn done: latency {summary['turn_latency_s']} s; no microphone")
