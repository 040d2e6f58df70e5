"""Wake words: found when said, not heard when not said, and what they cost.

    .venv/bin/python -m bench wake [--models okay_nabu,hey_jarvis,hey_mycroft,alexa] [--snrs 20,10,5]

For each microWakeWord model of the bundle, side by side in one run:
- the phrase spoken by the Piper voice at three speeds (``tts.length_scale`` 0.8, 1.0, 1.25), followed
  by a question, alone and mixed with each noise of ``vad/noise`` and a babble of three other speakers
  at each SNR (bench/noise.py's mixing): the share found, and the time from the phrase's end to the wake
  event (p50/p95);
- false wakes per hour on every recording of ``../shared/data`` (speech, telephone speech, noise, music,
  silence), the same speech mixed with every noise at 10 dB, and questions spoken by the Piper voice
  without the phrase (bench/answers.py's forty);
- the cost per second of audio per stream (one thread).

Results: ~/.cache/appliance/bench-results/wake-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import numpy as np

from appliance.config import load_settings, override
from appliance.engine_set import open_bundle, tts_engine
from bench.answers import QUESTIONS
from bench.machine import write_result
from bench.noise import DATA, RATE, load_16k, mixed, noise_set, percentiles_ms, speech_set
from engines.audio import resample
from engines.wake import WAKE_MODELS, WakeParams, create_wake_word

log = logging.getLogger("bench.wake")

PHRASES = {
    "okay_nabu": "Okay Nabu",
    "hey_jarvis": "Hey Jarvis",
    "hey_mycroft": "Hey Mycroft",
    "alexa": "Alexa",
}
SPEEDS = (0.8, 1.0, 1.25)
FOLLOWED_BY = "what time does the canteen open?"
FRAME = 512


def _voice(length_scale: float) -> Any:
    settings = override(load_settings(None), tts={"length_scale": length_scale})
    voice = tts_engine(settings, open_bundle(settings))
    voice.load()
    return voice


def _say(voice: Any, text: str) -> np.ndarray:
    audio = np.concatenate(list(voice.synthesize(text, sample_rate_hz=22050)))
    audio = resample(audio, 22050, RATE)
    return (audio / max(float(np.abs(audio).max()), 1e-6) * 0.5).astype(np.float32)


def _events(engine: Any, audio: np.ndarray) -> tuple[list[float], float]:
    """Seconds into ``audio`` at which the wake word was heard (the end of the frame), and the time taken."""
    stream = engine.stream()
    heard = []
    started = time.perf_counter()
    for i in range(0, len(audio) // FRAME * FRAME, FRAME):
        if stream.process(audio[i : i + FRAME]):
            heard.append((i + FRAME) / RATE)
    return heard, time.perf_counter() - started


def without_phrase(voice: Any) -> list[np.ndarray]:
    clips = [audio for _, audio, _ in speech_set()]
    clips += [load_16k(p) for p in sorted(DATA.rglob("*.wav")) if "speech/en/" not in str(p)]
    rng = np.random.default_rng(5)
    noises = noise_set()
    clips += [mixed(audio, noise, 10.0, rng) for _, audio, _ in speech_set() for noise in noises.values()]
    clips += [_say(voice, q.text) for q in QUESTIONS]
    return clips


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings(None)
    bundle = open_bundle(settings)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    snrs = [float(s) for s in args.snrs.split(",")]
    voices = {speed: _voice(speed) for speed in SPEEDS}
    noises = noise_set()
    negatives = without_phrase(voices[1.0])
    negative_hours = sum(len(c) for c in negatives) / RATE / 3600
    results: dict[str, Any] = {"negative_audio_hours": round(negative_hours, 3)}
    for model in models:
        engine = create_wake_word(bundle, WakeParams.model_validate({"model": model}))
        engine.load()
        spent, heard_s = 0.0, 0.0
        row: dict[str, Any] = {"phrase": PHRASES[model], "found": {}, "delay_ms": {}}
        said = {}
        for speed, voice in voices.items():
            phrase = _say(voice, PHRASES[model])
            gap = np.zeros(int(0.15 * RATE), np.float32)
            said[speed] = (len(phrase) / RATE, np.concatenate([phrase, gap, _say(voice, FOLLOWED_BY)]))
        for label, noise, snr in [("clean", None, None)] + [
            (f"{name} {snr:g} dB", audio, snr) for snr in snrs for name, audio in noises.items()
        ]:
            found, delays, total = 0, [], 0
            rng = np.random.default_rng(11)
            for phrase_s, spoken in said.values():
                clip = mixed(spoken, noise, snr if snr is not None else 0.0, rng)
                phrase_end = 0.3 + phrase_s  # bench.noise puts 0.3 s before the speech
                events, seconds = _events(engine, clip)
                spent, heard_s = spent + seconds, heard_s + len(clip) / RATE
                hits = [t for t in events if phrase_end - 0.5 <= t <= phrase_end + 2.0]
                total += 1
                if hits:
                    found += 1
                    delays.append(hits[0] - phrase_end)
                log.debug("%s %s: %s", model, label, events)
            row["found"][label] = f"{found}/{total}"
            row["delay_ms"][label] = percentiles_ms(delays)
        false = 0
        for clip in negatives:
            events, seconds = _events(engine, clip)
            false += len(events)
            spent, heard_s = spent + seconds, heard_s + len(clip) / RATE
        found_all = [int(v.split("/")[0]) for v in row["found"].values()]
        totals = [int(v.split("/")[1]) for v in row["found"].values()]
        at_10 = [v for k, v in row["found"].items() if k.endswith(" 10 dB")]
        row["found_share"] = round(sum(found_all) / sum(totals) * 100, 1)
        row["found_share_10db"] = round(
            sum(int(v.split("/")[0]) for v in at_10) / max(sum(int(v.split("/")[1]) for v in at_10), 1) * 100,
            1,
        )
        row["false_wakes"] = false
        row["false_wakes_per_hour"] = round(false / negative_hours, 2)
        row["cost_pct_of_core"] = round(spent / heard_s * 100, 2)
        results[model] = row
        print(
            f"{model}: found {row['found_share']}% (10 dB: {row['found_share_10db']}%), clean {row['found']['clean']}, "
            f"delay p50 {row['delay_ms']['clean']['p50']} ms; false wakes {false} in {negative_hours:.2f} h; "
            f"cost {row['cost_pct_of_core']}% of a core",
            flush=True,
        )
        engine.close()
    return results


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(prog="python -m bench wake", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(WAKE_MODELS))
    parser.add_argument("--snrs", default="20,10,5")
    args = parser.parse_args()
    write_result("wake", vars(args), run(args))


if __name__ == "__main__":
    main()
