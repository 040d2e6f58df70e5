"""appliance talk WAV: one full turn from a file through the same pipeline as the microphone."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from appliance.commands.common import EXIT_FAILED, EXIT_OK, add_config_option, settings_or_exit
from appliance.config import Settings
from appliance.trace.record import TurnTrace
from appliance.turn_report import describe_turn, turn_summary
from engines.wake.params import ActivationMode

TAIL_SILENCE_S = 1.5  # appended to the file so that the end of speech is confirmed as it would be live


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("talk", help="one full turn from a WAV file: transcript, reply, trace")
    parser.add_argument("wav", type=Path)
    parser.add_argument("--reply", type=Path, help="write the spoken reply to this WAV")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--fast", action="store_true", help="feed audio as fast as possible")
    add_config_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    from appliance.audio.files import wav_file_source
    from engines.errors import EngineError

    try:
        source = wav_file_source(args.wav, realtime=not args.fast, tail_silence_s=TAIL_SILENCE_S)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    try:
        trace, reply_s = asyncio.run(_talk(settings, source, args.reply))
    except (EngineError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if trace is None:
        print(f"error: {_no_turn(settings, args.wav)}", file=sys.stderr)
        return EXIT_FAILED
    summary = turn_summary(trace, reply_wav=args.reply, reply_audio_s=reply_s, fast=args.fast)
    summary["file"] = str(args.wav)
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    else:
        print(describe_turn(summary))
    return EXIT_OK if trace.error is None else EXIT_FAILED


async def _talk(settings: Settings, source: Any, reply_path: Path | None) -> tuple[TurnTrace | None, float]:
    from appliance.audio.files import MemorySink, WavSink
    from appliance.daemon.service import open_store
    from appliance.engine_set import build_engines, load_engines, open_bundle, session_config
    from appliance.pipeline.oneshot import one_turn

    engines = build_engines(settings, open_bundle(settings))
    try:
        await load_engines(engines)
        rate = engines.tts.sample_rate_hz
        sink = WavSink(reply_path, rate) if reply_path else MemorySink(rate)
        store = open_store(settings)
        try:
            trace = await one_turn(engines, source, sink, config=session_config(settings), store=store)
        finally:
            if store is not None:
                store.close()
        return trace, sink.duration_s
    finally:
        await engines.close()


def _no_turn(settings: Settings, wav: Path) -> str:
    """Why a file began no turn, and the fix: with the wake word on, speech without it begins none."""
    wake = settings.wake
    if wake.activation == ActivationMode.WAKE_WORD:
        spoken = wake.model.replace("_", " ")
        return (
            f'no turn began in {wav}: wake.activation = "wake_word" and the wake word ({spoken!r}) was not '
            f'heard before the speech (fix: start the recording with "{spoken}", or try the file without '
            "the wake word: APPLIANCE_WAKE__ACTIVATION=always appliance talk FILE)"
        )
    return f"no speech found in {wav} (fix: check the recording level: speech, not silence or noise alone)"
