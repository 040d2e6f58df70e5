"""Echo cancellation in simulated rooms: the appliance's own Piper replies through a room (pyroomacoustics)
into its microphone, delayed 20-120 ms, with the room's noise, and people speaking over them.

    .venv/bin/python -m bench aec [--replies 8] [--people 10]

Per room and echo level (normal: the reply as loud as a person at the kiosk; loud: 6 dB louder), one
run compares, on the same signals:
- **aec**: the WebRTC canceller (``engines.aec``) fed the played audio as its reference, aligned by the
  delay a calibration (``appliance.audio.calibrate``'s chirps, through the same room) measured, then
  Silero VAD at the normal threshold (``vad.threshold``, 0.5);
- **raised**: no canceller, Silero at the raised threshold (0.85), the appliance's behaviour before;
- (for reference) **none**: no canceller, normal threshold.

Figures: ERLE after the first 2 s (the echo alone, no noise: noise would bound the figure, not the
canceller); false barge-ins per minute of echo-only playback (speech starts by the endpointer's own
rule, ``endpointer.min_speech_ms``); the share of people detected within 300 ms of starting to speak
over a reply, and how long it took; WER of Whisper on what the turn would hear (the reply is stopped at
the detection, as the session does) against the clean recording's; canceller CPU per 10 ms block
(thread time). Writes bench/results/aec-<time>.json.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import rooms
from bench.asr import DEFAULT_DATA, percentile, transcribed_speech

FRAME = 512
FRAME_S = FRAME / rooms.SAMPLE_RATE_HZ
DELAYS_S = (0.02, 0.05, 0.08, 0.12)
LEVELS = {"normal": rooms.NORMAL_ECHO_DBFS, "loud": rooms.LOUD_ECHO_DBFS}
DETECT_WITHIN_S = 0.3
BARGE_IN_AT_S = 1.5  # into the reply
STOP_LAG_S = 0.064  # the player's lead: what is still heard after a barge-in flushes the speaker
REPLIES = (
    "The canteen is open from half past eleven to two, and the menu is on the board by the entrance.",
    "Line three stopped at ten past nine for a tool change. It should be running again within the hour.",
    "First aid kits are next to every fire exit, and the nearest defibrillator is at reception.",
    "Visitors park in the north car park. Please sign in at the front desk and wear your badge at all times.",
    "The torque for the M8 flange bolts is twenty five newton metres, tightened in a cross pattern.",
    "Your shift starts at six tomorrow. The bus leaves the station at twenty past five.",
    "I can help with opening hours, directions, safety questions and the status of the production lines.",
    "Platform two is closed for maintenance today, so trains to the city leave from platform four.",
)

log = logging.getLogger("bench.aec")


@dataclass
class Engines:
    vad: Any
    asr: Any
    cancellers: dict[str, Any]  # name -> engine with stream()


def speech_starts(vad: Any, audio: np.ndarray, threshold: float, params: Any) -> list[float]:
    """Where the endpointer starts an utterance (seconds into ``audio``)."""
    from engines.vad.endpointer import Endpointer, EventKind

    stream = vad.stream()
    endpointer = Endpointer(params)
    endpointer.threshold = threshold
    starts = []
    for index in range(len(audio) // FRAME):
        probability = stream.probability(audio[index * FRAME : (index + 1) * FRAME])
        for event in endpointer.feed(float(probability), FRAME_S):
            if event.kind is EventKind.SPEECH_START:
                starts.append(event.time_s)
    return starts


def cancel(
    engine: Any, mic: np.ndarray, played: np.ndarray, reference_delay_s: float
) -> tuple[np.ndarray, list[float]]:
    """The canceller's output (aligned back by its block, as long as ``mic``) and the thread time of
    each 10 ms block."""
    from engines.aec import BLOCK_SAMPLES

    shift = round(reference_delay_s * rooms.SAMPLE_RATE_HZ)
    reference = np.concatenate([np.zeros(shift, dtype=np.float32), played])[: len(mic)]
    stream = engine.stream()
    out, costs = [], []
    for index in range(len(mic) // FRAME):
        window = slice(index * FRAME, (index + 1) * FRAME)
        started = time.thread_time()
        out.append(stream.process(mic[window], reference[window]))
        costs.append((time.thread_time() - started) * BLOCK_SAMPLES / FRAME)
    joined = np.concatenate(out)
    return np.concatenate([joined[BLOCK_SAMPLES:], np.zeros(BLOCK_SAMPLES, dtype=np.float32)]), costs


def calibrated_delay_s(room: rooms.Room, delay_s: float) -> float:
    """What ``appliance calibrate`` finds in this room: its chirps through the same path."""
    from appliance.audio.calibrate import chirp, find_delays

    sweep = chirp()
    lead = np.zeros(8000, dtype=np.float32)
    played = np.concatenate([lead, sweep, np.zeros(24000, dtype=np.float32)])
    heard = rooms.echo(played, room, delay_s=delay_s, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    delays, _ = find_delays(heard, played, [len(lead) - 160])
    return delays[0] / 1000.0


def erle_db(mic: np.ndarray, out: np.ndarray, played: np.ndarray, settle_s: float = 2.0) -> float:
    start = round(settle_s * rooms.SAMPLE_RATE_HZ)
    active = np.abs(played[start:]) > 1e-3
    return float(
        10 * np.log10(np.sum(mic[start:][active] ** 2) / max(np.sum(out[start:][active] ** 2), 1e-12))
    )


def run_room(
    engines: Engines,
    room: rooms.Room,
    level: str,
    replies: list[np.ndarray],
    people: list[tuple[np.ndarray, str]],
    noise: np.ndarray,
    params: Any,
    transcribe: Callable[[np.ndarray], str],
) -> dict[str, Any]:
    from engines.asr.text import word_error_rate

    lead_s = 0.02  # appliance.audio.echo.LEAD_S
    result: dict[str, Any] = {"room": room.name, "level": level, "distance_m": round(room.distance_m, 2)}
    echo_only_s = 0.0
    false_starts: dict[str, int] = {}
    erle: dict[str, list[float]] = {}
    costs: dict[str, list[float]] = {}
    measured: list[float] = []
    for index, reply in enumerate(replies):
        delay_s = DELAYS_S[index % len(DELAYS_S)]
        reference_delay_s = max(0.0, calibrated_delay_s(room, delay_s) - lead_s)
        measured.append(round(1000 * (reference_delay_s + lead_s), 1))
        echo = rooms.echo(reply, room, delay_s=delay_s, level_dbfs=LEVELS[level])
        mic = echo + rooms.noise_bed(noise, len(echo), room.noise_dbfs)
        echo_only_s += len(mic) / rooms.SAMPLE_RATE_HZ
        for name, engine in engines.cancellers.items():
            clean_out, _ = cancel(engine, echo, reply, reference_delay_s)
            erle.setdefault(name, []).append(erle_db(echo, clean_out, reply))
            out, block_costs = cancel(engine, mic, reply, reference_delay_s)
            costs.setdefault(name, []).extend(block_costs)
            false_starts[name] = false_starts.get(name, 0) + len(speech_starts(engines.vad, out, 0.5, params))
        false_starts["raised"] = false_starts.get("raised", 0) + len(
            speech_starts(engines.vad, mic, 0.85, params)
        )
        false_starts["none"] = false_starts.get("none", 0) + len(speech_starts(engines.vad, mic, 0.5, params))
    minutes = echo_only_s / 60.0
    result["calibrated_delays_ms"] = measured
    result["echo_only_s"] = round(echo_only_s, 1)
    result["false_barge_ins_per_min"] = {k: round(v / minutes, 2) for k, v in false_starts.items()}
    result["erle_db"] = {k: round(float(np.median(v)), 1) for k, v in erle.items()}
    result["cpu_ms_per_10ms"] = {
        k: {f"p{q}": round(percentile(v, q) * 1000, 3) for q in (50, 95, 99)} for k, v in costs.items()
    }
    result["barge_in"] = barge_ins(engines, room, level, replies, people, noise, params, transcribe)
    refs = [text for _, text in people]
    clean = [transcribe(audio) for audio, _ in people]
    result["barge_in"]["wer"]["clean"] = round(word_error_rate(refs, clean), 3)
    return result


def barge_ins(
    engines: Engines,
    room: rooms.Room,
    level: str,
    replies: list[np.ndarray],
    people: list[tuple[np.ndarray, str]],
    noise: np.ndarray,
    params: Any,
    transcribe: Callable[[np.ndarray], str],
) -> dict[str, Any]:
    from engines.asr.text import word_error_rate

    lead_s = 0.02
    at = round(BARGE_IN_AT_S * rooms.SAMPLE_RATE_HZ)
    found: dict[str, list[float | None]] = {}
    texts: dict[str, list[str]] = {}
    for index, (person, _text) in enumerate(people):
        reply = replies[index % len(replies)]
        delay_s = DELAYS_S[index % len(DELAYS_S)]
        reference_delay_s = max(0.0, calibrated_delay_s(room, delay_s) - lead_s)
        length = max(len(reply), at + len(person) + rooms.SAMPLE_RATE_HZ)
        voice = np.zeros(length, dtype=np.float32)
        voice[at : at + len(person)] = person
        onset = (at + _onset(person)) / rooms.SAMPLE_RATE_HZ
        bed = rooms.noise_bed(noise, length, room.noise_dbfs)
        played_full = np.zeros(length, dtype=np.float32)
        played_full[: len(reply)] = reply
        for name in [*engines.cancellers, "raised"]:
            threshold = 0.85 if name == "raised" else 0.5
            canceller = engines.cancellers.get(name)
            path = EchoPath(room, level, delay_s, voice + bed, canceller, reference_delay_s)
            signal = path.heard(played_full)
            starts = [s for s in speech_starts(engines.vad, signal, threshold, params) if s >= onset - 0.05]
            detected = starts[0] if starts else None
            found.setdefault(name, []).append(None if detected is None else detected - onset)
            if detected is not None:  # the session stops the reply; the turn hears the rest without it
                stop = round((detected + STOP_LAG_S) * rooms.SAMPLE_RATE_HZ)
                played = played_full.copy()
                played[stop:] = 0.0
                signal = path.heard(played)
            begin = max(0, round((onset - 0.3) * rooms.SAMPLE_RATE_HZ))
            end = at + len(person) + round(0.5 * rooms.SAMPLE_RATE_HZ)
            texts.setdefault(name, []).append(transcribe(signal[begin:end]))
    refs = [text for _, text in people]
    summary: dict[str, Any] = {"people": len(people), "detected_within_300ms": {}, "detect_ms": {}, "wer": {}}
    for name, times in found.items():
        within = [t for t in times if t is not None and t <= DETECT_WITHIN_S]
        seen = [t * 1000 for t in times if t is not None]
        summary["detected_within_300ms"][name] = round(len(within) / len(times), 3)
        summary["detect_ms"][name] = {
            "p50": round(percentile(seen, 50), 0),
            "p95": round(percentile(seen, 95), 0),
            "missed": sum(t is None for t in times),
        }
        summary["wer"][name] = round(word_error_rate(refs, texts[name]), 3)
    return summary


@dataclass(frozen=True)
class EchoPath:
    """The microphone of one barge-in case: the reply's echo, the person and the noise, then the
    canceller (None: the raw microphone)."""

    room: rooms.Room
    level: str
    delay_s: float
    near: np.ndarray
    canceller: Any
    reference_delay_s: float

    def heard(self, played: np.ndarray) -> np.ndarray:
        mic = rooms.echo(played, self.room, delay_s=self.delay_s, level_dbfs=LEVELS[self.level]) + self.near
        if self.canceller is None:
            return mic
        return cancel(self.canceller, mic, played, self.reference_delay_s)[0]


def _onset(audio: np.ndarray, block: int = 160) -> int:
    """The first 10 ms block within 30 dB of the recording's loudest."""
    power = np.mean(np.square(audio[: len(audio) // block * block].reshape(-1, block)), axis=1)
    return int(np.argmax(power > power.max() * 1e-3)) * block


def _people(data_dir: Path, count: int) -> list[tuple[np.ndarray, str]]:
    from engines.audio import load_audio_16k

    cases = [c for c in transcribed_speech(data_dir) if "telephony" not in str(c.path)]
    cases = sorted(cases, key=lambda c: c.path.name)[:count]
    return [(rooms.at_level(load_audio_16k(c.path), rooms.SPEECH_DBFS), c.reference) for c in cases]


def _aec_audio_processing() -> Any | None:
    """The other candidate (``pip install aec-audio-processing``), for the comparison only."""
    try:
        from aec_audio_processing import AudioProcessor
    except ImportError:
        return None
    from engines.aec import BlockCanceller

    class Engine:
        def stream(self) -> BlockCanceller:
            processor = AudioProcessor(enable_aec=True, enable_ns=False, enable_agc=False, enable_vad=False)
            processor.set_stream_format(16000, 1)
            processor.set_reverse_stream_format(16000, 1)

            def block(capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
                processor.process_reverse_stream(reference.tobytes())
                return np.frombuffer(processor.process_stream(capture.tobytes()), dtype=np.int16)

            return BlockCanceller(block)

    return Engine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench aec", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--replies", type=int, default=len(REPLIES), help="Piper replies per room (echo only)"
    )
    parser.add_argument("--people", type=int, default=10, help="recordings speaking over a reply, per room")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from appliance.config import load_settings, override
    from appliance.engine_set import asr_engine, endpointer_params, open_bundle, tts_engine, vad_engine
    from bench.machine import write_result
    from engines.aec import create_canceller
    from engines.audio import load_audio_16k

    settings = load_settings(None)
    bundle = open_bundle(settings)
    tts = tts_engine(settings, bundle)
    tts.load()
    replies = [
        np.concatenate(list(tts.synthesize(text, sample_rate_hz=16000))) for text in REPLIES[: args.replies]
    ]
    tts.close()
    replies = [rooms.at_level(reply, 0.0 - 20.0) for reply in replies]
    vad = vad_engine(settings, bundle)
    vad.load()
    asr = asr_engine(settings, bundle)
    asr.load()
    cancellers: dict[str, Any] = {}
    for name, ns in (("webrtc", False), ("webrtc+ns", True)):
        engine = create_canceller(backend="webrtc", noise_suppression=ns, high_pass_filter=True)
        engine.load()
        cancellers[name] = engine
    other = _aec_audio_processing()
    if other is not None:
        cancellers["aec-audio-processing"] = other
    engines = Engines(vad, asr, cancellers)
    params = endpointer_params(override(settings, endpointer={"mode": "silence"}))
    noise = load_audio_16k(args.data / "vad/noise/speechbrain_noise1.wav")
    people = _people(args.data, args.people)

    def transcribe(audio: np.ndarray) -> str:
        return str(asr.transcribe(audio).text)

    results = []
    for room in rooms.ROOMS:
        for level in LEVELS:
            log.info("%s, %s echo", room.name, level)
            results.append(run_room(engines, room, level, replies, people, noise, params, transcribe))
            _print(results[-1])
    write_result(
        "aec",
        {
            "replies": len(replies),
            "people": len(people),
            "reply_s": round(sum(len(r) for r in replies) / 16000, 1),
        },
        {"rows": results, "cancellers": list(cancellers)},
    )
    return 0


def _print(row: dict[str, Any]) -> None:
    barge = row["barge_in"]
    print(
        f"\n{row['room']} ({row['distance_m']} m), {row['level']} echo; calibrated {row['calibrated_delays_ms']} ms"
    )
    print(
        f"  {'':22} {'ERLE dB':>8} {'false/min':>9} {'<=300ms':>8} {'detect p50':>10} {'WER':>6} {'CPU ms/10ms p50/p99':>20}"
    )
    for name in [*row["erle_db"], "raised", "none"]:
        erle = row["erle_db"].get(name, "-")
        within = barge["detected_within_300ms"].get(name, "-")
        detect = barge["detect_ms"].get(name, {}).get("p50", "-")
        wer = barge["wer"].get(name, "-")
        cpu = row["cpu_ms_per_10ms"].get(name)
        cpu_text = f"{cpu['p50']}/{cpu['p99']}" if cpu else "-"
        false = row["false_barge_ins_per_min"][name]
        print(f"  {name:22} {erle!s:>8} {false!s:>9} {within!s:>8} {detect!s:>10} {wer!s:>6} {cpu_text:>20}")
    print(f"  clean recording WER {barge['wer']['clean']}")


if __name__ == "__main__":
    raise SystemExit(main())
