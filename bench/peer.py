"""This product and pipecat 1.14 side by side on the same engines, the same recordings, in one run.

    .venv/bin/python -m bench peer [--turns 16] [--llm qwen-1.5b] [--seed 0]

pipecat is installed from the package registry into its own environment
(~/.cache/appliance/peer/pipecat-1.14.0, once; the product never imports it) and runs
bench/peer_pipecat.py there: pipecat's default pipeline (Silero VAD, Smart Turn v3, Whisper through
faster-whisper on the bundle's CTranslate2 tiny.en in int8, the OpenAI service against llama_cpp.server
on the bundle's GGUF with the same threads, Piper with the bundle's voice). The product runs the real
pipeline as ``python -m bench`` does. Turns alternate between the two, each recording said to both, so
load on the machine falls on both alike. Both are timed from the end of speech (the last voiced Silero
frame of the recording) to the first audio out. Prints p50/p95/p99 of each and the ratios, writes
~/.cache/appliance/bench-results/peer-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.e2e import load_utterances, summary
from bench.paths import DATA

PIPECAT = "pipecat-ai[whisper,piper]==1.14.0"
PEER_HOME = Path.home() / ".cache" / "appliance" / "peer" / "pipecat-1.14.0"
PEER_SCRIPT = Path(__file__).with_name("peer_pipecat.py")

log = logging.getLogger("bench.peer")


def peer_python() -> Path:
    """pipecat's own environment, made from the package registry the first time."""
    python = PEER_HOME / "bin" / "python"
    ready = PEER_HOME / ".installed"
    if ready.is_file() and python.is_file():
        return python
    log.info("installing %s into %s (once)", PIPECAT, PEER_HOME)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEER_HOME)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", PIPECAT], check=True)
    ready.write_text(PIPECAT + "\n")
    return python


class Peer:
    """bench/peer_pipecat.py in pipecat's environment, one recording per request."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        first = self._line()
        if not first.get("ready"):
            raise RuntimeError(f"pipecat did not start; see {log_path}")

    def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"pipecat exited ({self.process.poll()}); see {self._log.name}")
            if line.startswith("{"):
                return dict(json.loads(line))

    def say(self, path: Path, speech_end_s: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"file": str(path), "speech_end_s": speech_end_s}) + "\n")
        self.process.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def speech_end_s(vad: Any, path: Path) -> float:
    """Where the recording's speech ends: the end of its last voiced Silero frame, as the product's
    VAD places the end of speech online."""
    from bench.turn_replay import last_voiced_end, vad_probabilities
    from engines.audio import load_audio_16k
    from engines.vad.params import VadParams

    return last_voiced_end(vad_probabilities(vad, load_audio_16k(path)), VadParams().threshold)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from appliance.config import load_settings, override
    from appliance.engine_set import (
        build_engines,
        llm_engine,
        llm_prompt,
        load_engines,
        open_bundle,
        session_config,
        vad_engine,
    )
    from bench.e2e_turns import run_turn
    from bench.llm_server import LlamaServer
    from bench.paths import RESULTS

    settings = override(load_settings(None), llm={"model": args.llm})
    bundle = open_bundle(settings)
    utterances = load_utterances(args.data)
    turns = [utterances[i % len(utterances)] for i in range(args.turns)]
    vad = vad_engine(settings, bundle)
    vad.load()
    ends = {u.path: speech_end_s(vad, u.path) for u in utterances}
    prompt = llm_prompt(settings, bundle, tools=False)[0]
    python = peer_python()
    RESULTS.mkdir(parents=True, exist_ok=True)
    server = LlamaServer(
        bundle.path(f"llm/{args.llm}"),
        RESULTS / "peer-llama-server.log",
        chat_format=None,
        threads=settings.llm.threads,
    )
    peer_command = [
        str(python), str(PEER_SCRIPT),
        "--whisper", str(bundle.path("asr/whisper-tiny-en/ct2/model.bin").parent),
        "--voice", str(bundle.path(f"tts/{settings.tts.voice}/onnx")),
        "--llm-url", server.url,
        "--system-prompt", prompt,
        "--temperature", str(settings.llm.temperature),
        "--max-tokens", str(settings.llm.max_reply_tokens),
        "--seed", str(args.seed),
    ]  # fmt: skip
    engines = build_engines(settings, bundle)
    engines.use_llm(llm_engine(settings, bundle, seed=args.seed))
    config = session_config(settings)
    rows: list[dict[str, Any]] = []
    peer: Peer | None = None
    try:
        await load_engines(engines)
        peer = Peer(peer_command, RESULTS / "peer-pipecat.log")
        peer.say(turns[0].path, ends[turns[0].path])  # both warm once, untimed
        await run_turn(engines, turns[0], config)
        for index, utterance in enumerate(turns):
            order = ("product", "pipecat") if index % 2 == 0 else ("pipecat", "product")
            row: dict[str, Any] = {"file": utterance.path.name, "speech_end_s": ends[utterance.path]}
            for name in order:
                if name == "pipecat":
                    row["pipecat"] = peer.say(utterance.path, ends[utterance.path])
                else:
                    ours = await run_turn(engines, utterance, config)
                    row["product"] = {
                        k: ours.get(k) for k in ("latency_ms", "transcript", "reply", "error", "stages_ms")
                    }
            log.info(
                "turn %d/%d %s: product %s ms, pipecat %s ms",
                index + 1,
                len(turns),
                utterance.path.name,
                row["product"].get("latency_ms"),
                row["pipecat"].get("latency_ms"),
            )
            rows.append(row)
    finally:
        if peer is not None:
            peer.close()
        server.stop()
        await engines.close()
    return {"llm": args.llm, "pipecat": PIPECAT, "summary": summarize(rows), "turns": rows}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in ("product", "pipecat"):
        values = [r[name]["latency_ms"] for r in rows if r[name].get("latency_ms") is not None]
        found[name] = {"latency_ms": summary(values), "failed": len(rows) - len(values)}
    ours, theirs = found["product"]["latency_ms"], found["pipecat"]["latency_ms"]
    if ours and theirs:
        found["pipecat_over_product"] = {
            q: round(theirs[q] / ours[q], 2) for q in ("p50", "p95", "p99") if ours[q] > 0
        }
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench peer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=16, help="turns each, cycling through the recordings")
    parser.add_argument("--llm", default="qwen-1.5b", help="the bundle's LLM both answer with")
    parser.add_argument("--seed", type=int, default=0, help="the LLM's sampling seed, the same for both")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("APPLIANCE_TEST_DATA", DATA)),
        help="shared test data",
    )
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error(f"--turns must be >= 1, got {args.turns}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from bench.machine import write_result

    result = asyncio.run(run(args))
    print(describe(result["summary"]))
    write_result("peer", vars(args) | {"data": str(args.data)}, result)
    return 0


def describe(found: dict[str, Any]) -> str:
    lines = []
    for name in ("product", "pipecat"):
        stats = found[name]["latency_ms"]
        figures = (
            "n/a"
            if not stats
            else f"p50 {stats['p50']:.0f}  p95 {stats['p95']:.0f}  p99 {stats['p99']:.0f} ms"
        )
        lines.append(
            f"{name:<8} end of speech -> first audio: {figures}  (no reply: {found[name]['failed']})"
        )
    if "pipecat_over_product" in found:
        ratios = found["pipecat_over_product"]
        lines.append("pipecat / product: " + "  ".join(f"{q} {v:.2f}x" for q, v in ratios.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
