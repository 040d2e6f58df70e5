"""The figures the docs quote, regenerated: runs each benchmark with the arguments quoted there and keeps
its result as bench/reference/<name>.json, with the command and a description of the machine.

    .venv/bin/python -m bench.reference [NAME ...]        (default: the quick ones, about 15 min)
    .venv/bin/python -m bench.reference --list

The long end-to-end runs (e2e-partials, e2e-endpointer, ~15 min each) are listed too and run only when
named. Each benchmark writes its own result under ~/.cache/appliance/bench-results/; the newest file (or folder's
result.json) it wrote is the one kept.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.paths import RESULTS

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "bench" / "reference"

# name -> (arguments of python -m bench, quick)
BENCHMARKS: dict[str, tuple[tuple[str, ...], bool]] = {
    "asr": (("asr", "--repeats", "2"), True),
    "asr-int8": (("asr_int8",), True),
    "asr-models": (("asr_models", "--repeats", "2"), False),
    "llm": (("llm",), True),
    "llama-builds": (("llama_builds", "--model", "qwen-1.5b"), False),
    "vad": (("vad",), True),
    "tts": (("tts",), True),
    "turn": (("turn", "--call-path", "--plot", "bench/reference/turn-tradeoff.png"), False),
    "sip": (("sip",), True),
    "sip-edge": (("sip", "--edge"), True),
    "sessions": (("sessions",), False),
    "sessions-rss": (("sessions", "--rss-only"), True),
    "tools": (("tools",), True),
    "answers": (("answers", "--configs", "prompt,as_heard,unchecked,call"), False),
    "fleet": (("fleet",), True),
    "llm-server": (("llm_server",), True),
    "aec": (("aec",), False),
    "noise": (
        ("noise", "--snrs", "10,5,0", "--paths", "16k", "--plot", "bench/reference/noise-wer.png"),
        False,
    ),
    "noise-8k": (("noise", "--snrs", "5", "--paths", "8k"), False),
    "wake": (("wake",), True),
    "interruptions": (
        ("interruptions", "--modes", "decide", "--after", "1.0", "--call-path", "--echo"),
        False,
    ),
    "interruptions-before": (("interruptions", "--modes", "interrupt", "--after", "1.0", "--echo"), False),
    "e2e-partials": (
        (
            "--llm",
            "qwen-1.5b",
            "--turns",
            "20",
            "--variant",
            "asr.model=whisper-base",
            "--variant",
            "asr.model=whisper-tiny-en",
            "--variant",
            "partials.partial_interval_ms=600",
            "--variant",
            "partials.partial_interval_ms=400",
            "--variant",
            "partials.partial_interval_ms=600,partials.prefill=false",
            "--no-cold-start",
            "--no-plots",
        ),
        False,
    ),
    "e2e-words": (
        (
            "--llm",
            "qwen-1.5b",
            "--turns",
            "20",
            "--seed",
            "1",
            "--variant",
            "endpointer.judge_words=false,endpointer.turn_check_ms=256",
            "--variant",
            "endpointer.judge_words=true",
            "--no-cold-start",
            "--no-plots",
        ),
        False,
    ),
    "e2e-endpointer": (
        (
            "--llm",
            "qwen-1.5b",
            "--turns",
            "18",
            "--endpointer",
            "smart_turn",
            "silence",
            "--no-cold-start",
            "--no-plots",
        ),
        False,
    ),
}


def newest_result(since: float) -> Path | None:
    """The result file a benchmark wrote after ``since`` (a file, or a folder's result.json)."""
    found = [p for p in RESULTS.glob("*.json") if p.stat().st_mtime >= since]
    found += [p for p in RESULTS.glob("*/result.json") if p.stat().st_mtime >= since]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def keep(name: str, arguments: tuple[str, ...]) -> Path:
    started = time.time()
    command = [sys.executable, "-m", "bench", *arguments]
    done = subprocess.run(command, cwd=REPO, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} exited {done.returncode}")
    result = newest_result(started)
    if result is None:
        raise SystemExit(f"error: {' '.join(command)} wrote no result under {RESULTS}")
    return adopt(name, result, arguments)


def adopt(name: str, result: Path, arguments: tuple[str, ...]) -> Path:
    """Keep ``result`` as the reference ``name``: as it is when it names its command and machine (the
    end-to-end suite's do), else with both added (the machine as it is described now)."""
    from bench.machine import describe_machine

    data = json.loads(result.read_text(encoding="utf-8"))
    if isinstance(data, dict) and {"command", "machine"} <= set(data):
        record: dict[str, Any] = data
    else:
        record = {
            "command": " ".join([".venv/bin/python -m bench", *arguments]),
            "machine": describe_machine(),
            "from": result.name,
            "result": data,
        }
    REFERENCE.mkdir(parents=True, exist_ok=True)
    out = REFERENCE / f"{name}.json"
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reference", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to regenerate (default: the quick ones)")
    parser.add_argument("--list", action="store_true", help="list them with their arguments")
    parser.add_argument(
        "--adopt", type=Path, default=None, metavar="FILE", help="keep this earlier result as the one NAME"
    )
    args = parser.parse_args(argv)
    if args.list:
        for name, (arguments, quick) in BENCHMARKS.items():
            print(f"{name:<16} {'' if quick else '(long) '}python -m bench {' '.join(arguments)}")
        return 0
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    if args.adopt is not None:
        if len(args.names) != 1:
            parser.error("--adopt FILE takes exactly one NAME")
        print(f"kept {adopt(args.names[0], args.adopt, BENCHMARKS[args.names[0]][0])}")
        return 0
    names = args.names or [n for n, (_, quick) in BENCHMARKS.items() if quick]
    for name in names:
        print(f"kept {keep(name, BENCHMARKS[name][0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
