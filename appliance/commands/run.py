"""appliance run: the daemon.

With a microphone it listens until SIGINT/SIGTERM. Without one (``audio.input = "auto"`` and no
capture device) it still shows one full turn: a question spoken with the bundle's voice is fed in as
if from a microphone, the reply is written to a WAV in the state folder and described, and it exits.

Under systemd (``Type=notify``, appliance.service): STATUS while loading, READY once the engines are
loaded and warmed, WATCHDOG from the event loop, STATUS after each turn, STOPPING on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.commands.common import EXIT_FAILED, add_config_option, settings_or_exit
from appliance.config import Settings

log = logging.getLogger(__name__)

DEMO_QUESTION = "Hello! What kinds of things can you help me with here?"
DEMO_REPLY_NAME = "last-demo-reply.wav"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="run the daemon (microphone/speaker, SIP, admin page)")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


@dataclass
class Daemon:
    """What ``serve`` needs, built by ``load`` before READY."""

    settings: Settings
    engines: Any  # appliance.pipeline.SessionEngines
    store: Any  # appliance.trace.TraceStore | None
    microphone: str | None  # device name when a microphone is used, else None
    no_microphone_reason: str
    load_seconds: dict[str, float]
    config_path: Path | None = None


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    from appliance.service import configure_logging, run_service

    configure_logging(logging.getLogger().level)
    from appliance.audio.devices import probe_device

    microphone: str | None = None
    reason = "audio.input is 'none'"
    if settings.audio.input != "none":
        probe = probe_device("input", settings.audio.input_device)
        if probe.available:
            microphone = probe.name
        elif settings.audio.input == "microphone":
            print(
                f"error: no microphone: {probe.reason} (fix: connect one and set audio.input_device "
                "to its sounddevice name or index, or set audio.input = 'auto')",
                file=sys.stderr,
            )
            return EXIT_FAILED
        else:
            reason = probe.reason

    def load() -> Daemon:
        daemon = _load(settings, microphone, reason)
        daemon.config_path = args.config
        return daemon

    return run_service(load, _serve, _close)


def _load(settings: Settings, microphone: str | None, reason: str) -> Daemon:
    """Blocking (runs on a worker thread before READY): bundle check, engines loaded and warmed."""
    from appliance.commands.talk import open_store
    from appliance.engine_set import build_engines, check_llm_runs, load_engines, open_bundle

    bundle = open_bundle(settings)
    check_llm_runs(bundle)
    engines = build_engines(settings, bundle)
    try:
        seconds = asyncio.run(load_engines(engines))
    except BaseException:
        asyncio.run(engines.close())
        raise
    return Daemon(settings, engines, open_store(settings), microphone, reason, seconds)


def _close(daemon: Daemon) -> None:
    asyncio.run(daemon.engines.close())
    if daemon.store is not None:
        daemon.store.close()


async def _serve(daemon: Daemon, control: Any) -> None:
    """The daemon after READY; returns (demo) or runs until cancelled (SIGTERM/SIGINT)."""
    from appliance.pipeline.session import SessionConfig

    settings = daemon.settings
    config = SessionConfig.from_settings(settings)
    registry = _live_registry(daemon)
    background = _start_listeners(daemon, config, registry)
    try:
        if settings.audio.input == "none":
            control.status("ready: no local audio session (audio.input = none)")
            await asyncio.Event().wait()  # until SIGTERM/SIGINT cancels serve
        elif daemon.microphone is None:
            await _demo_turn(daemon, config, control)
            if background:  # SIP calls or the admin page still need the daemon
                await asyncio.Event().wait()
        else:
            await _local_session(daemon, config, control, registry)
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)


async def _local_session(daemon: Daemon, config: Any, control: Any, registry: Any) -> None:
    from appliance.pipeline.session import Session

    source, sink = _local_audio(daemon.settings)
    turns = 0

    def on_turn(trace: Any) -> None:
        nonlocal turns
        turns += 1
        latency = trace.stage_s("turn_latency")
        shown = f"{latency:.2f} s" if latency is not None else "n/a"
        control.status(f"listening on {daemon.microphone}: {turns} turn(s), last latency {shown}")
        if registry is not None:
            registry.update_session("local", turn_done=True)

    session = Session(
        engines=daemon.engines,
        source=source,
        sink=sink,
        config=config,
        store=daemon.store,
        session_id="local",
        on_turn=on_turn,
    )
    if registry is not None:
        registry.open_session("local", "microphone", str(daemon.microphone))
    control.status(f"listening on {daemon.microphone}")
    print(f"listening on {daemon.microphone}; speak, or press Ctrl+C to stop", flush=True)
    try:
        await session.run()
    finally:
        if registry is not None:
            registry.close_session("local")
        await source.close()
        await sink.close()


def _live_registry(daemon: Daemon) -> Any:
    """The admin page's view of engines and live sessions (None when the admin page is off)."""
    if not daemon.settings.admin.enabled or daemon.store is None:
        return None
    from appliance.admin.backend import LiveRegistry
    from appliance.admin.daemon import engine_states

    registry = LiveRegistry()
    for state in engine_states(daemon.settings, daemon.load_seconds):
        registry.set_engine(state)
    return registry


def _start_listeners(daemon: Daemon, config: Any, registry: Any) -> list[asyncio.Task[None]]:
    """The admin page and the SIP listener, as tasks beside the local session. A listener that fails
    (say, its port is taken) is logged and the rest of the daemon keeps running."""
    tasks: list[asyncio.Task[None]] = []
    settings = daemon.settings
    if registry is not None:
        from appliance.admin.daemon import run_admin_page

        page = run_admin_page(settings, daemon.store, registry, config_path=daemon.config_path)
        tasks.append(asyncio.create_task(_logged(page, "admin page"), name="admin-page"))
    if settings.sip.enabled:
        tasks.append(asyncio.create_task(_logged(_sip(daemon, config, registry), "SIP"), name="sip"))
    return tasks


async def _logged(work: Any, what: str) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s stopped; the rest of the appliance keeps running", what)


async def _sip(daemon: Daemon, config: Any, registry: Any) -> None:
    """Each SIP call is a session of its own on the shared engines."""
    from appliance.audio.call import call_session_kwargs
    from appliance.pipeline.session import Session
    from appliance.sip.server import SipServer

    async def handle_call(call: Any) -> None:
        kwargs = call_session_kwargs(call)
        session_id = kwargs["session_id"]
        if registry is not None:
            registry.open_session(session_id, "sip", str(call.caller))

        def on_turn(_trace: Any) -> None:
            if registry is not None:
                registry.update_session(session_id, turn_done=True)

        session = Session(
            engines=daemon.engines, config=config, store=daemon.store, on_turn=on_turn, **kwargs
        )
        try:
            await session.run()
        finally:
            if registry is not None:
                registry.close_session(session_id)

    server = SipServer(daemon.settings.sip, handle_call)
    await server.start()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def _local_audio(settings: Settings) -> tuple[Any, Any]:
    from appliance.audio.devices import MicrophoneSource, SpeakerSink, probe_device
    from appliance.audio.files import NullSink

    rate = settings.audio.device_sample_rate_hz
    source = MicrophoneSource(settings.audio.input_device, device_sample_rate_hz=rate)
    sink: Any
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


async def _demo_turn(daemon: Daemon, config: Any, control: Any) -> None:
    """No microphone: one turn from a question spoken with the bundle's own voice."""
    import numpy as np

    from appliance.audio.base import SAMPLE_RATE_HZ
    from appliance.audio.files import ArraySource, WavSink
    from appliance.commands.talk import describe_turn, turn_summary
    from appliance.pipeline.oneshot import one_turn
    from engines.audio import resample

    settings = daemon.settings
    engines = daemon.engines
    print(
        f"No microphone found ({daemon.no_microphone_reason}).\n"
        "To talk to the appliance, connect a microphone and set audio.input_device to its sounddevice "
        "name or index (python -m sounddevice lists them), or set audio.input = 'microphone'.\n"
        f"Meanwhile, one turn with a question spoken by the voice {settings.tts.voice!r}:\n"
        f'  "{DEMO_QUESTION}"',
        flush=True,
    )
    control.status("no microphone: running one demo turn")
    voice_rate = engines.tts.sample_rate_hz

    def speak() -> np.ndarray:
        chunks = list(engines.tts.synthesize(DEMO_QUESTION, sample_rate_hz=voice_rate))
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)

    question = resample(await engines.tts_worker.call(speak), voice_rate, SAMPLE_RATE_HZ)
    lead, tail = np.zeros(SAMPLE_RATE_HZ // 2, np.float32), np.zeros(SAMPLE_RATE_HZ * 3 // 2, np.float32)
    audio = np.concatenate([lead, question, tail])
    reply_path = Path(settings.trace.db_path).parent / DEMO_REPLY_NAME
    sink = WavSink(reply_path, voice_rate)
    trace = await one_turn(
        engines,
        ArraySource(audio, realtime=True, name="demo"),
        sink,
        config=config,
        store=daemon.store,
        session_id="demo",
    )
    if trace is None:
        print("the demo question was not heard as speech; check vad.threshold", flush=True)
        control.status("demo turn: no speech detected")
        return
    summary = turn_summary(trace, reply_wav=reply_path, reply_audio_s=sink.duration_s, fast=False)
    print(describe_turn(summary), flush=True)
    control.status(f"demo turn done: latency {summary['turn_latency_s']} s; no microphone")
