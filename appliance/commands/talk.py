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
        print(f"error: no speech found in {args.wav} (fix: check the recording level)", file=sys.stderr)
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
    from appliance.engine_set import build_engines, load_engines, open_bundle
    from appliance.pipeline.oneshot import one_turn
    from appliance.pipeline.session import SessionConfig

    engines = build_engines(settings, open_bundle(settings, full=False))
    try:
        await load_engines(engines)
        rate = engines.tts.sample_rate_hz
        sink = WavSink(reply_path, rate) if reply_path else MemorySink(rate)
        store = open_store(settings)
        try:
            trace = await one_turn(
                engines, source, sink, config=SessionConfig.from_settings(settings), store=store
            )
        finally:
            if store is not None:
                store.close()
        return trace, sink.duration_s
    finally:
        await engines.close()


def open_store(settings: Settings) -> Any:
    """The turn trace store, or None (with a warning) when it cannot be opened."""
    import logging

    from appliance.trace.store import TraceStore

    try:
        return TraceStore(settings.trace.db_path, max_turns=settings.trace.max_turns)
    except OSError as err:
        logging.getLogger(__name__).warning("turn trace not stored: %s", err)
        return None


def turn_summary(
    trace: TurnTrace, *, reply_wav: Path | None, reply_audio_s: float, fast: bool
) -> dict[str, Any]:
    latency_s = trace.stage_s("turn_latency")
    return {
        "turn_id": trace.turn_id,
        "transcript": trace.transcript,
        "reply": trace.reply,
        "played_reply": trace.played_reply,
        "error": trace.error,
        "cancelled": trace.cancelled,
        "speculative": trace.speculative,
        "turn_latency_s": None if latency_s is None else round(latency_s, 3),
        "stages_ms": trace.stages_ms(),
        "timestamps_s": trace.relative_s(),
        "audio_s": round(trace.audio_s, 3),
        "reply_audio_s": round(reply_audio_s, 3),
        "reply_wav": str(reply_wav) if reply_wav else None,
        "llm_tokens": trace.llm_tokens,
        "fast": fast,
    }


def describe_turn(summary: dict[str, Any]) -> str:
    lines = [
        f"transcript: {summary['transcript'] or '(nothing recognised)'}",
        f"reply:      {summary['reply'] or '(none)'}",
    ]
    if summary["error"]:
        lines.append(f"error:      {summary['error']} (the fallback reply was spoken)")
    latency = summary["turn_latency_s"]
    if latency is not None:
        note = "end of speech -> first reply audio, including the endpoint silence"
        if summary["fast"]:
            note += "; --fast compresses the audio's own time, so this is not a live figure"
        lines.append(f"latency:    {latency:.3f} s ({note})")
    stages = " | ".join(f"{k} {v:.0f}" for k, v in summary["stages_ms"].items() if v is not None)
    lines.append(f"stages ms:  {stages}")
    stamps = " | ".join(f"{k} {v:+.3f}" for k, v in summary["timestamps_s"].items() if v is not None)
    lines.append(f"times s:    {stamps}  (from speech start)")
    if summary["reply_wav"]:
        lines.append(f"reply wav:  {summary['reply_wav']} ({summary['reply_audio_s']:.2f} s)")
    return "\n".join(lines)
