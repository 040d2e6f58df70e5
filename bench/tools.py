"""Tool calls through the real pipeline: spoken questions about a test site (its facts file, a line
status service on loopback, the device's clock), each asked once by Piper's voice into Whisper, Qwen
with the site's tools, Piper.

    .venv/bin/python -m bench tools [--model qwen-1.5b]

Per question: which tool the model called and with what (right tool and arguments?), whether the
expected fact is in the spoken answer, and the latency from the end of speech to the first audio (for a
tool turn: the preamble) and to the first audio of the answer itself. Plain questions (no tool wanted)
are asked too: the first audio of a tool turn is compared with their p50. Results:
~/.cache/appliance/bench-results/tools-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from appliance.config import Settings, load_settings, override
from appliance.engine_set import build_engines, load_engines, open_bundle
from bench.machine import write_result
from bench.sip import _percentiles
from bench.site import one_turn, send, serve_http, site_agent
from engines.audio import resample

log = logging.getLogger("bench.tools")


@dataclass(frozen=True)
class Question:
    text: str
    tool: str | None  # the tool that should be called (None: none)
    argument: str = ""  # what the call's arguments must hold (the line number)
    answer: tuple[str, ...] = ()  # one of these must be in the spoken answer (lower case)


QUESTIONS = (
    Question("What time does the canteen open?", "site_facts", answer=("7",)),
    Question("When does the canteen close today?", "site_facts", answer=("15:30", "3:30", "half past three")),
    Question("Is the canteen open at the weekend?", "site_facts", answer=("closed", "not open", "no")),
    Question("Where is the first aid room?", "site_facts", answer=("gate 2", "gate two")),
    Question("Who are the first aiders on the early shift?", "site_facts", answer=("maria", "tom")),
    Question("Where can visitors park?", "site_facts", answer=("car park c", "park c", " c")),
    Question("When does the early shift start?", "site_facts", answer=("6", "six")),
    Question("What are the hours of the night shift?", "site_facts", answer=("22", "10", "ten")),
    Question("What torque do the M8 wheel bolts on line 3 need?", "site_facts", answer=("25", "twenty-five")),
    Question("Where is lost property kept?", "site_facts", answer=("reception",)),
    Question("Is line 3 running?", "line_status", "3", ("running",)),
    Question("What is the status of line 4?", "line_status", "4", ("stop",)),
    Question("Has line 2 stopped?", "line_status", "2", ("running", "not stopped", "no")),
    Question("Is production line 5 working right now?", "line_status", "5", ("running", "yes")),
    Question("Tell me whether line 1 is running.", "line_status", "1", ("running",)),
    Question("Is line 6 down?", "line_status", "6", ("stop",)),
    Question("What time is it?", "device_status", answer=(":",)),
    Question("What is the date today?", "device_status", answer=(str(datetime.now().year), "december")),
    Question("Hello, how are you today?", None),
    Question("Thank you very much for your help.", None),
    Question("Good morning!", None),
    Question("Can you say hello to my colleague?", None),
)
STOPPED_LINES = {"4", "6"}


class _LineService(http.server.BaseHTTPRequestHandler):
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _LineService.paths.append(self.path)
        line = self.path.rsplit("/", 1)[-1]
        send(self, {"line": line, "status": "stopped" if line in STOPPED_LINES else "running"})

    def log_message(self, *args: object) -> None:
        return None


def site_settings(model: str, port: int) -> Settings:
    return override(load_settings(None), agent=site_agent(port), llm={"model": model})


@dataclass
class _Timed:
    """The TTS, recording when the first audio of each clause came out."""

    tts: Any
    clauses: list[tuple[str, float]] = field(default_factory=list)

    def synthesize(self, text: str, **kwargs: Any) -> Iterator[np.ndarray]:
        first = True
        for chunk in self.tts.synthesize(text, **kwargs):
            if first:
                self.clauses.append((text, time.monotonic()))
                first = False
            yield chunk

    def load(self) -> None:
        self.tts.load()

    def phonemes(self, words: Any) -> list[str]:
        return list(self.tts.phonemes(words))

    def close(self) -> None:
        self.tts.close()


async def _ask(
    engines: Any, timed: _Timed, settings: Settings, question: Question, voice: Any
) -> dict[str, Any]:
    audio_22k = np.concatenate([chunk for chunk in voice.synthesize(question.text, sample_rate_hz=22050)])
    audio = resample(audio_22k, 22050, 16000).astype(np.float32)
    audio = np.concatenate(
        [
            np.zeros(8000, np.float32),
            audio / max(float(np.abs(audio).max()), 1e-6) * 0.5,
            np.zeros(24000, np.float32),
        ]
    )
    timed.clauses.clear()
    _LineService.paths.clear()
    trace = await one_turn(engines, settings, audio)
    if trace is None:
        return {"question": question.text, "heard": "", "error": "no turn"}
    preamble = settings.agent.tool_preamble
    spoken = [text for text, _ in timed.clauses]
    answer_at = next((at for text, at in timed.clauses if text != preamble), None)
    answer = " ".join(text for text in spoken if text != preamble)
    called = [c for c in trace.tool_calls if not c.startswith(("refused:", "repaired:"))]
    right_tool = (called[:1] == [question.tool]) if question.tool else not trace.tool_calls
    right_argument = not question.argument or _LineService.paths == [f"/lines/{question.argument}"]
    return {
        "question": question.text,
        "heard": trace.transcript,
        "tool_calls": trace.tool_calls,
        "paths": list(_LineService.paths),
        "right_tool": right_tool,
        "right_arguments": right_tool and right_argument,
        "answer": answer,
        "answer_right": not question.answer or any(a in answer.lower() for a in question.answer),
        "first_audio_ms": _ms(trace.speech_end, trace.playback_start),
        "answer_audio_ms": _ms(trace.speech_end, answer_at),
        "tool_ms": trace.tool_ms,
        "wants_tool": question.tool is not None,
    }


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000.0, 1)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with serve_http(_LineService) as port:
        settings = site_settings(args.model, port)
        bundle = open_bundle(settings)
        engines = build_engines(settings, bundle)
        timed = _Timed(engines.tts)
        engines.tts = timed  # type: ignore[assignment]
        await load_engines(engines)
        try:
            rows = [await _ask(engines, timed, settings, q, timed.tts) for q in QUESTIONS]
        finally:
            await engines.close()
    tool_rows = [r for r in rows if r.get("wants_tool")]
    plain_rows = [r for r in rows if "wants_tool" in r and not r["wants_tool"]]
    plain_p50 = _percentiles([r["first_audio_ms"] / 1000 for r in plain_rows if r["first_audio_ms"]])["p50"]
    tool_first = _percentiles([r["first_audio_ms"] / 1000 for r in tool_rows if r["first_audio_ms"]])
    return {
        "right_tool": sum(r["right_tool"] for r in tool_rows) / max(len(tool_rows), 1),
        "right_tool_and_arguments": sum(r["right_arguments"] for r in tool_rows) / max(len(tool_rows), 1),
        "no_tool_when_none_wanted": sum(r["right_tool"] for r in plain_rows) / max(len(plain_rows), 1),
        "answer_right": sum(r["answer_right"] for r in tool_rows) / max(len(tool_rows), 1),
        "tool_turn_first_audio_ms": tool_first,
        "tool_turn_answer_audio_ms": _percentiles(
            [r["answer_audio_ms"] / 1000 for r in tool_rows if r["answer_audio_ms"]]
        ),
        "plain_turn_first_audio_ms": _percentiles(
            [r["first_audio_ms"] / 1000 for r in plain_rows if r["first_audio_ms"]]
        ),
        "tool_first_audio_p50_minus_plain_p50_ms": tool_first["p50"] - plain_p50,
        "questions": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen-1.5b")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(main_async(args))
    write_result("tools", vars(args), results)
    for row in results["questions"]:
        mark = (
            "ok "
            if row.get("right_arguments", row.get("right_tool")) and row.get("answer_right", True)
            else "BAD"
        )
        print(
            f"{mark} {row['question']:<52} heard {row.get('heard', '')!r:<50} calls {row.get('tool_calls')} "
            f"first {row.get('first_audio_ms')} answer {row.get('answer_audio_ms')} ms: {row.get('answer', '')[:70]!r}"
        )
    print(
        f"right tool {results['right_tool']:.0%}, right tool and arguments {results['right_tool_and_arguments']:.0%}, "
        f"no tool when none wanted {results['no_tool_when_none_wanted']:.0%}, fact in the answer {results['answer_right']:.0%}"
    )
    for key in ("tool_turn_first_audio_ms", "tool_turn_answer_audio_ms", "plain_turn_first_audio_ms"):
        p = results[key]
        print(f"{key:<28} p50 {p['p50']:>6.0f} p95 {p['p95']:>6.0f} p99 {p['p99']:>6.0f} (n={p['n']})")
    print(
        f"tool turn first audio p50 - plain turn p50: {results['tool_first_audio_p50_minus_plain_p50_ms']:+.0f} ms"
    )


if __name__ == "__main__":
    main()
