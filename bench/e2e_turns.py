"""One benchmark turn: the real pipeline in real time, then the same work on the bare engines.

- ``pipeline``: the utterance fed through ``one_turn`` (a fresh session, as ``appliance talk``) at
  microphone pace with trailing silence, so the endpoint wait is real; the turn's trace.
- ``floor``: the engines' own time for that turn's work, back to back: ASR of the utterance, the LLM
  to its first clause (the pipeline's clause splitter), TTS of that clause to its first chunk.
- ``sequential``: each stage to completion before the next (whole transcript, whole reply, whole
  synthesis), then play; latency to first audio = endpoint wait + ASR + whole reply + whole synthesis.

Floor and sequential come from one pass over the engines (the first-clause time is read off the same
stream that then runs to the end) on exactly the audio the pipeline's turn transcribed (its speech
segment, not the whole file), after the LLM's cache of the turn's prompt is evicted so that the pass
evaluates the same prompt tokens as a turn without partials. ``endpoint + floor`` is the honest
reference for a pipeline that starts only at the endpoint. The LLM samples at the configured
temperature: with ``--seed`` both draw the same numbers and give the same reply (``same_reply``);
without, the replies may differ; both are recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import SessionConfig
from bench.engine_timeline import EngineTimeline

TAIL_SILENCE_S = 1.5  # as ``appliance talk``: lets the endpointer confirm the end of speech


class TurnAudio:
    """The ASR engine as the pipeline uses it, keeping the audio of the last transcription a turn asked
    for (partial transcripts pass a cancel event, a turn does not)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last: np.ndarray | None = None

    def load(self) -> None:
        self.inner.load()

    def transcribe(self, audio: np.ndarray, *, cancel: Any = None) -> Any:
        if cancel is None:
            self.last = audio
        return self.inner.transcribe(audio, cancel=cancel)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class Utterance:
    path: Path
    seconds: float
    transcript: str


def _engine_pass(engines: SessionEngines, audio_16k: np.ndarray, first_clause_words: int) -> dict[str, Any]:
    """Runs on one thread while the pipeline is idle; every time in milliseconds."""
    from appliance.pipeline.conversation import Conversation
    from engines.llm import GenerationStats
    from engines.tts.clauses import ClauseSplitter

    started = time.perf_counter()
    transcript = engines.asr.transcribe(audio_16k).text.strip()
    asr_ms = (time.perf_counter() - started) * 1000.0

    _evict_turn_prefix(engines)
    splitter = ClauseSplitter(first_clause_words=first_clause_words)
    stats = GenerationStats()
    first_clause: str | None = None
    first_clause_ms: float | None = None
    pieces: list[str] = []
    started = time.perf_counter()
    for piece in engines.llm.stream(Conversation().with_user(transcript), stats=stats):
        pieces.append(piece)
        if first_clause is None:
            done = splitter.push(piece)
            if done:
                first_clause, first_clause_ms = done[0], (time.perf_counter() - started) * 1000.0
    llm_total_ms = (time.perf_counter() - started) * 1000.0
    reply = "".join(pieces).strip()
    if first_clause is None:  # a reply shorter than one clause: its end is the first clause
        flushed = splitter.flush()
        first_clause = flushed[0] if flushed else reply
        first_clause_ms = llm_total_ms

    tts_first_chunk_ms = _first_chunk_ms(engines, first_clause)
    started = time.perf_counter()
    reply_samples = sum(chunk.size for chunk in engines.tts.synthesize(reply or first_clause))
    tts_whole_ms = (time.perf_counter() - started) * 1000.0
    return {
        "transcript": transcript,
        "reply": reply,
        "first_clause": first_clause,
        "llm_tokens": stats.generated_tokens,
        "llm_prompt_tokens": stats.prompt_tokens,
        "llm_evaluated_prompt_tokens": stats.evaluated_prompt_tokens,
        "asr_ms": asr_ms,
        "llm_first_clause_ms": first_clause_ms,
        "llm_total_ms": llm_total_ms,
        "tts_first_chunk_ms": tts_first_chunk_ms,
        "tts_whole_ms": tts_whole_ms,
        "reply_audio_s": reply_samples / engines.tts.sample_rate_hz,
    }


def _evict_turn_prefix(engines: SessionEngines) -> None:
    """One token for an unrelated message, so the LLM's KV cache no longer holds the pipeline turn's
    prompt: the bare pass then evaluates its prompt past the system prefix, as the pipeline turn did
    (reusing the turn's cached prompt would make the floor and the baseline look faster than they are)."""
    import threading

    from engines.llm import Message

    cancel = threading.Event()
    for _ in engines.llm.stream([Message("user", "OK.")], cancel=cancel):
        cancel.set()


def _first_chunk_ms(engines: SessionEngines, text: str) -> float:
    started = time.perf_counter()
    chunks = engines.tts.synthesize(text)
    next(iter(chunks), None)
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    for _ in chunks:  # finish the generator so the voice is idle again
        pass
    return elapsed_ms


async def run_turn(
    engines: SessionEngines,
    utterance: Utterance,
    config: SessionConfig,
    timeline: EngineTimeline | None = None,
) -> dict[str, Any]:
    """One utterance through the pipeline, then the floor and the sequential baseline; a JSON row
    (with ``timeline``: what engine work ran inside each stage, ``engine_ms``)."""
    from appliance.audio.files import MemorySink, wav_file_source
    from appliance.pipeline.oneshot import one_turn
    from engines.audio import load_audio_16k

    source = wav_file_source(utterance.path, realtime=True, tail_silence_s=TAIL_SILENCE_S)
    sink = MemorySink(engines.tts.sample_rate_hz)
    recorder = engines.asr if isinstance(engines.asr, TurnAudio) else None
    if recorder is not None:
        recorder.last = None
    if timeline is not None:
        timeline.clear()
    trace = await one_turn(engines, source, sink, config=config)
    row: dict[str, Any] = {
        "file": utterance.path.name,
        "audio_s": utterance.seconds,
        "reference": utterance.transcript,
    }
    if trace is None:
        row["error"] = "no speech found"
        return row
    stages_ms = trace.stages_ms()
    row.update(
        {
            "error": trace.error,
            "cancelled": trace.cancelled,
            "speculative": trace.speculative,
            "transcript": trace.transcript,
            "reply": trace.reply,
            "llm_tokens": trace.llm_tokens,
            "stages_ms": stages_ms,
            "endpoint_by": trace.endpoint_by,
            "turn_checks": trace.turn_checks,
            "turn_complete_p": trace.turn_complete_p,
            "audio_s_transcribed": round(trace.audio_s, 3),
            "partials": trace.partials,
            "partial_asr_ms": trace.partial_asr_ms,
            "prefill_tokens": trace.prefill_tokens,
            "prefill_reused": trace.prefill_reused,
            "prefill_discarded": trace.prefill_discarded,
            "llm_prompt_tokens": trace.llm_prompt_tokens,
            "llm_evaluated_tokens": trace.llm_evaluated_tokens,
        }
    )
    if timeline is not None:
        row["engine_ms"] = timeline.profile(trace)
    turn_audio = recorder.last if recorder is not None else None
    audio = turn_audio if turn_audio is not None else load_audio_16k(utterance.path)
    first_words = config.turn.speech.first_clause_words
    bare = await engines.llm_worker.call(_engine_pass, engines, audio, first_words)
    floor_ms = bare["asr_ms"] + bare["llm_first_clause_ms"] + bare["tts_first_chunk_ms"]
    endpoint_wait_ms = stages_ms.get("endpoint_wait") or 0.0
    sequential_ms = endpoint_wait_ms + bare["asr_ms"] + bare["llm_total_ms"] + bare["tts_whole_ms"]
    latency_ms = stages_ms.get("turn_latency")
    row["floor"] = {k: _r(v) for k, v in bare.items() if k.endswith("_ms")} | {
        "floor_ms": _r(floor_ms),
        "sequential_ms": _r(sequential_ms),
        "sequential_endpoint_wait_ms": _r(endpoint_wait_ms),
        "endpoint_plus_floor_ms": _r(endpoint_wait_ms + floor_ms),
        "baseline_audio_s": round(len(audio) / 16000, 3),
        "baseline_audio": "the turn's own" if turn_audio is not None else "the whole file",
    }
    row["bare_engines"] = {
        k: bare[k]
        for k in (
            "transcript",
            "reply",
            "first_clause",
            "llm_tokens",
            "llm_prompt_tokens",
            "llm_evaluated_prompt_tokens",
        )
    }
    row["bare_engines"]["reply_audio_s"] = round(bare["reply_audio_s"], 3)
    row["same_reply"] = bare["reply"] == trace.reply
    if latency_ms is not None:
        row["latency_ms"] = latency_ms
        row["latency_over_floor"] = round(latency_ms / floor_ms, 3)
        row["latency_minus_floor_ms"] = _r(latency_ms - floor_ms)
        row["speedup_vs_sequential"] = round(sequential_ms / latency_ms, 3)
    return row


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
