"""Cold start, run as its own process: process start -> engines loaded and warm; peak RSS when ready
and after one turn through the pipeline.

    .venv/bin/python -m bench.e2e_cold --llm gemma-270m [--wav FILE]

Prints one JSON line. ``python -m bench`` runs it in a subprocess so the figure includes the
interpreter start and every import, as a daemon start would.
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


async def _cold_start(llm_model: str, started_at: float | None, wav: Path | None) -> dict[str, Any]:
    from appliance.config import load_settings
    from appliance.engine_set import build_engines, load_engines, open_bundle, session_config

    settings = load_settings(None)
    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": llm_model})})
    engines = build_engines(settings, open_bundle(settings))
    try:
        load_s = await load_engines(engines)
        result: dict[str, Any] = {
            "llm": llm_model,
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
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(_cold_start(args.llm, args.started_at, args.wav))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
