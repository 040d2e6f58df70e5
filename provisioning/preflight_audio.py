"""Preflight audio check: list the sound cards, record 3 seconds and play them back (ALSA tools)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from provisioning.checks import FAIL, PASS, SKIP, Check
from provisioning.context import ProvisioningContext

RECORD_S = 3
RECORD_RATE_HZ = 16000
# Below this RMS (full scale 1.0) a recording is digital silence: a muted or dead capture device.
SILENCE_RMS = 1e-5
_ALSA_NAME = re.compile(r"^(hw|plughw|default|sysdefault|dsnoop|dmix|pulse)(:|$)")

FIX_NO_CARD = (
    "plug in the microphone and speaker (USB or the carrier board's audio), check that `arecord -l` and "
    "`aplay -l` list them; for a phone-only device pass --no-audio"
)


def list_cards(tool: str) -> tuple[list[str], str]:
    """The card lines of ``arecord -l`` / ``aplay -l`` and the tool's own message."""
    proc = subprocess.run([tool, "-l"], capture_output=True, text=True, check=False, timeout=10)
    cards = [line.strip() for line in proc.stdout.splitlines() if line.startswith("card ")]
    message = (proc.stderr.strip().splitlines() or [""])[-1]
    return cards, message


def _device_args(name: str | None) -> list[str]:
    return ["-D", name] if name and _ALSA_NAME.match(name) else []


def record_and_play(input_device: str | None, output_device: str | None) -> tuple[float, float]:
    """Record RECORD_S seconds, play them back; returns (seconds recorded, RMS)."""
    with tempfile.TemporaryDirectory(prefix="appliance-audio-") as tmp:
        wav = Path(tmp) / "check.wav"
        record = [
            "arecord", "-q", *_device_args(input_device), "-d", str(RECORD_S),
            "-f", "S16_LE", "-r", str(RECORD_RATE_HZ), "-c", "1", str(wav),
        ]  # fmt: skip
        proc = subprocess.run(record, capture_output=True, text=True, check=False, timeout=RECORD_S + 10)
        if proc.returncode != 0:
            raise RuntimeError(f"recording failed: {proc.stderr.strip() or proc.returncode}")
        audio, rate_hz = sf.read(wav, dtype="float32")
        seconds = len(audio) / rate_hz
        rms = float(np.sqrt(np.mean(np.square(audio)))) if len(audio) else 0.0
        play = ["aplay", "-q", *_device_args(output_device), str(wav)]
        proc = subprocess.run(play, capture_output=True, text=True, check=False, timeout=RECORD_S + 10)
        if proc.returncode != 0:
            raise RuntimeError(f"playback failed: {proc.stderr.strip() or proc.returncode}")
    return seconds, rms


def check_audio(ctx: ProvisioningContext) -> Check:
    if ctx.site.no_audio:
        return Check("audio", SKIP, "no local microphone or speaker (--no-audio): phone calls only")
    if not (shutil.which("arecord") and shutil.which("aplay")):
        return Check("audio", FAIL, "arecord/aplay not found", fix="sudo apt install alsa-utils")
    capture, capture_msg = list_cards("arecord")
    playback, playback_msg = list_cards("aplay")
    found = f"capture: {len(capture)} card(s), playback: {len(playback)} card(s)"
    if not capture or not playback:
        detail = f"no sound card ({capture_msg or playback_msg or found})"
        if ctx.target == "cpu":
            return Check("audio", SKIP, f"not applicable on --target cpu: {detail}")
        return Check("audio", FAIL, detail, fix=FIX_NO_CARD)
    try:
        seconds, rms = record_and_play(ctx.site.input_device, ctx.site.output_device)
    except (RuntimeError, OSError, subprocess.TimeoutExpired, sf.LibsndfileError) as err:
        return Check("audio", FAIL, f"{found}; {err}", fix=FIX_NO_CARD)
    detail = f"{found}; recorded {seconds:.1f} s (RMS {rms:.5f}) and played it back: {capture[0]}"
    if seconds < RECORD_S - 0.5:
        return Check(
            "audio", FAIL, detail, fix="the capture device delivered too little audio; check `arecord -l`"
        )
    if rms < SILENCE_RMS:
        return Check(
            "audio",
            FAIL,
            detail,
            fix="the microphone records silence: unmute it in `alsamixer` (F4: capture)",
        )
    return Check("audio", PASS, detail)
