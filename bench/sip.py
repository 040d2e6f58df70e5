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
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from appliance.audio.base import SourceBase
from appliance.audio.call import call_session_kwargs
from appliance.config import Settings, SipConfig, load_settings
from appliance.engine_set import build_engines, load_engines, open_bundle, session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session, SessionConfig
from appliance.rtp import g711
from appliance.rtp.packet import RtpPacket, parse_rtp
from appliance.sip.handlers import EchoHandler
from appliance.sip.message import SipResponse, parse_message
from appliance.sip.server import SipServer
from bench.paths import DATA, RESULTS
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
LOOPBACK = "127.0.0.1"

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


class PhoneCaller(asyncio.DatagramProtocol):
    """A loopback phone: INVITE with SDP, ACK, RTP both ways (20 ms, PCMU), BYE."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.sip_queue: asyncio.Queue[SipResponse] = asyncio.Queue()
        self.transport: Any = None
        self.setup_s: float | None = None  # INVITE sent -> 200 OK received

    def datagram_received(self, data: bytes, addr: Any) -> None:
        message = parse_message(data)
        if isinstance(message, SipResponse):
            self.sip_queue.put_nowait(message)

    async def run(self, server_port: int) -> None:
        loop = asyncio.get_running_loop()
        sip, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(LOOPBACK, 0))
        media = _MediaSocket(self.caller)
        rtp, _ = await loop.create_datagram_endpoint(lambda: media, local_addr=(LOOPBACK, 0))
        sip_port, media_port = sip.get_extra_info("sockname")[1], rtp.get_extra_info("sockname")[1]
        call_id, tag = secrets.token_hex(8), secrets.token_hex(4)
        head = (
            f"From: <sip:bench@{LOOPBACK}:{sip_port}>;tag={tag}\r\nCall-ID: {call_id}\r\nMax-Forwards: 70\r\n"
            f"Contact: <sip:bench@{LOOPBACK}:{sip_port}>\r\n"
        )
        sdp = (
            f"v=0\r\no=bench 1 1 IN IP4 {LOOPBACK}\r\ns=-\r\nc=IN IP4 {LOOPBACK}\r\nt=0 0\r\n"
            f"m=audio {media_port} RTP/AVP 0\r\n"
        )
        target = f"sip:appliance@{LOOPBACK}:{server_port}"

        def request(method: str, cseq: int, to: str, body: str = "") -> bytes:
            via = f"Via: SIP/2.0/UDP {LOOPBACK}:{sip_port};branch=z9hG4bK{secrets.token_hex(6)}\r\n"
            extra = "Content-Type: application/sdp\r\n" if body else ""
            return (
                f"{method} {target} SIP/2.0\r\n{via}{head}To: {to}\r\nCSeq: {cseq} {method}\r\n{extra}"
                f"Content-Length: {len(body)}\r\n\r\n{body}"
            ).encode()

        invited = time.monotonic()
        sip.sendto(request("INVITE", 1, f"<{target}>", sdp), (LOOPBACK, server_port))
        while True:
            response = await asyncio.wait_for(self.sip_queue.get(), 10)
            if response.status >= 200:
                break
        if response.status != 200:
            raise RuntimeError(f"call refused: {response.status} {response.reason}")
        self.setup_s = time.monotonic() - invited
        to = response.get("To") or ""
        # In the dialog: to the appliance's Contact, through the proxies that recorded their route
        contact = response.get("Contact") or f"<{target}>"
        target = contact.split("<", 1)[-1].split(">", 1)[0]
        routes = "".join(f"Route: {r}\r\n" for r in reversed(response.get_all("Record-Route")))
        head += routes
        answer = response.body.decode()
        remote_port = int(next(line for line in answer.splitlines() if line.startswith("m=audio")).split()[1])
        sip.sendto(request("ACK", 1, to), (LOOPBACK, server_port))
        await media.stream(rtp, (LOOPBACK, remote_port))
        sip.sendto(request("BYE", 2, to), (LOOPBACK, server_port))
        await asyncio.sleep(0.2)
        sip.close()
        rtp.close()


class _MediaSocket(asyncio.DatagramProtocol):
    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def datagram_received(self, data: bytes, addr: Any) -> None:
        packet = parse_rtp(data)
        self.caller.on_output(g711.decode(packet.payload, "PCMU"), time.monotonic())

    async def stream(self, transport: Any, remote: tuple[str, int]) -> None:
        ssrc, start, index = secrets.randbits(32), time.monotonic(), 0
        while not self.caller.done:
            samples = self.caller.next_chunk(160, time.monotonic())
            packet = RtpPacket(0, index & 0xFFFF, index * 160, ssrc, g711.encode(samples, "PCMU"))
            transport.sendto(packet.to_bytes(), remote)
            index += 1
            await asyncio.sleep(max(0.0, start + index * 0.020 - time.monotonic()))


@dataclass
class Run:
    name: str
    latencies_s: list[float]
    trace_latencies_s: list[float]


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


async def serve_calls(engines: SessionEngines, config: SessionConfig, callers: list[Caller]) -> list[Any]:
    """One loopback call per caller, all at once, each a session on ``engines``; the turns' traces."""
    traces: list[Any] = []

    async def handle(call: Any) -> None:
        await Session(
            engines=engines, config=config, on_turn=traces.append, **call_session_kwargs(call)
        ).run()

    base = 30000 + secrets.randbelow(1000) * 2
    sip_config = SipConfig(
        enabled=True, port=0, max_calls=len(callers), rtp_port_min=base, rtp_port_max=base + 10 * len(callers)
    )
    server = SipServer(sip_config, handle)
    await server.start()
    try:
        await asyncio.gather(*(PhoneCaller(c).run(server.local_port) for c in callers))
        await asyncio.sleep(0.5)
    finally:
        await server.stop()
    return traces


async def run_calls(
    engines: SessionEngines, config: SessionConfig, questions_8k: list[np.ndarray], calls: int
) -> Run:
    callers = [Caller(questions_8k, 8000) for _ in range(calls)]
    traces = await serve_calls(engines, config, callers)
    latencies = [value for c in callers for value in c.latencies_s]
    return Run(f"{calls} call{'s' if calls > 1 else ''}", latencies, _trace_latencies(traces))


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


async def run_edge(calls: int, bursts: int) -> Run:
    base = 31000 + secrets.randbelow(1000) * 2
    server = SipServer(
        SipConfig(enabled=True, port=0, max_calls=calls, rtp_port_min=base, rtp_port_max=base + 20),
        EchoHandler(),
    )
    await server.start()
    timers = [EchoTimer(bursts) for _ in range(calls)]
    try:
        await asyncio.gather(*(PhoneCaller(t).run(server.local_port) for t in timers))
    finally:
        await server.stop()
    return Run(
        f"edge, {calls} call{'s' if calls > 1 else ''}", [v for t in timers for v in t.latencies_s], []
    )


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
    if args.edge:
        runs = [await run_edge(1, args.bursts), await run_edge(2, args.bursts)]
        return {run.name: {"caller_ms": _percentiles(run.latencies_s)} for run in runs}
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
        runs = [
            await run_mic(engines, config, questions),
            await run_calls(engines, config, questions_8k, 1),
            await run_calls(engines, config, questions_8k, 2),
        ]
    finally:
        await engines.close()
    return {"end_silence_ms": settings.endpointer.end_silence_ms} | {
        run.name: {
            "caller_ms": _percentiles(run.latencies_s),
            "trace_ms": _percentiles(run.trace_latencies_s),
        }
        for run in runs
    }


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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(main_async(args))
    _write(args, results)  # first: the figures are kept even if printing fails
    if args.edge:
        _print_edge(results)
        return
    print(
        f"turn latency, end of caller speech -> first reply audio (ms; includes the {results.pop('end_silence_ms')} ms endpoint wait)"
    )
    print(
        f"{'path':<12} {'n':>3} {'p50':>7} {'p95':>7} {'p99':>7}   trace p50 (speech_end -> playback_start)"
    )
    for name, figures in results.items():
        c, t = figures["caller_ms"], figures["trace_ms"]
        print(f"{name:<12} {c['n']:>3} {c['p50']:>7.0f} {c['p95']:>7.0f} {c['p99']:>7.0f}   {t['p50']:>7.0f}")
    mic, one, two = (results[k]["caller_ms"]["p50"] for k in ("microphone", "1 call", "2 calls"))
    print(f"ratios of p50: 1 call / microphone {one / mic:.2f}, 2 calls / 1 call {two / one:.2f}")


def _print_edge(results: dict[str, Any]) -> None:
    print("call path delay, tone burst sent -> its echo back (ms; RTP in and out, no engines)")
    print(f"{'path':<14} {'n':>3} {'p50':>7} {'p95':>7} {'p99':>7}")
    for name, figures in results.items():
        c = figures["caller_ms"]
        print(f"{name:<14} {c['n']:>3} {c['p50']:>7.1f} {c['p95']:>7.1f} {c['p99']:>7.1f}")
    one, two = (results[k]["caller_ms"]["p50"] for k in ("edge, 1 call", "edge, 2 calls"))
    print(f"ratio of p50: 2 calls / 1 call {two / one:.2f}")


def _write(args: argparse.Namespace, results: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"sip-{stamp}.json"
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
