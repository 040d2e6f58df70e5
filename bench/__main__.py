"""python -m bench [--llm NAME...] [--turns N] [--out DIR]: the end-to-end turn latency suite.
python -m bench NAME [ARGS...]: run one engine or subsystem benchmark.

Each benchmark prints its figures and writes a JSON result under ~/.cache/appliance/bench-results/ (the end-to-end
suite: a folder ~/.cache/appliance/bench-results/<time>/ with result.json and PNG plots).
"""

from __future__ import annotations

import runpy
import sys

BENCHMARKS = {
    "e2e": "turn latency through the real pipeline vs floor vs sequential, cold start, RSS, plots (default)",
    "asr": "Whisper on ONNX Runtime vs faster-whisper, same weights (latency, WER)",
    "asr_models": "Whisper models side by side (base vs tiny.en): microphone, call path, partial audio",
    "asr_int8": "Whisper int8 quantization choices: per tensor/channel, 7-bit weights (latency, WER)",
    "llm": "first token with the cached system prompt vs cold vs raw llama.cpp; decode speed",
    "quant": "llama.cpp 4-bit formats on this CPU (repacked at load): first token, token pace, perplexity",
    "llama_builds": "prefill and decode speed of llama.cpp builds side by side (portable vs native)",
    "vad": "Silero per-frame cost, torch vs ONNX Runtime",
    "turn": "end of turn: the sound, the words (the reply LLM), both, a baseline (endpoint wait, pauses cut)",
    "tts": "Piper first chunk vs whole reply, 1-4 sentences",
    "first_piece": "the reply's first spoken piece of 2-4 words vs whole: Whisper's WER, time to first audio",
    "peer": "this product vs pipecat 1.14 on the same engines and recordings, in one run (turn latency)",
    "sip": "turn latency on a call vs the microphone, 1 vs 2 calls",
    "sessions": "1, 2, 4 calls on one LLM: batched slots vs one reply at a time; decode tok/s 1 vs 3",
    "admin": "admin page request latency and event-loop lag",
    "llm_server": "first token from a site server (llama_cpp.server, same GGUF) vs the in-process engine",
    "sip_register": "registering with a Kamailio registrar: REGISTER time, renewal punctuality, idle vs busy",
    "fleet": "calls through the Kamailio proxy vs direct (turn latency, call setup); a dead appliance's cost",
    "tools": "spoken questions about a test site: right tool and arguments, fact in the answer, latency",
    "answers": "spoken questions about a site: answered from its facts, declined, invented figures, latency",
    "interruptions": "speech over a reply: backchannels go on, stop words and new questions stop it (timing)",
    "noise": "noise suppression: WER and end of turn in noise at 20-0 dB, false turns on noise and music, cost",
    "wake": "wake words: found in noise at three speeds (delay), false wakes per hour, cost",
    "aec": "echo cancellation in simulated rooms: ERLE, false and real barge-ins, WER, CPU vs the raised threshold",
}


def usage() -> str:
    lines = [
        "usage: python -m bench [--llm NAME...] [--turns N] [--out DIR]   (the e2e suite)",
        "       python -m bench NAME [ARGS...]   (python -m bench NAME --help for its options)",
        "",
    ]
    lines += [f"  {name:<12} {what}" for name, what in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv and argv[0] in {"-h", "--help"}:
        print(usage())
        return 0
    if not argv or argv[0].startswith("-"):
        argv = ["e2e", *argv]  # no NAME: the end-to-end suite with these options
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"python -m bench {name}", *rest]
    runpy.run_module(f"bench.{name}", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
