"""The echo canceller's parts: the playback timeline, the capture clock, the 10 ms block framing,
the settings that decide which sessions cancel their echo, and the real WebRTC canceller in rooms."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from appliance.audio import echo as echo_module
from appliance.audio.base import SourceBase, split_frame
from appliance.audio.echo import LEAD_S, STEADY_S, CaptureClock, EchoCancelledSource, PlaybackTimeline
from appliance.config import load_settings, override
from appliance.engine_set import cancels_echo, echo_canceller, echo_gate
from appliance.pipeline.workers import EngineWorker
from appliance.trace.labels import SessionKind
from bench import rooms
from engines.aec import BLOCK_SAMPLES, BlockCanceller, EchoCanceller, create_canceller
from engines.audio import load_audio_16k
from engines.errors import BackendUnavailable, InputError
from engines.tts import TtsEngine

RATE = 16000


def test_timeline_places_contiguous_writes_back_to_back_and_a_late_write_after_a_gap() -> None:
    timeline = PlaybackTimeline()
    ones, twos = np.ones(1600, np.float32), np.full(1600, 2.0, np.float32)
    timeline.write(ones, RATE, now=100.0)  # plays 100.0-100.1
    timeline.write(twos, RATE, now=100.05)  # written ahead: queued behind, 100.1-100.2
    assert timeline.end == pytest.approx(100.2)
    timeline.write(ones * 3, RATE, now=100.5)  # the speaker ran dry at 100.2: silence, then this
    got = timeline.take(100.0, 8000)
    np.testing.assert_array_equal(got[:1600], 1.0)
    np.testing.assert_array_equal(got[1600:3200], 2.0)
    np.testing.assert_array_equal(got[3200:8000], 0.0)
    np.testing.assert_array_equal(timeline.take(100.5, 1600), 3.0)
    np.testing.assert_array_equal(timeline.take(99.0, 800), 0.0)  # before anything played


def test_timeline_flush_drops_what_was_not_played_and_resamples_other_rates() -> None:
    timeline = PlaybackTimeline()
    timeline.write(np.ones(RATE, np.float32), RATE, now=10.0)
    timeline.flush(now=10.25)
    assert timeline.end == pytest.approx(10.25)
    np.testing.assert_array_equal(timeline.take(10.25, 1600), 0.0)
    t = np.arange(48000) / 48000
    timeline.write(np.sin(2 * np.pi * 440 * t).astype(np.float32), 48000, now=20.0)
    got = timeline.take(20.1, 8000)
    peak_hz = np.argmax(np.abs(np.fft.rfft(got))) * RATE / len(got)
    assert peak_hz == pytest.approx(440, abs=3)


def test_capture_clock_recovers_when_samples_were_heard_from_late_bursty_arrivals() -> None:
    rng = np.random.default_rng(3)
    clock = CaptureClock()
    true_start = 50.0
    errors = []
    for index in range(400):
        heard_end = true_start + (index + 1) * 512 / RATE
        arrival = heard_end + 0.004 + rng.exponential(0.01)  # late by a varying amount, never early
        estimate = clock.frame_end(arrival, 512)
        errors.append(estimate - heard_end)
    assert all(e >= 0 for e in errors)
    assert max(errors[100:]) < 0.006  # after 3 s: within the fixed part of the lateness + 2 ms
    assert clock.time_of(0) == pytest.approx(true_start, abs=0.006)


def test_capture_clock_holds_still_while_arrivals_only_jitter_and_follows_a_real_shift() -> None:
    """The reference is cut by it: a clock that slides by a sample with each earlier arrival puts the
    linear canceller out of step with the room above 2 kHz (a busy machine's session test)."""
    rng = np.random.default_rng(5)
    clock = CaptureClock()
    true_start = 50.0
    held = []
    for index in range(1300):  # 42 s: early arrivals come, and leave the 10 s window
        heard_end = true_start + (index + 1) * 512 / RATE
        shift = 0.030 if index >= 900 else 0.0  # the device lost 30 ms of audio
        arrival = heard_end + shift + 0.0005 + rng.exponential(0.002)
        clock.frame_end(arrival, 512)
        if index == 30:  # a reply begins to play: the canceller learns the room from here on
            clock.hold()
        held.append(clock.time_of(0))
    steady = held[30:900]
    assert len(set(steady)) == 1  # the arrivals alone never move it (by a sample or less, each time)
    assert max(steady) - true_start <= 0.0005 + STEADY_S  # late by the arrivals' fixed part, or a little more
    assert held[-1] == pytest.approx(true_start + 0.030, abs=0.002)  # once the window has passed it


def test_blocks_keep_the_length_and_delay_the_output_by_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    # The adaptive filter's own rule, alone: a microphone that is the reference itself would be
    # solved for at once (engines.aec.room.solve_room, tested in test_echo_room.py).
    monkeypatch.setattr("engines.aec.blocks.SOLVE_AT_S", ())
    seen: list[int] = []

    def identity(capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
        assert capture.dtype == np.int16 and capture.shape == reference.shape == (BLOCK_SAMPLES,)
        seen.append(len(capture))
        return capture

    blocks = BlockCanceller(identity)
    signal = np.random.default_rng(0).uniform(-0.5, 0.5, 512 * 23).astype(np.float32)
    outs = [blocks.process(signal[i : i + 512], signal[i : i + 512]) for i in range(0, len(signal), 512)]
    out = np.concatenate([o.suppressed for o in outs])
    assert len(out) == len(signal)
    expected = np.round(signal * 32767) / 32768
    np.testing.assert_allclose(out[BLOCK_SAMPLES:], expected[:-BLOCK_SAMPLES], atol=2 / 32768)
    np.testing.assert_array_equal(out[:BLOCK_SAMPLES], 0.0)
    # Nothing suppressed means a person speaks: the linear filter does not learn and passes it on.
    linear = np.concatenate([o.linear for o in outs])
    np.testing.assert_allclose(linear[BLOCK_SAMPLES:], signal[:-BLOCK_SAMPLES], atol=1e-6)
    # What it took out (for the linear ear) and what it left add up to the microphone.
    echo = np.concatenate([o.echo for o in outs])
    np.testing.assert_allclose(
        echo[BLOCK_SAMPLES:] + linear[BLOCK_SAMPLES:], signal[:-BLOCK_SAMPLES], atol=1e-6
    )
    with pytest.raises(InputError, match="differ in length"):
        blocks.process(signal[:512], signal[:500])


def test_which_sessions_cancel_their_echo_and_at_what_threshold() -> None:
    auto = load_settings(None)
    assert auto.audio.echo_cancellation == "auto"
    assert cancels_echo(auto, kind=SessionKind.MICROPHONE, speaker=True)
    assert not cancels_echo(auto, kind=SessionKind.MICROPHONE, speaker=False)  # nothing plays into the room
    assert not cancels_echo(auto, kind=SessionKind.SIP, speaker=True)  # a phone cancels its own echo
    on = override(auto, audio={"echo_cancellation": "on"})
    assert cancels_echo(on, kind=SessionKind.SIP, speaker=True)
    off = override(auto, audio={"echo_cancellation": "off"})
    assert not cancels_echo(off, kind=SessionKind.MICROPHONE, speaker=True)
    assert echo_canceller(off, microphone=True) is None
    assert echo_canceller(auto, microphone=False) is None  # no local microphone: nobody needs it
    assert echo_canceller(on, microphone=False) is not None  # calls do
    assert echo_gate(auto, echo_cancelled=True).threshold_while_playing == auto.vad.threshold
    assert echo_gate(auto, echo_cancelled=False).threshold_while_playing == 0.85
    chosen = override(auto, echo_gate={"threshold_while_playing": 0.7})
    assert echo_gate(chosen, echo_cancelled=True).threshold_while_playing == 0.7


def test_an_unknown_backend_names_the_fix() -> None:
    with pytest.raises(BackendUnavailable, match="allowed: webrtc"):
        create_canceller(backend="speex")


def _cancel(
    engine: EchoCanceller, mic: np.ndarray, reference: np.ndarray, *, linear: bool = False
) -> np.ndarray:
    stream = engine.stream()
    outs = [stream.process(mic[i : i + 512], reference[i : i + 512]) for i in range(0, len(mic), 512)]
    return np.concatenate([o.linear if linear else o.suppressed for o in outs])


@pytest.mark.parametrize("room", rooms.ROOMS, ids=lambda r: r.name.split(",")[0].replace(" ", "-"))
def test_the_real_canceller_takes_a_reply_out_of_the_microphone(
    aec_engine: EchoCanceller, room: rooms.Room, piper_tts: TtsEngine, data_dir: object
) -> None:
    """A Piper reply through a simulated room, 80 ms late: with the reference aligned as the session
    aligns it (the calibrated delay less LEAD_S), the echo is 18 dB down after 2 s with the speaker
    near the microphone; 6 dB with a speaker 1.7 m away in a hall (the filter is shorter than that
    hall's reverberation: docs/echo-cancellation.md)."""
    text = "The canteen is open from half past eleven to two, and the menu is on the board by the entrance."
    reply = np.concatenate(list(piper_tts.synthesize(text, sample_rate_hz=RATE)))
    reply = reply[: len(reply) // 512 * 512]
    delay_s = 0.08
    mic = rooms.echo(reply, room, delay_s=delay_s, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    shift = round((delay_s - LEAD_S) * RATE)
    reference = np.concatenate([np.zeros(shift, np.float32), reply])[: len(reply)]
    out = _cancel(aec_engine, mic, reference)[BLOCK_SAMPLES:]
    settled = slice(2 * RATE, len(out))
    erle = 10 * np.log10(np.sum(mic[settled] ** 2) / np.sum(out[settled] ** 2))
    assert erle > (18.0 if room in rooms.NEAR_ROOMS else 6.0), f"{room.name}: ERLE {erle:.1f} dB"


class _ArrivingLate(SourceBase):
    """A microphone whose frames reach the canceller late by a varying amount (a busy machine), on
    a made-up clock that the canceller's module reads as ``time.monotonic``."""

    name = "late-microphone"

    def __init__(self, mic: np.ndarray, lateness_s: np.ndarray) -> None:
        self.mic, self.lateness_s, self.now = mic, lateness_s, 0.0

    def monotonic(self) -> float:
        return self.now

    async def frames(self) -> AsyncIterator[np.ndarray]:
        for index in range(len(self.mic) // 512):
            self.now = (index + 1) * 512 / RATE + self.lateness_s[index]
            yield self.mic[index * 512 : (index + 1) * 512]

    async def close(self) -> None:
        return None


def test_frames_that_arrive_late_by_varying_amounts_leave_the_echo_cancelled_above_2_khz(
    aec_engine: EchoCanceller, piper_tts: TtsEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference is cut from the playback timeline by the capture clock. Following each earlier
    arrival slid it by a sample at a time, and the linear canceller, a sample out of step with the
    room, removed 1-7 dB of the echo between 2 and 4 kHz in a busy machine's session test (16 dB
    with the clock held still)."""
    text = "The bridge opened in eighteen eighty three, so it is well over a hundred years old."
    reply = np.concatenate(list(piper_tts.synthesize(text, sample_rate_hz=RATE)))
    start_s, delay_s = 0.5, 0.07
    played = np.concatenate([np.zeros(round(start_s * RATE), np.float32), reply, np.zeros(RATE, np.float32)])
    mic = rooms.echo(played, rooms.ROOMS[1], delay_s=delay_s, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    lateness_s = 0.002 + np.random.default_rng(7).exponential(0.005, len(mic) // 512)
    late = _ArrivingLate(mic, lateness_s)
    monkeypatch.setattr(echo_module, "time", late)
    timeline = PlaybackTimeline()
    timeline.write(reply, RATE, now=start_s)
    worker = EngineWorker("aec")
    source = EchoCancelledSource(
        late, stream=aec_engine.stream(), timeline=timeline, worker=worker, echo_delay_s=delay_s
    )

    async def linear() -> np.ndarray:
        return np.concatenate([split_frame(frame)[1] async for frame in source.frames()])

    try:
        out = asyncio.run(linear())[BLOCK_SAMPLES:]
    finally:
        worker.shutdown()
    heard = mic[: len(out)]
    band = slice(2000 * 512 // RATE, 4000 * 512 // RATE)  # 2-4 kHz, in bins of a 512-sample frame
    settled = range(round((start_s + 2.0) * RATE / 512), (round(start_s * RATE) + len(reply)) // 512)

    def band_energy(audio: np.ndarray) -> np.ndarray:
        return np.array(
            [np.sum(np.abs(np.fft.rfft(audio[i * 512 : (i + 1) * 512])[band]) ** 2) for i in settled]
        )

    before, after = band_energy(heard), band_energy(out)
    loud = before >= before.max() / 10
    removed_db = 10 * np.log10(before[loud].sum() / after[loud].sum())
    assert removed_db > 10.0, f"{removed_db:.1f} dB removed between 2 and 4 kHz"


def test_a_reference_that_comes_after_its_echo_cannot_be_cancelled(
    aec_engine: EchoCanceller, piper_tts: TtsEngine
) -> None:
    """Why the delay is calibrated and the reference taken LEAD_S early: 150 ms late, it is useless."""
    text = "Visitors park in the north car park. Please sign in at the front desk and wear your badge."
    reply = np.concatenate(list(piper_tts.synthesize(text, sample_rate_hz=RATE)))
    reply = reply[: len(reply) // 512 * 512]
    room = rooms.ROOMS[1]
    mic = rooms.echo(reply, room, delay_s=0.02, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    late = np.concatenate([np.zeros(round(0.17 * RATE), np.float32), reply])[: len(reply)]
    on_time = np.concatenate([np.zeros(round(0.0 * RATE), np.float32), reply])[: len(reply)]
    settled = slice(2 * RATE, len(reply) - BLOCK_SAMPLES)

    def erle(reference: np.ndarray) -> float:
        out = _cancel(aec_engine, mic, reference)[BLOCK_SAMPLES:]
        return float(10 * np.log10(np.sum(mic[settled] ** 2) / np.sum(out[settled] ** 2)))

    assert erle(on_time) > 20.0
    assert erle(late) < 10.0


def test_the_linear_output_keeps_a_person_who_speaks_over_the_reply(
    aec_engine: EchoCanceller, piper_tts: TtsEngine, data_dir: Path
) -> None:
    """AEC3's suppressor turns a person down while the reply still plays (what the VAD gets); the
    linear canceller's output (what Whisper gets) keeps them, with the echo still 10 dB down."""
    texts = [
        "The canteen is open from half past eleven to two, and the menu is on the board.",
        "Line three stopped at ten past nine for a tool change.",
    ]
    reply = np.concatenate(
        [np.concatenate(list(piper_tts.synthesize(t, sample_rate_hz=RATE))) for t in texts]
    )
    reply = rooms.at_level(reply[: len(reply) // 512 * 512], -20.0)
    person = rooms.at_level(load_audio_16k(data_dir / "speech/en/google_audio.wav"), rooms.SPEECH_DBFS)
    at = len(reply) - 2 * RATE  # the person starts 2 s before the reply ends
    near = np.zeros(len(reply), np.float32)
    near[at : at + len(person)] = person[: len(reply) - at]
    room = rooms.ROOMS[1]
    echo = rooms.echo(reply, room, delay_s=0.05, level_dbfs=rooms.NORMAL_ECHO_DBFS)
    reference = np.concatenate([np.zeros(round((0.05 - LEAD_S) * RATE), np.float32), reply])[: len(reply)]
    suppressed = _cancel(aec_engine, echo + near, reference)[BLOCK_SAMPLES:]
    linear = _cancel(aec_engine, echo + near, reference, linear=True)[BLOCK_SAMPLES:]
    overlap = slice(at, at + RATE)  # the person's first second, the reply still playing

    def turned_down(out: np.ndarray) -> float:
        """The share of the person's strongest time-frequency cells (300 Hz-4 kHz) that come out more
        than 6 dB quieter than the person alone."""
        from scipy.signal import stft

        _, _, voice = stft(near[overlap], fs=RATE, nperseg=512)
        _, _, heard = stft(out[overlap], fs=RATE, nperseg=512)
        voice_power, heard_power = np.abs(voice[10:129]) ** 2, np.abs(heard[10:129]) ** 2
        strong = voice_power > voice_power.max() * 1e-2
        return float(np.mean(heard_power[strong] < voice_power[strong] / 4))

    assert turned_down(linear) < 0.05 and turned_down(suppressed) > 0.2, (
        turned_down(linear),
        turned_down(suppressed),
    )
    before = slice(3 * RATE, at)  # echo alone, converged
    linear_erle = 10 * np.log10(np.sum(echo[before] ** 2) / np.sum(linear[before] ** 2))
    assert linear_erle > 10.0


def test_auto_without_the_runtime_runs_on_with_a_warning_and_on_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import engines.aec.webrtc as webrtc

    def missing() -> None:
        raise ImportError("No module named 'livekit'")

    monkeypatch.setattr(webrtc, "_import_rtc", missing)
    settings = load_settings(None)
    assert echo_canceller(settings, microphone=True) is None
    assert "echo cancellation is off" in caplog.text and "pip install livekit" in caplog.text
    on = echo_canceller(override(settings, audio={"echo_cancellation": "on"}), microphone=True)
    assert on is not None
    with pytest.raises(BackendUnavailable, match="pip install livekit"):
        on.load()
