"""SIP call benchmark: turn latency on a call vs the microphone path, and with 2 concurrent calls vs 1.

    .venv/bin/python -m bench.sip [--model gemma-270m] [--turns 4] [--reply-tokens 24]

The same spoken questions (../shared/data) go through the same pipeline (real VAD, Whisper, LLM,
Piper, shared engines) three ways: a microphone-like source paced at 32 ms; one SIP call from a
loopback caller that sends the speech as 20 ms G.711 RTP; two such calls at once. The caller speaks,
waits until the reply has played and gone quiet for 3 s, then asks the next question.

Turn latency is measured from outside, at the caller: from the moment the audio carrying the last
voiced sample of the question was delivered (mic frame / RTP packet) to the first reply audio that
came out (mic: the sink's first loud write; call: the first loud RTP packet at the caller). It
includes the endpointer's end-of-speech wait (end_silence_ms). The session's own trace figure
(speech_end -> playback_start) is printed beside it. p50/p95/p99 and ratios; results are written to
~/.cache/appliance/bench-results/sip-<time>.json. Figures, not assertions.

``--edge`` measures only what the call path itself adds, without the engines: the appliance echoes
each call (``EchoHandler``) and the caller times 100 ms tone bursts from the packet that starts one
to the first loud packet of its echo (RTP in, jitter buffer, G.711, 8 -> 16 kHz, 512-sample frames,
16 -> 8 kHz, 20 ms pacing), for 1 and 2 concurrent calls. The microphone path has none of these steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from appliance.audio.base import SourceBase
from appliance.audio.call import call_session_kwargs
from appliance.certificates import device_certificate
from appliance.config import Settings, SipParams, load_settings
from appliance.engine_set import build_engines, load_engines, open_bundle, session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session, SessionConfig
from appliance.sip.handlers import EchoHandler
from appliance.sip.server import SipServer
from bench.admin_wire import admin_over_tls
from bench.paths import DATA, RESULTS
from bench.sip_phone import LOOPBACK, Phone
from engines.audio import load_audio_16k, resample

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = (
    "speech/en/google_audio.wav",  # how old is the Brooklyn Bridge
    "speech/en/cheetah_test_en.wav",
    "speech/en/deepspeech_new-home-in-the-stars-16k.wav",
    "speech/en/pocketsphinx_forever_input_2_16k.wav",
)
LOUD_RMS = 0.01
QUIET_AFTER_REPLY_S = 3.0  # TTS gaps between clauses must not read as the end of the reply
REPLY_TIMEOUT_S = 60.0

log = logging.getLogger("bench.sip")


def speech_end_sample(audio: np.ndarray, rate_hz: int) -> int:
    window = rate_hz // 50
    count = len(audio) // window
    rms = np.sqrt(np.mean(audio[: count * window].reshape(count, window) ** 2, axis=1))
    loud = np.nonzero(rms > 0.02)[0]
    return int((loud[-1] + 1) * window) if len(loud) else len(audio)


@dataclass
class Caller:
    """Says each question, waits for the reply to play out, and times it. Rate-agnostic."""

    questions: list[np.ndarray]
    rate_hz: int
    latencies_s: list[float] = field(default_factory=list)
    _index: int = 0
    _offset: int = 0
    _speech_end_at: float | None = None
    _reply_seen_at: float | None = None
    _last_loud_at: float = 0.0
    _waiting_since: float = 0.0
    done: bool = False

    def next_chunk(self, samples: int, now: float) -> np.ndarray:
        if self.done or self._index >= len(self.questions):
            self.done = True
            return np.zeros(samples, dtype=np.float32)
        if self._speech_end_at is None:  # speaking
            audio = self.questions[self._index]
            chunk = audio[self._offset : self._offset + samples]
            end = speech_end_sample(audio, self.rate_hz)
            if self._offset < end <= self._offset + samples:
                self._speech_end_at = now  # this chunk carries the last voiced sample
                self._waiting_since = now
            self._offset += samples
            return np.concatenate([chunk, np.zeros(samples - len(chunk), dtype=np.float32)])
        quiet = self._reply_seen_at is not None and now - self._last_loud_at > QUIET_AFTER_REPLY_S
        if quiet or now - self._waiting_since > REPLY_TIMEOUT_S:
            if self._reply_seen_at is None:
                log.warning("no reply to question %d within %.0f s", self._index, REPLY_TIMEOUT_S)
            self._index += 1
            self._offset, self._speech_end_at, self._reply_seen_at = 0, None, None
        return np.zeros(samples, dtype=np.float32)

    def on_output(self, audio: np.ndarray, now: float) -> None:
        if len(audio) == 0 or float(np.sqrt(np.mean(np.square(audio)))) < LOUD_RMS:
            return
        self._last_loud_at = now
        if self._speech_end_at is not None and self._reply_seen_at is None:
            self._reply_seen_at = now
            self.latencies_s.append(now - self._speech_end_at)


class MicSource(SourceBase):
    """Microphone-like: one 512-sample frame every 32 ms, from the caller's script."""

    realtime = True
    name = "bench-mic"

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    async def frames(self) -> Any:
        start = time.monotonic()
        index = 0
        while not self.caller.done:
            index += 1
            await asyncio.sleep(max(0.0, start + index * 0.032 - time.monotonic()))
            yield self.caller.next_chunk(512, time.monotonic())

    async def close(self) -> None:
        return None


class TimedSink:
    realtime = True
    name = "bench-speaker"
    sample_rate_hz = 16000

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    async def write(self, audio: np.ndarray) -> None:
        self.caller.on_output(audio, time.monotonic())

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass
class Run:
    name: str
    latencies_s: list[float]
    trace_latencies_s: list[float]
    setup_s: list[float] = field(default_factory=list)  # INVITE -> 200 OK, per call
    jitter_s: list[float] = field(default_factory=list)  # at the caller, per call
    handshake_s: list[float] = field(default_factory=list)  # TLS, per call
    cpu_per_call_s: float = 0.0  # this process's CPU seconds per second of one call (phone included)

    def figures(self) -> dict[str, Any]:
        return {
            "caller_ms": _percentiles(self.latencies_s),
            "trace_ms": _percentiles(self.trace_latencies_s),
            "answer_ms": _percentiles(self.setup_s),
            "jitter_ms": _percentiles(self.jitter_s),
            "tls_handshake_ms": _percentiles(self.handshake_s),
            "cpu_ms_per_call_s": round(self.cpu_per_call_s * 1000, 1),
        }


@dataclass(frozen=True)
class Wire:
    """How the calls travel: plain (UDP, RTP) or secure (SIP over TLS, SRTP required)."""

    name: str
    server: dict[str, Any] = field(default_factory=dict)  # SipParams settings
    client: ssl.SSLContext | None = None

    @classmethod
    def secure(cls, folder: Path) -> Wire:
        cert, key = device_certificate(folder, "bench", LOOPBACK)
        settings = {"tls": True, "tls_port": 0, "tls_cert_file": cert, "tls_key_file": key}
        client = ssl.create_default_context(cafile=str(cert))
        return cls("TLS+SRTP", settings | {"media_encryption": "srtp"}, client)


PLAIN = Wire("UDP+RTP")


async def _phones(server: SipServer, scripts: list[Any], wire: Wire, run: Run) -> Run:
    """One call per script, all at once, over ``wire``; their figures added to ``run``."""
    phones = [Phone(s, tls=wire.client, srtp=wire.client is not None) for s in scripts]
    cpu, started = time.process_time(), time.monotonic()
    await asyncio.gather(*(phone.run(server.local_port, server.tls_port) for phone in phones))
    call_s = (time.monotonic() - started) * len(phones)
    run.cpu_per_call_s = (time.process_time() - cpu) / call_s
    run.setup_s = [p.setup_s for p in phones if p.setup_s is not None]
    run.jitter_s = [p.jitter_s for p in phones]
    run.handshake_s = [p.handshake_s for p in phones if wire.client is not None]
    return run


async def run_mic(engines: SessionEngines, config: SessionConfig, questions: list[np.ndarray]) -> Run:
    caller = Caller(questions, 16000)
    traces: list[Any] = []
    session = Session(
        engines=engines,
        source=MicSource(caller),
        sink=TimedSink(caller),
        config=config,
        on_turn=traces.append,
    )
    await session.run()
    return Run("microphone", caller.latencies_s, _trace_latencies(traces))


async def serve_calls(
    engines: SessionEngines,
    config: SessionConfig,
    callers: list[Caller],
    wire: Wire = PLAIN,
    run: Run | None = None,
) -> list[Any]:
    """One loopback call per caller, all at once over ``wire``, each a session on ``engines``; the
    turns' traces (the calls' own figures into ``run``)."""
    traces: list[Any] = []

    async def handle(call: Any) -> None:
        await Session(
            engines=engines, config=config, on_turn=traces.append, **call_session_kwargs(call)
        ).run()

    base = 30000 + secrets.randbelow(1000) * 2
    sip_config = SipParams(
        enabled=True,
        port=0,
        max_calls=len(callers),
        rtp_port_min=base,
        rtp_port_max=base + 10 * len(callers),
        **wire.server,
    )
    server = SipServer(sip_config, handle)
    await server.start()
    try:
        await _phones(server, callers, wire, run or Run("calls", [], []))
        await asyncio.sleep(0.5)
    finally:
        await server.stop()
    return traces


async def run_calls(
    engines: SessionEngines,
    config: SessionConfig,
    questions_8k: list[np.ndarray],
    calls: int,
    wire: Wire = PLAIN,
) -> Run:
    callers = [Caller(questions_8k, 8000) for _ in range(calls)]
    name = f"{calls} call{'s' if calls > 1 else ''}" + ("" if wire is PLAIN else f", {wire.name}")
    run = Run(name, [], [])
    run.trace_latencies_s = _trace_latencies(await serve_calls(engines, config, callers, wire, run))
    run.latencies_s = [value for c in callers for value in c.latencies_s]
    return run


class EchoTimer(Caller):
    """Tone bursts every 600 ms; times each burst's echo."""

    def __init__(self, bursts: int) -> None:
        super().__init__([], 8000)
        self.bursts = bursts
        self._sent = 0
        self._burst_at: float | None = None
        self._echoed = False
        self._next_at = 0.0
        self._phase = 0

    def next_chunk(self, samples: int, now: float) -> np.ndarray:
        if self._next_at == 0.0:
            self._next_at = now + 0.5
        if self._sent >= self.bursts and now > self._next_at:
            self.done = True
        if self._burst_at is None and now >= self._next_at and self._sent < self.bursts:
            self._burst_at, self._echoed, self._phase = now, False, 0
            self._sent += 1
            self._next_at = now + 0.6
        if self._burst_at is not None and self._phase < 5:  # 5 packets = 100 ms
            t = (np.arange(samples) + self._phase * samples) / 8000
            self._phase += 1
            return (0.4 * np.sin(2 * np.pi * 700 * t)).astype(np.float32)
        return np.zeros(samples, dtype=np.float32)

    def on_output(self, audio: np.ndarray, now: float) -> None:
        if self._burst_at is None or self._echoed or float(np.sqrt(np.mean(np.square(audio)))) < 0.05:
            return
        self._echoed = True
        self.latencies_s.append(now - self._burst_at)
        self._burst_at = None


async def run_edge(calls: int, bursts: int, wire: Wire = PLAIN) -> Run:
    base = 31000 + secrets.randbelow(1000) * 2
    server = SipServer(
        SipParams(
            enabled=True, port=0, max_calls=calls, rtp_port_min=base, rtp_port_max=base + 20, **wire.server
        ),
        EchoHandler(),
    )
    await server.start()
    timers = [EchoTimer(bursts) for _ in range(calls)]
    name = f"edge, {calls} call{'s' if calls > 1 else ''}" + ("" if wire is PLAIN else f", {wire.name}")
    run = Run(name, [], [])
    try:
        await _phones(server, timers, wire, run)
    finally:
        await server.stop()
    run.latencies_s = [v for t in timers for v in t.latencies_s]
    return run


def _trace_latencies(traces: list[Any]) -> list[float]:
    return [
        t.playback_start - t.speech_end
        for t in traces
        if t.playback_start and t.speech_end and not t.cancelled
    ]


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan"), "n": 0}
    array = np.asarray(values) * 1000
    return {
        "p50": float(np.percentile(array, 50)),
        "p95": float(np.percentile(array, 95)),
        "p99": float(np.percentile(array, 99)),
        "n": len(values),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    wires = [PLAIN, Wire.secure(Path(tempfile.mkdtemp(prefix="bench-sip-tls-")))] if args.tls else [PLAIN]
    admin = {"admin page GET /healthz (ms)": await admin_over_tls()} if args.tls else {}
    if args.edge:
        runs = [await run_edge(calls, args.bursts, wire) for calls in (1, 2) for wire in wires]
        return {run.name: run.figures() for run in runs} | admin
    settings: Settings = load_settings(None)
    llm = settings.llm.model_copy(update={"model": args.model, "max_reply_tokens": args.reply_tokens})
    settings = settings.model_copy(update={"llm": llm})
    engines = build_engines(settings, open_bundle(settings))
    await load_engines(engines)
    config = session_config(settings)
    questions = [load_audio_16k(DATA / name) for name in QUESTIONS][: args.turns]
    questions = [
        np.concatenate([q / max(float(np.abs(q).max()), 1e-6) * 0.5, np.zeros(8000, np.float32)])
        for q in questions
    ]
    questions_8k = [resample(q, 16000, 8000) for q in questions]
    try:
        runs = [await run_mic(engines, config, questions)]
        for calls in (1, 2):
            for wire in wires:
                runs.append(await run_calls(engines, config, questions_8k, calls, wire))
    finally:
        await engines.close()
    return (
        {"end_silence_ms": settings.endpointer.end_silence_ms}
        | {run.name: run.figures() for run in runs}
        | admin
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="gemma-270m", choices=["gemma-270m", "qwen-1.5b"])
    parser.add_argument(
        "--turns", type=int, default=len(QUESTIONS), help=f"questions per caller (max {len(QUESTIONS)})"
    )
    parser.add_argument("--reply-tokens", type=int, default=24)
    parser.add_argument(
        "--edge", action="store_true", help="only the call path's own delay (echo, no engines)"
    )
    parser.add_argument("--bursts", type=int, default=50, help="tone bursts per call with --edge")
    parser.add_argument(
        "--tls", action="store_true", help="each call run twice: plain, and SIP over TLS with SRTP"
    )
    parser.add_argument("--srtp", action="store_true", help="the same as --tls (both are measured together)")
    args = parser.parse_args()
    args.tls = args.tls or args.srtp
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(main_async(args))
    _write(args, results)  # first: the figures are kept even if printing fails
    if args.edge:
        _print_edge(results)
        return
    print(
        f"turn latency, end of caller speech -> first reply audio (ms; includes the {results.pop('end_silence_ms')} ms endpoint wait)"
    )
    _print_runs(results, "turn")
    mic, one, two = (results[k]["caller_ms"]["p50"] for k in ("microphone", "1 call", "2 calls"))
    print(f"ratios of p50: 1 call / microphone {one / mic:.2f}, 2 calls / 1 call {two / one:.2f}")
    _print_secure(results)


def _print_edge(results: dict[str, Any]) -> None:
    print("call path delay, tone burst sent -> its echo back (ms; RTP in and out, no engines)")
    _print_runs(results, "echo")
    one, two = (results[k]["caller_ms"]["p50"] for k in ("edge, 1 call", "edge, 2 calls"))
    print(f"ratio of p50: 2 calls / 1 call {two / one:.2f}")
    _print_secure(results)


def _print_runs(results: dict[str, Any], what: str) -> None:
    print(
        f"{'path':<26} {'n':>3} {what + ' p50':>9} {'p95':>7} {'p99':>7} {'answer':>7} {'jitter':>7} "
        f"{'tls':>6} {'cpu/call':>9}"
    )
    for name, figures in results.items():
        if "caller_ms" not in figures:
            continue
        c, a = figures["caller_ms"], figures.get("answer_ms", {})
        j, h = figures.get("jitter_ms", {}), figures.get("tls_handshake_ms", {})
        print(
            f"{name:<26} {c['n']:>3} {c['p50']:>9.1f} {c['p95']:>7.1f} {c['p99']:>7.1f} "
            f"{a.get('p50', float('nan')):>7.1f} {j.get('p50', float('nan')):>7.2f} "
            f"{h.get('p50', float('nan')):>6.1f} {figures.get('cpu_ms_per_call_s', float('nan')):>7.1f}ms"
        )
    print(
        "(answer: INVITE -> 200 OK; jitter: RFC 3550 at the caller; tls: handshake; cpu/call: CPU ms of this"
    )
    print(" process, appliance and phone together, per second of one call)")


def _print_secure(results: dict[str, Any]) -> None:
    pairs = [
        (name, f"{name}, TLS+SRTP")
        for name in results
        if f"{name}, TLS+SRTP" in results and "caller_ms" in results[name]
    ]
    for plain, secure in pairs:
        p, s = results[plain], results[secure]
        print(
            f"TLS+SRTP / plain, {plain}: p50 {s['caller_ms']['p50'] / p['caller_ms']['p50']:.2f}, "
            f"answer {s['answer_ms']['p50'] / p['answer_ms']['p50']:.2f}, "
            f"cpu {s['cpu_ms_per_call_s'] / max(p['cpu_ms_per_call_s'], 0.01):.2f}"
        )
    admin = results.get("admin page GET /healthz (ms)")
    if admin:
        print("admin page, GET /healthz (ms):")
        for name, figures in admin.items():
            print(
                f"  {name:<24} p50 {figures['p50']:>7.2f}  p95 {figures['p95']:>7.2f}  p99 {figures['p99']:>7.2f}"
            )


def _write(args: argparse.Namespace, results: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"sip-{stamp}.json"
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
