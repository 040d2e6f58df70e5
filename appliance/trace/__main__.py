"""python -m appliance.trace [--db PATH] [--last N] [--json]: p50/p95/p99 per stage of stored turns."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from appliance.trace.record import STAGES
from appliance.trace.store import TraceStore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance.trace", description=__doc__)
    parser.add_argument("--db", type=Path, help="trace database (default: trace.db_path of the settings)")
    parser.add_argument("--last", type=int, default=None, help="only the newest N turns")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    db_path = args.db
    if db_path is None:
        from appliance.config import load_settings

        db_path = load_settings(None).trace.db_path
    if not db_path.is_file():
        print(f"error: no turn trace at {db_path} (fix: run some turns first, or pass --db)", file=sys.stderr)
        return 1
    store = TraceStore(db_path, max_turns=10_000_000)
    try:
        turns = store.recent(args.last if args.last else store.count())
        summary = store.summary(args.last)
    finally:
        store.close()
    if args.json:
        print(json.dumps({"turns": len(turns), "stages": {k: asdict(v) for k, v in summary.items()}}))
        return 0
    counted = sum(1 for t in turns if not t.error and not t.cancelled)
    print(f"{db_path}: {len(turns)} turn(s), {counted} complete (failed and interrupted turns left out)")
    print(
        f"{'stage':<16} {'from -> to':<36} {'n':>4} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'max ms':>9}"
    )
    for stage, (start, end) in STAGES.items():
        row = summary.get(stage)
        if row is None:
            continue
        print(
            f"{stage:<16} {start + ' -> ' + end:<36} {row.count:>4} {row.p50_ms:>9.1f} {row.p95_ms:>9.1f} "
            f"{row.p99_ms:>9.1f} {row.max_ms:>9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
