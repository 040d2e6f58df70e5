"""One bundle measured on an evaluation set, in a process of its own (``appliance.daemon.canary`` starts it
once for the active bundle and once for the candidate): whether its engines load, and for each
recording the transcript and the engines' share of a turn (speech recognition, the reply's first
clause, its first audio), then the process's peak memory. Recordings that expect facts in the answer
or a tool call are answered once more as a turn in service is (``appliance.pipeline.turn``, the
site's tools included), to see whether they are. Prints one JSON object.

    python -m appliance.daemon.canary_worker BUNDLE_DIR SET.json SETTINGS.json
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any


def measure(bundle_dir: Path, items: list[dict[str, Any]], settings_data: dict[str, Any]) -> dict[str, Any]:
    from appliance.config import Settings, override
    from appliance.engine_set import asr_engine, check_llm_runs, llm_engine, tts_engine
    from appliance.pipeline.conversation import Conversation
    from engines.audio import load_audio_16k
    from engines.bundle import Bundle
    from engines.errors import EngineError
    from engines.tts.clauses import ClauseSplitter

    settings = override(Settings(**settings_data), bundle={"dir": str(bundle_dir)})
    started = time.perf_counter()
    try:
        bundle = Bundle.open(bundle_dir, verify=True, full=False)
        check_llm_runs(bundle)
        asr, llm, tts = (
            asr_engine(settings, bundle),
            llm_engine(settings, bundle, seed=0),
            tts_engine(settings, bundle),
        )
        for engine in (asr, llm, tts):
            engine.load()
    except EngineError as err:
        return {"loads": False, "error": str(err), "peak_rss_mb": _peak_rss_mb()}
    load_s = time.perf_counter() - started

    def one(item: dict[str, Any]) -> dict[str, Any]:
        audio = load_audio_16k(Path(item["audio"]))
        t0 = time.perf_counter()
        transcript = asr.transcribe(audio).text.strip()
        asr_ms = (time.perf_counter() - t0) * 1000.0
        splitter = ClauseSplitter(settings.tts.first_clause_words)
        t0 = time.perf_counter()
        first_clause, first_clause_ms, pieces = None, None, []
        for piece in llm.stream(Conversation().with_user(transcript), conversation=item["audio"]):
            pieces.append(piece)
            done = splitter.push(piece) if first_clause is None else []
            if done:
                first_clause, first_clause_ms = done[0], (time.perf_counter() - t0) * 1000.0
        reply = "".join(pieces).strip()
        llm.end_conversation(item["audio"])
        if first_clause is None:
            first_clause, first_clause_ms = reply, (time.perf_counter() - t0) * 1000.0
        t0 = time.perf_counter()
        next(iter(tts.synthesize(first_clause or "Sorry.")))
        tts_ms = (time.perf_counter() - t0) * 1000.0
        return {
            "audio": item["audio"],
            "reference": item["text"],
            "transcript": transcript,
            "reply": reply,
            "asr_ms": round(asr_ms, 1),
            "first_clause_ms": round(first_clause_ms or 0.0, 1),
            "tts_first_audio_ms": round(tts_ms, 1),
            "turn_ms": round(asr_ms + (first_clause_ms or 0.0) + tts_ms, 1),
        }

    one(items[0])  # warm-up, not counted: the first run of each engine pays for its allocations
    results = [one(item) for item in items]
    checked = [(item, result) for item, result in zip(items, results, strict=True) if _expects(item)]
    if checked:
        answered = asyncio.run(_answer(settings, asr, llm, tts, [item for item, _ in checked]))
        for (_, result), answer in zip(checked, answered, strict=True):
            result.update(answer)
    for engine in (asr, llm, tts):
        engine.close()
    return {"loads": True, "load_s": round(load_s, 2), "items": results, "peak_rss_mb": _peak_rss_mb()}


def _expects(item: dict[str, Any]) -> bool:
    return bool(item.get("facts") or item.get("tool"))


async def _answer(
    settings: Any, asr: Any, llm: Any, tts: Any, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each item answered as a turn in service is: its reply, the tools called, and the expected
    facts found in the reply (compared as the WER compares words)."""
    from appliance.audio.files import NullSink
    from appliance.engine_set import tool_box
    from appliance.pipeline.conversation import Conversation
    from appliance.pipeline.engines import TurnEngines
    from appliance.pipeline.playback import Player
    from appliance.pipeline.turn import Turn, TurnConfig
    from appliance.pipeline.workers import EngineWorker
    from appliance.trace.record import TurnTrace
    from engines.asr.text import normalize_text
    from engines.audio import load_audio_16k

    engines = TurnEngines(asr, EngineWorker("asr"), llm, EngineWorker("llm"), tts, EngineWorker("tts"))
    tools = tool_box(settings)
    if tools is not None:
        tools.load()
    answers = []
    try:
        for index, item in enumerate(items):
            trace = TurnTrace(turn_id=f"canary-{index}", session_id="canary")
            turn = Turn(
                engines=engines,
                player=Player(NullSink(tts.sample_rate_hz)),
                messages_for=Conversation().with_user,
                audio_16k=load_audio_16k(Path(item["audio"])),
                trace=trace,
                config=TurnConfig(replies=settings.agent, speech=settings.tts),
                tools=tools,
            )
            turn.confirm()
            await turn.run()
            llm.end_conversation(trace.session_id)
            said = f" {normalize_text(trace.reply)} "
            facts = [str(f) for f in item.get("facts", [])]
            answers.append(
                {
                    "answer": trace.reply,
                    "tool_calls": trace.tool_calls,
                    "facts_expected": len(facts),
                    "facts_found": sum(f" {normalize_text(f)} " in said for f in facts),
                    "tool_expected": bool(item.get("tool")),
                    "tool_called": bool(item.get("tool")) and item.get("tool") in trace.tool_calls,
                    "invented": [f for w in trace.withheld if w["why"] == "figure" for f in w["figures"]],
                }
            )
    finally:
        for worker in (engines.asr_worker, engines.llm_worker, engines.tts_worker):
            worker.shutdown()
    return answers


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def main(argv: list[str]) -> int:
    bundle_dir, set_file, settings_file = (Path(a) for a in argv)
    items = json.loads(set_file.read_text(encoding="utf-8"))
    settings_data = json.loads(settings_file.read_text(encoding="utf-8"))
    print(json.dumps(measure(bundle_dir, items, settings_data)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
