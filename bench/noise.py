"""Noise suppression, judged by what the appliance gets right in noise: every English recording of
``../shared/data/speech/en`` with a full transcript, mixed with each noise of ``vad/noise`` and a
babble of three other speakers (``vad/speech_untranscribed``) at several SNRs, 0.3 s of noise before
the speech and 1.5 s after (an open microphone), on the 16 kHz path and the 8 kHz call path.

    .venv/bin/python -m bench noise [--snrs 20,10,5,0] [--paths 16k,8k] [--engines none,rnnoise,deepfilternet]
        [--plot FILE] [--plot-only RESULT.json]

Side by side in one run, for each suppressor (``denoise.engine``; none is the audio as heard):
- Whisper's word error rate when it hears the suppressor's output (``denoise.feed = asr``), per noise
  and SNR (tiny.en int8, the shipped model; ``APPLIANCE_ASR__MODEL=whisper-base`` for the other);
- the end of turn when the VAD and Smart Turn hear it (``feed = vad``): the wait from the end of speech
  to the endpoint (p50/p95) and the share of turns ended by the long incomplete silence or the
  maximum length, with the shipped endpointer (the sound's verdict only: no LLM here);
- turns opened per hour on noise alone and on music (``vad/noise``, ``vad/music``, ``vad/nonspeech``);
- the suppressor's cost per second of audio, per stream (one thread).

SNR: the speech's RMS over its voiced frames against the noise's RMS. Results:
~/.cache/appliance/bench-results/noise-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config import load_settings, override
from appliance.engine_set import asr_engine, open_bundle, vad_engine
from bench.machine import write_result
from bench.paths import DATA
from engines.asr.text import normalize_text, word_error_rate
from engines.audio import load_audio, resample
from engines.bundle import Bundle
from engines.denoise import DenoiseParams, create_denoiser
from engines.turn import create_turn_detector
from engines.vad.ended_by import EndedBy
from engines.vad.endpointer import Endpointer, EndpointEvent, EventKind
from engines.vad.frames import frame_probabilities
from engines.vad.params import EndpointerParams

log = logging.getLogger("bench.noise")

REPO = Path(__file__).resolve().parents[1]
RATE = 16000
FRAME = 512
BEFORE_S, AFTER_S = 0.3, 1.5
ENGINES = ("none", "rnnoise", "deepfilternet")


def load_16k(path: Path) -> np.ndarray:
    audio, rate = load_audio(path)
    return resample(audio, rate, RATE)


def speech_set() -> list[tuple[str, np.ndarray, str]]:
    """(name, 16 kHz audio, transcript) of every English recording with a whole transcript."""
    with (DATA / "MANIFEST.tsv").open() as f:
        rows = [
            r
            for r in csv.DictReader(f, delimiter="\t")
            if r["file"].startswith("speech/en/")
            and r["transcript"] not in ("-", "")
            and not r["transcript"].startswith("[")
        ]
    return [(Path(r["file"]).stem, load_16k(DATA / r["file"]), r["transcript"]) for r in rows]


def babble() -> np.ndarray:
    """Three other people talking at once, each at the same level."""
    voices = [load_16k(p) for p in sorted((DATA / "vad" / "speech_untranscribed").glob("*.wav"))]
    length = max(len(v) for v in voices)
    mixed = np.zeros(length, dtype=np.float32)
    for voice in voices:
        mixed += np.resize(voice / (np.sqrt(np.mean(voice**2)) + 1e-9), length).astype(np.float32)
    return mixed


def noise_set() -> dict[str, np.ndarray]:
    noises = {p.stem: load_16k(p) for p in sorted((DATA / "vad" / "noise").glob("*.wav"))}
    noises["babble"] = babble()
    return noises


def voiced_rms(audio: np.ndarray) -> float:
    """RMS over the frames within 30 dB of the loudest (the speech, not its pauses)."""
    frames = audio[: len(audio) // 320 * 320].reshape(-1, 320)
    energy = np.sqrt((frames**2).mean(axis=1) + 1e-12)
    return float(np.sqrt((frames[energy > energy.max() * 10 ** (-30 / 20)] ** 2).mean()))


def mixed(
    speech: np.ndarray, noise: np.ndarray | None, snr_db: float, rng: np.random.Generator
) -> np.ndarray:
    before, after = int(BEFORE_S * RATE), int(AFTER_S * RATE)
    clean = np.concatenate([np.zeros(before, np.float32), speech, np.zeros(after, np.float32)])
    if noise is None:
        return clean.astype(np.float32)
    if len(noise) < len(clean):
        noise = np.tile(noise, len(clean) // len(noise) + 1)
    start = int(rng.integers(0, len(noise) - len(clean) + 1))
    part = noise[start : start + len(clean)].astype(np.float32)
    part = part * (voiced_rms(speech) / (np.sqrt(np.mean(part**2)) + 1e-12)) / 10 ** (snr_db / 20)
    out = clean + part
    peak = float(np.abs(out).max())
    return (out / peak * 0.99 if peak > 0.99 else out).astype(np.float32)


def call_path(audio: np.ndarray) -> np.ndarray:
    """As the phone line carries it: 8 kHz and back."""
    return resample(resample(audio, RATE, 8000), 8000, RATE).astype(np.float32)


class Suppressors:
    """One loaded suppressor per engine; ``clean`` runs a fresh stream over a clip, frame by frame,
    as a session would, and takes its latency back out so that the clip's times hold."""

    def __init__(self, bundle: Bundle, engines: list[str]) -> None:
        self.denoisers: dict[str, Any] = {}
        for engine in engines:
            denoiser = create_denoiser(bundle, DenoiseParams.model_validate({"engine": engine}))
            if denoiser is not None:
                denoiser.load()
            self.denoisers[engine] = denoiser
        self.seconds = {engine: 0.0 for engine in engines}
        self.audio_s = {engine: 0.0 for engine in engines}

    def clean(self, engine: str, audio: np.ndarray) -> np.ndarray:
        denoiser = self.denoisers[engine]
        if denoiser is None:
            return audio
        stream = denoiser.stream()
        lag = round(stream.latency_s * RATE)
        padded = np.concatenate([audio, np.zeros(lag + FRAME, np.float32)])
        started = time.perf_counter()
        out = np.concatenate(
            [stream.process(padded[i : i + FRAME]) for i in range(0, len(padded) // FRAME * FRAME, FRAME)]
        )
        self.seconds[engine] += time.perf_counter() - started
        self.audio_s[engine] += len(padded) / RATE
        return out[lag : lag + len(audio)]

    def cost(self) -> dict[str, float]:
        return {e: round(self.seconds[e] / self.audio_s[e] * 100, 2) for e in self.seconds if self.audio_s[e]}


class Turns:
    """The shipped endpointer over a clip with Silero and Smart Turn, frame by frame (no words)."""

    def __init__(self, bundle: Bundle) -> None:
        settings = load_settings(None)
        self.vad = vad_engine(settings, bundle)
        self.vad.load()
        self.turn = create_turn_detector(bundle, threads=1)
        self.turn.load()
        self.params = EndpointerParams()

    def run(self, audio: np.ndarray) -> list[EndpointEvent]:
        """The ENDPOINT of each turn the clip opens."""
        probabilities = frame_probabilities(self.vad.stream(), audio)
        endpointer = Endpointer(self.params)
        turns: list[EndpointEvent] = []

        def keep(events: list[EndpointEvent]) -> None:
            turns.extend(event for event in events if event.kind is EventKind.ENDPOINT)

        for probability in probabilities:
            for event in endpointer.feed(float(probability), FRAME / RATE):
                if event.kind is EventKind.TURN_CHECK:
                    heard = audio[int(event.utterance_start_s * RATE) : int(event.time_s * RATE)]
                    keep(endpointer.verdict(event.check_id, self.turn.complete_probability(heard)))
                keep([event])
        keep(endpointer.finish())
        return turns


def _wer(pairs: list[tuple[str, str]]) -> float:
    return round(
        word_error_rate([normalize_text(r) for r, _ in pairs], [normalize_text(h) for _, h in pairs]) * 100, 1
    )


def percentiles_ms(values: list[float]) -> dict[str, float]:
    """p50 / p95 in whole milliseconds of ``values`` in seconds."""
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "n": 0}
    array = np.asarray(values) * 1000
    return {
        "p50": round(float(np.percentile(array, 50))),
        "p95": round(float(np.percentile(array, 95))),
        "n": len(values),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings(None)
    bundle = open_bundle(settings)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    suppressors = Suppressors(bundle, engines)
    asr = asr_engine(override(settings, asr={"vocabulary": []}), bundle)
    asr.load()
    turns = Turns(bundle)
    speech = speech_set()
    noises = noise_set()
    snrs = [float(s) for s in args.snrs.split(",")]
    results: dict[str, Any] = {
        "wer": {},
        "end_of_turn": {},
        "false_turns_per_hour": {},
        "cost_pct_of_core": {},
    }
    for path in args.paths.split(","):
        conditions: list[tuple[str, str, float | None]] = [("clean", "clean", None)]
        conditions += [(f"{name} {snr:g} dB", name, snr) for snr in snrs for name in noises]
        for label, noise_name, snr in conditions:
            rng = np.random.default_rng(7)
            noise = None if snr is None else noises[noise_name]
            clips = [
                (mixed(audio, noise, snr if snr is not None else 0.0, rng), text, len(audio))
                for _, audio, text in speech
            ]
            if path == "8k":
                clips = [(call_path(a), t, n) for a, t, n in clips]
            row_wer: dict[str, float] = {}
            row_turn: dict[str, Any] = {}
            for engine in engines:
                pairs, waits, ended_long, ended_all = [], [], 0, 0
                for audio, text, samples in clips:
                    cleaned = suppressors.clean(engine, audio)
                    pairs.append((text, asr.transcribe(cleaned).text))
                    speech_end = BEFORE_S + samples / RATE
                    for endpoint in turns.run(cleaned):
                        ended_all += 1
                        ended_long += endpoint.by in (EndedBy.INCOMPLETE_SILENCE, EndedBy.MAX_LENGTH)
                        if endpoint.time_s >= speech_end - 0.2:
                            waits.append(endpoint.time_s - speech_end)
                row_wer[engine] = _wer(pairs)
                row_turn[engine] = {
                    "wait_ms": percentiles_ms(waits),
                    "ended_long_pct": round(ended_long / max(ended_all, 1) * 100, 1),
                    "turns_per_clip": round(ended_all / len(clips), 2),
                }
            results["wer"].setdefault(path, {})[label] = row_wer
            results["end_of_turn"].setdefault(path, {})[label] = row_turn
            print(
                f"{path} {label:28} WER "
                + "  ".join(f"{e} {w:5.1f}" for e, w in row_wer.items())
                + " | wait p50 "
                + "  ".join(f"{e} {t['wait_ms']['p50']}" for e, t in row_turn.items())
                + " | long "
                + "  ".join(f"{e} {t['ended_long_pct']}%" for e, t in row_turn.items()),
                flush=True,
            )
    no_speech = [
        (f"{sub}/{p.stem}", load_16k(p))
        for sub in ("noise", "music", "nonspeech")
        for p in sorted((DATA / "vad" / sub).glob("*.wav"))
    ]
    for engine in engines:
        counts = {"noise": [0, 0.0], "music": [0, 0.0], "nonspeech": [0, 0.0]}
        for name, audio in no_speech:
            opened = len(turns.run(suppressors.clean(engine, audio)))
            counts[name.split("/")[0]][0] += opened
            counts[name.split("/")[0]][1] += len(audio) / RATE
        results["false_turns_per_hour"][engine] = {
            kind: {"turns": n, "seconds": round(s, 1), "per_hour": round(n / s * 3600)}
            for kind, (n, s) in counts.items()
        }
        print(
            f"turns on audio without speech, {engine}: {results['false_turns_per_hour'][engine]}", flush=True
        )
    results["cost_pct_of_core"] = suppressors.cost()
    print(f"cost, % of one core per stream: {results['cost_pct_of_core']}")
    return results


def plot(results: dict[str, Any], out: Path) -> Path:
    """Word error rate against SNR, per suppressor: the mean over the noises, and babble alone."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    paths = list(results["wer"])
    fig, axes = plt.subplots(1, len(paths), figsize=(6 * len(paths), 4), squeeze=False)
    for ax, path in zip(axes[0], paths, strict=True):
        rows = results["wer"][path]
        snrs = sorted({float(label.split()[-2]) for label in rows if label != "clean"})
        engines = list(rows["clean"])
        for index, engine in enumerate(engines):
            color = f"C{index}"
            mean = [
                np.mean([v[engine] for k, v in rows.items() if k.endswith(f" {snr:g} dB")]) for snr in snrs
            ]
            ax.plot(snrs, mean, "o-", color=color, label=f"{engine}: mean of the noises")
            babble_wer = [rows.get(f"babble {snr:g} dB", {}).get(engine, np.nan) for snr in snrs]
            ax.plot(snrs, babble_wer, "s--", color=color, alpha=0.6, label=f"{engine}: babble")
            ax.axhline(rows["clean"][engine], color=color, linestyle=":", linewidth=1)
        ax.set_title(f"Whisper tiny.en on the suppressor's output, {path} (dotted: clean)", fontsize=9)
        ax.set_xlabel("SNR (dB)")
        ax.set_ylabel("word error rate (%)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot written to {out}")
    return out


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(prog="python -m bench noise", description=__doc__.split("\n\n")[0])
    parser.add_argument("--snrs", default="20,10,5,0")
    parser.add_argument("--paths", default="16k,8k", help="16k (microphone) and/or 8k (call path)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--plot", type=Path, help="also plot WER against SNR to this PNG")
    parser.add_argument("--plot-only", type=Path, help="plot an earlier result file instead of running")
    args = parser.parse_args()
    if args.plot_only is not None:
        plot(
            json.loads(args.plot_only.read_text())["results"], args.plot or args.plot_only.with_suffix(".png")
        )
        return
    results = run(args)
    asr_model = load_settings(None).asr.model  # APPLIANCE_ASR__MODEL=whisper-base: the other Whisper
    print(f"Whisper: {asr_model}")
    params = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()} | {
        "asr_model": asr_model
    }
    write_result("noise", params, results)
    if args.plot is not None:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
