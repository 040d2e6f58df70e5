"""Cold start, run as its own process: process start -> engines loaded and warm; then peak RSS.

    .venv/bin/python -m bench.e2e_cold --llm gemma-270m

Prints one JSON line. ``python -m bench`` runs it in a subprocess so the figure includes the
interpreter start and every import, as a daemon start would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time


def process_age_s(started_at: float | None) -> float:
    """Seconds since ``started_at`` (wall clock, set by the parent just before starting this process)
    or else since the kernel created it (coarser), so the interpreter start and imports are counted."""
    if started_at is None:
        import psutil

        started_at = psutil.Process().create_time()
    return time.time() - started_at


async def _load(llm_model: str) -> dict[str, float]:
    from appliance.config import load_settings
    from appliance.engine_set import build_engines, load_engines, open_bundle

    settings = load_settings(None)
    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": llm_model})})
    engines = build_engines(settings, open_bundle(settings, full=False))
    try:
        return await load_engines(engines)
    finally:
        await engines.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e_cold", description=__doc__)
    parser.add_argument("--llm", required=True, help="LLM model name in the bundle")
    parser.add_argument("--started-at", type=float, default=None, help="time.time() of the launch")
    args = parser.parse_args(argv)
    load_s: dict[str, float] = {}

    async def run() -> float:
        load_s.update(await _load(args.llm))
        return process_age_s(args.started_at)  # taken before close(), i.e. when the engines are ready

    ready_s = asyncio.run(run())
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    print(
        json.dumps(
            {
                "llm": args.llm,
                "ready_s": round(ready_s, 3),
                "engine_load_s": {k: round(v, 3) for k, v in load_s.items()},
                "peak_rss_mb": round(peak_rss_mb, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
