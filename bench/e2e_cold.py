"""Cold start, run as its own process: process start -> engines loaded and warm; peak RSS when ready
and after one turn through the pipeline.

    .venv/bin/python -m bench.e2e_cold --llm gemma-270m [--wav FILE] [--as-daemon]

Prints one JSON line. ``python -m bench`` runs it in a subprocess so the figure includes the
interpreter start and every import. ``--as-daemon`` also does what ``appliance run`` does before
loading: the checksum pass over the whole bundle (``bundle.verify_on_start``) and the llama.cpp smoke
decode in a child process; without it, the figure is the engines' own start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.machine import peak_rss_mb


def process_age_s(started_at: float | None) -> float:
    """Seconds since ``started_at`` (wall clock, set by the parent just before starting this process)
    or else since the kernel created it (coarser), so the interpreter start and imports are counted."""
    if started_at is None:
        import psutil

        started_at = psutil.Process().create_time()
    return time.time() - started_at


async def _cold_start(
    llm_model: str, started_at: float | None, wav: Path | None, as_daemon: bool
) -> dict[str, Any]:
    from appliance.config import load_settings
    from appliance.engine_set import build_engines, check_llm_runs, load_engines, open_bundle, session_config

    settings = load_settings(None)
    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": llm_model})})
    checked_at = time.perf_counter()
    bundle = open_bundle(settings, daemon_start=as_daemon)
    if as_daemon:
        check_llm_runs(bundle)
    checks_s = time.perf_counter() - checked_at
    engines = build_engines(settings, bundle)
    try:
        load_s = await load_engines(engines)
        result: dict[str, Any] = {
            "llm": llm_model,
            "as_daemon": as_daemon,
            "start_checks_s": round(checks_s, 3),  # bundle check (+ checksum pass and smoke decode)
            "ready_s": round(process_age_s(started_at), 3),
            "engine_load_s": {k: round(v, 3) for k, v in load_s.items()},
            "peak_rss_mb": peak_rss_mb(),
        }
        if wav is not None:  # a turn adds the LLM's context and the pipeline's buffers
            from appliance.audio.files import MemorySink, wav_file_source
            from appliance.pipeline.oneshot import one_turn

            source = wav_file_source(wav, realtime=False)
            sink = MemorySink(engines.tts.sample_rate_hz)
            await one_turn(engines, source, sink, config=session_config(settings))
            result["peak_rss_after_turn_mb"] = peak_rss_mb()
        return result
    finally:
        await engines.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e_cold", description=__doc__)
    parser.add_argument("--llm", required=True, help="LLM model name in the bundle")
    parser.add_argument("--started-at", type=float, default=None, help="time.time() of the launch")
    parser.add_argument("--wav", type=Path, default=None, help="one turn from this recording after loading")
    parser.add_argument(
        "--as-daemon",
        action="store_true",
        help="checksum pass and llama.cpp smoke decode first, as appliance run",
    )
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(_cold_start(args.llm, args.started_at, args.wav, args.as_daemon))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
