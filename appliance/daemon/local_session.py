"""The local session: the microphone and speaker (with echo cancellation where the settings ask for
it), or, with no microphone, one demo turn whose reply is kept as a file."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import numpy.typing as npt

from appliance.audio.base import AudioSink, AudioSource
from appliance.audio.echo import cancel_echo
from appliance.audio.echo_room import RoomMemory, room_key
from appliance.audio.files import NullSink
from appliance.config import Settings
from appliance.daemon.load import Daemon
from appliance.daemon.sessions import SessionRegistry, run_session
from appliance.engine_set import cancels_echo, echo_gate
from appliance.pipeline.session import SessionConfig
from appliance.pipeline.workers import EngineWorker
from appliance.service.runner import ServiceControl
from appliance.trace.labels import SessionKind
from appliance.trace.record import TurnTrace
from appliance.turn_report import describe_turn, turn_summary
from engines.aec import EchoCanceller
from engines.audio import SAMPLE_RATE_HZ, resample
from engines.wake.params import ActivationMode

log = logging.getLogger(__name__)

DEMO_QUESTION = "Hello! What kinds of things can you help me with here?"
DEMO_REPLY_NAME = "last-demo-reply.wav"


async def local_session(
    daemon: Daemon, registry: SessionRegistry, config: SessionConfig, control: ServiceControl
) -> None:
    source, sink = _local_audio(daemon.settings)
    speaker = not isinstance(sink, NullSink)
    source, sink, config = with_echo_cancellation(
        daemon.settings,
        canceller_of(daemon),
        source,
        sink,
        kind=SessionKind.MICROPHONE,
        speaker=speaker,
        config=config,
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
            kind=SessionKind.MICROPHONE,
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
    kind: SessionKind,
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
    if kind == SessionKind.MICROPHONE and audio.echo_room_file is not None:
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


def canceller_of(daemon: Daemon) -> tuple[EchoCanceller, EngineWorker] | None:
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


async def demo_turn(
    daemon: Daemon, registry: SessionRegistry, config: SessionConfig, control: ServiceControl
) -> None:
    """No microphone: one turn from a question spoken with the bundle's own voice."""
    from appliance.audio.files import ArraySource, WavSink

    settings = daemon.settings
    engines = daemon.engines
    # With a wake word the demo says it first, as a person at the kiosk would.
    wake = (
        engines.wake.phrase
        if settings.wake.activation == ActivationMode.WAKE_WORD and engines.wake is not None
        else ""
    )
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
            kind=SessionKind.DEMO,
            peer="the bundle's voice",
            config=config,
            max_turns=1,
        )
    finally:
        await sink.close()
    if not session.turns.traces:
        heard = f"after the wake word {wake!r} (wake.threshold)" if wake else "as speech"
        print(f"the demo question was not heard {heard}; check vad.threshold", flush=True)
        control.status("demo turn: no speech detected")
        return
    summary = turn_summary(
        session.turns.traces[0], reply_wav=reply_path, reply_audio_s=sink.duration_s, fast=False
    )
    print(describe_turn(summary), flush=True)
    control.status(f"demo turn done: latency {summary['turn_latency_s']} s; no microphone")
