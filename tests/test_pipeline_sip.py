"""A phone call through the whole pipeline: SIPp on loopback plays a recorded question as RTP, each
call is a session on the shared real engines, the spoken answer comes back as RTP, and the
appliance hangs up after the turn."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np

from appliance.audio.call import call_session_kwargs
from appliance.config import load_settings
from appliance.engine_set import session_config
from appliance.pipeline import Session, SessionEngines
from appliance.sip import CallAudio
from appliance.trace import TIMESTAMPS
from engines.audio import load_audio, resample
from tests.fixtures.pipeline import english_words
from tests.test_sip_helpers import (
    SCENARIOS,
    free_udp_port,
    requires_sipp,
    rtp_capture,
    run_sipp,
    running_server,
    write_rtp_pcap,
)

pytestmark = requires_sipp

QUESTION_WAV = "speech/en/google_audio.wav"  # "how old is the Brooklyn Bridge"
# The caller keeps sending (silent) RTP after the question, as a phone without silence suppression
# does, long enough for a slow machine; the appliance ends the call after its answer.
TRAILING_SILENCE_S = 150.0


def test_a_call_gets_a_spoken_answer_and_the_appliance_hangs_up(
    tmp_path: Path, data_dir: Path, real_engines: SessionEngines
) -> None:
    audio, rate = load_audio(data_dir / QUESTION_WAV)
    question_8k = resample(audio, rate, 8000)
    question_8k = question_8k / float(np.abs(question_8k).max()) * 0.5
    pcap = write_rtp_pcap(
        tmp_path / "question.pcap",
        np.concatenate(
            [np.zeros(4000, np.float32), question_8k, np.zeros(int(TRAILING_SILENCE_S * 8000), np.float32)]
        ),
        codec="PCMU",
        payload_type=0,
    )
    # The SIP tests' scenario, waiting as long for the BYE as the caller keeps talking.
    long_wait = tmp_path / "call_until_bye_long.xml"
    original = (SCENARIOS / "call_until_bye.xml").read_text()
    assert '<recv request="BYE" timeout="30000"/>' in original
    long_wait.write_text(original.replace('timeout="30000"', f'timeout="{int(TRAILING_SILENCE_S * 1000)}"'))
    sessions: list[Session] = []

    async def answer(call: CallAudio) -> None:
        session = Session(
            engines=real_engines, config=session_config(load_settings(None)), **call_session_kwargs(call)
        )
        sessions.append(session)
        await session.run(max_turns=1)
        await call.drain()
        await call.hangup()

    async def scenario() -> tuple[int, str, np.ndarray]:
        port = free_udp_port()
        async with running_server(answer) as server, rtp_capture(port) as capture:
            result = await run_sipp(
                os.path.relpath(long_wait, SCENARIOS),  # run_sipp takes names relative to its folder
                server,
                keys={"rtp_port": str(port), "codecs": "0 101", "pcap": str(pcap)},
                timeout_s=TRAILING_SILENCE_S,
                workdir=tmp_path,
            )
            return result.returncode, result.output, capture.audio_8k("PCMU")

    returncode, output, reply_8k = asyncio.run(scenario())
    assert returncode == 0, output  # SIPp got the appliance's BYE after the answer
    (session,) = sessions
    (trace,) = session.traces
    assert session.session_id.startswith("call-")
    assert trace.error is None and not trace.cancelled
    assert "brooklyn" in trace.transcript.lower(), trace.transcript
    assert all(getattr(trace, name) is not None for name in TIMESTAMPS)
    heard = real_engines.asr.transcribe(resample(reply_8k, 8000, 16000)).text
    assert len(english_words(heard)) >= 2, heard
