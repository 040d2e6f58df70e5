"""The real PortAudio path on a machine without a sound card: ALSA PCMs written by the test that
capture from a raw file (ALSA's ``file`` plugin, ``infile``) and play into a raw file."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from appliance.audio.base import FRAME_SAMPLES, float32_to_int16
from appliance.audio.devices import MicrophoneSource, SpeakerSink, probe_device
from appliance.config import load_settings
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.trace import TIMESTAMPS
from engines.audio import load_audio_16k, resample
from tests.fixtures.pipeline import PacedSource, english_words, silence

sd = pytest.importorskip("sounddevice", reason="needs the sounddevice package and libportaudio2")

SYSTEM_ALSA_CONF = Path("/usr/share/alsa/alsa.conf")
CAPTURE = "appliance_test_in"
PLAYBACK = "appliance_test_out"


@dataclass
class AlsaFiles:
    capture_raw: Path  # s16le mono, read by the capture PCM
    playback_raw: Path  # s16le mono, written by the playback PCM

    def feed(self, audio: np.ndarray, *, rate_hz: int = 16000) -> None:
        del rate_hz  # the raw file has no header: the stream's rate says how to read it
        float32_to_int16(audio).astype("<i2").tofile(self.capture_raw)

    def played(self) -> np.ndarray:
        if not self.playback_raw.exists():
            return np.zeros(0, dtype=np.float32)
        return np.fromfile(self.playback_raw, dtype="<i2").astype(np.float32) / 32768.0


def _reinitialise_portaudio() -> None:
    # PortAudio lists devices when it starts; restart it so it reads the new ALSA configuration.
    sd._terminate()
    sd._initialize()


@pytest.fixture
def alsa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AlsaFiles]:
    if not SYSTEM_ALSA_CONF.is_file():
        pytest.fail(f"{SYSTEM_ALSA_CONF} missing: apt-get install libasound2 (scripts/setup does)")
    files = AlsaFiles(tmp_path / "capture.raw", tmp_path / "playback.raw")
    files.capture_raw.write_bytes(b"")
    conf = tmp_path / "asound.conf"
    conf.write_text(
        f"""
pcm.{CAPTURE} {{
    type file
    slave.pcm "null"
    file "/dev/null"
    infile "{files.capture_raw}"
    format "raw"
}}
pcm.{PLAYBACK} {{
    type file
    slave.pcm "null"
    file "{files.playback_raw}"
    format "raw"
}}
"""
    )
    monkeypatch.setenv("ALSA_CONFIG_PATH", f"{SYSTEM_ALSA_CONF}:{conf}")
    _reinitialise_portaudio()
    yield files
    monkeypatch.undo()
    _reinitialise_portaudio()


async def _take_frames(source: MicrophoneSource, count: int) -> np.ndarray:
    frames = []
    async for frame in source.frames():
        frames.append(frame)
        if len(frames) == count:
            break
    await source.close()
    return np.concatenate(frames)


def test_probe_finds_the_alsa_devices_and_names_a_missing_one(alsa: AlsaFiles) -> None:
    assert probe_device("input", CAPTURE).available
    assert probe_device("output", PLAYBACK).available
    missing = probe_device("input", "no-such-microphone")
    assert not missing.available and "no-such-microphone" in missing.reason


def test_microphone_frames_are_the_captured_samples(alsa: AlsaFiles) -> None:
    rng = np.random.default_rng(1)
    audio = (rng.uniform(-0.5, 0.5, FRAME_SAMPLES * 20)).astype(np.float32)
    alsa.feed(audio)
    got = asyncio.run(_take_frames(MicrophoneSource(CAPTURE), 20))
    expected = float32_to_int16(audio).astype(np.float32) / 32768.0
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_48k_microphone_is_resampled_to_16k_frames(alsa: AlsaFiles) -> None:
    t = np.arange(48000 * 2) / 48000
    alsa.feed((0.4 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32))
    got = asyncio.run(_take_frames(MicrophoneSource(CAPTURE, device_sample_rate_hz=48000), 40))
    assert len(got) == 40 * FRAME_SAMPLES  # 1.28 s at 16 kHz from 48 kHz input
    spectrum = np.abs(np.fft.rfft(got[4000:]))
    peak_hz = np.argmax(spectrum) * 16000 / len(got[4000:])
    assert peak_hz == pytest.approx(440.0, abs=5.0)
    assert np.sqrt(np.mean(got[4000:] ** 2)) == pytest.approx(0.4 / np.sqrt(2), rel=0.05)


def test_speaker_plays_what_is_written(alsa: AlsaFiles) -> None:
    t = np.arange(16000) / 16000
    audio = (0.3 * np.cos(2 * np.pi * 300.0 * t)).astype(np.float32)  # starts away from 0

    async def play() -> None:
        speaker = SpeakerSink(PLAYBACK, device_sample_rate_hz=16000)
        for offset in range(0, len(audio), 512):
            await speaker.write(audio[offset : offset + 512])
        await speaker.close()

    asyncio.run(play())
    played = alsa.played()
    expected = float32_to_int16(audio).astype(np.float32) / 32768.0
    start = int(np.argmax(np.abs(played) > 0))  # the device may prepend silence
    np.testing.assert_array_equal(played[start : start + len(expected)], expected)


def test_a_full_turn_through_portaudio_microphone_and_speaker(
    alsa: AlsaFiles, real_engines: SessionEngines, data_dir: Path
) -> None:
    question = load_audio_16k(data_dir / "speech/en/google_audio.wav")
    # Long trailing silence: at its end ALSA's file plugin would replay stale buffer contents.
    alsa.feed(np.concatenate([silence(0.5), question, silence(240.0)]))
    rate = 16000
    microphone = MicrophoneSource(CAPTURE, device_sample_rate_hz=rate)
    speaker = SpeakerSink(PLAYBACK, device_sample_rate_hz=rate)
    session = Session(
        engines=real_engines,
        source=PacedSource(microphone),
        sink=speaker,
        config=session_config(load_settings(None)),
    )

    async def run() -> None:
        try:
            await asyncio.wait_for(session.run(max_turns=1), 300)
        finally:
            await microphone.close()
            await speaker.close()

    asyncio.run(run())

    (trace,) = session.turns.traces
    assert trace.error is None and not trace.cancelled
    assert "brooklyn" in trace.transcript.lower()
    assert all(getattr(trace, name) is not None for name in TIMESTAMPS)
    played = alsa.played()
    voiced = played[np.abs(played) > 1e-3]
    assert len(voiced) / rate > 0.5, "the reply did not reach the playback device"
    heard = real_engines.asr.transcribe(resample(played, rate, 16000)).text
    assert len(english_words(heard)) >= 2, heard
