"""A phone call through the whole pipeline: SIPp on loopback plays a recorded question as RTP, each
call is a session on the shared real engines, the spoken answer comes back as RTP, and the
appliance hangs up after the turn."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import numpy as np

from appliance.audio.call import call_session_kwargs
from appliance.config import load_settings
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.sip.call import CallAudio, CallHandler
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


SECOND_QUESTION_WAV = "speech/en/cheetah_test_en.wav"  # "Today only platforms one and three are used."


def _question_pcap(path: Path, audio_16k: np.ndarray, rate: int, *, lead_s: float) -> Path:
    question_8k = resample(audio_16k, rate, 8000)
    question_8k = question_8k / float(np.abs(question_8k).max()) * 0.5
    return write_rtp_pcap(
        path,
        np.concatenate(
            [
                np.zeros(int(lead_s * 8000), np.float32),
                question_8k,
                np.zeros(int(TRAILING_SILENCE_S * 8000), np.float32),
            ]
        ),
        codec="PCMU",
        payload_type=0,
    )


def _long_wait_scenario(tmp_path: Path) -> Path:
    """The SIP tests' scenario, waiting as long for the BYE as the caller keeps talking."""
    long_wait = tmp_path / "call_until_bye_long.xml"
    original = (SCENARIOS / "call_until_bye.xml").read_text()
    assert '<recv request="BYE" timeout="30000"/>' in original
    long_wait.write_text(original.replace('timeout="30000"', f'timeout="{int(TRAILING_SILENCE_S * 1000)}"'))
    return long_wait


def _answer_calls(real_engines: SessionEngines, sessions: list[Session]) -> CallHandler:
    async def answer(call: CallAudio) -> None:
        session = Session(
            engines=real_engines, config=session_config(load_settings(None)), **call_session_kwargs(call)
        )
        sessions.append(session)
        await session.run(max_turns=1)
        await call.drain()
        await call.hangup()

    return answer


async def _calls(tmp_path: Path, pcaps: list[Path], answer: CallHandler) -> list[tuple[int, str, np.ndarray]]:
    """SIPp places one call per pcap, all at once; each call's exit status, output and the reply heard."""
    scenario = os.path.relpath(_long_wait_scenario(tmp_path), SCENARIOS)  # run_sipp takes relative names
    ports = [free_udp_port() for _ in pcaps]
    async with running_server(answer, max_calls=len(pcaps)) as server, contextlib.AsyncExitStack() as stack:
        captures = [await stack.enter_async_context(rtp_capture(port)) for port in ports]
        results = await asyncio.gather(
            *(
                run_sipp(
                    scenario,
                    server,
                    keys={"rtp_port": str(port), "codecs": "0 101", "pcap": str(pcap)},
                    timeout_s=TRAILING_SILENCE_S,
                    workdir=tmp_path,
                )
                for port, pcap in zip(ports, pcaps, strict=True)
            )
        )
        return [
            (result.returncode, result.output, capture.audio_8k("PCMU"))
            for result, capture in zip(results, captures, strict=True)
        ]


def test_a_call_gets_a_spoken_answer_and_the_appliance_hangs_up(
    tmp_path: Path, data_dir: Path, real_engines: SessionEngines
) -> None:
    audio, rate = load_audio(data_dir / QUESTION_WAV)
    pcap = _question_pcap(tmp_path / "question.pcap", audio, rate, lead_s=0.5)
    sessions: list[Session] = []
    ((returncode, output, reply_8k),) = asyncio.run(
        _calls(tmp_path, [pcap], _answer_calls(real_engines, sessions))
    )
    assert returncode == 0, output  # SIPp got the appliance's BYE after the answer
    (session,) = sessions
    (trace,) = session.turns.traces
    assert session.session_id.startswith("call-")
    assert trace.error is None and not trace.cancelled
    assert "brooklyn" in trace.transcript.lower(), trace.transcript
    assert all(getattr(trace, name) is not None for name in TIMESTAMPS)
    # The end of the caller's turn was judged from the words too, on the 8 kHz path as at 16 kHz.
    assert trace.words_complete_p is not None and trace.turn_complete_p is not None, trace
    heard = real_engines.asr.transcribe(resample(reply_8k, 8000, 16000)).text
    assert len(english_words(heard)) >= 2, heard


def test_two_simultaneous_calls_are_both_answered_by_the_one_llm(
    tmp_path: Path, data_dir: Path, real_engines: SessionEngines
) -> None:
    first, first_rate = load_audio(data_dir / QUESTION_WAV)
    second, second_rate = load_audio(data_dir / SECOND_QUESTION_WAV)
    # Both questions end at the same moment, so both turns reach the LLM together.
    longest = max(len(first) / first_rate, len(second) / second_rate)
    pcaps = [
        _question_pcap(
            tmp_path / "first.pcap", first, first_rate, lead_s=0.5 + longest - len(first) / first_rate
        ),
        _question_pcap(
            tmp_path / "second.pcap", second, second_rate, lead_s=0.5 + longest - len(second) / second_rate
        ),
    ]
    sessions: list[Session] = []
    outcomes = asyncio.run(_calls(tmp_path, pcaps, _answer_calls(real_engines, sessions)))
    assert [code for code, _, _ in outcomes] == [0, 0], [output for _, output, _ in outcomes]
    traces = {session.session_id: session.turns.traces[0] for session in sessions}
    assert len(traces) == 2
    transcripts = sorted(trace.transcript.lower() for trace in traces.values())
    assert "platform" in transcripts[1] and "brooklyn" in transcripts[0], transcripts
    for trace in traces.values():
        assert trace.error is None and not trace.cancelled and trace.reply
        assert not trace.busy_reply and trace.llm_queued_ms == 0  # each had a slot of its own
    for _, _, reply_8k in outcomes:
        heard = real_engines.asr.transcribe(resample(reply_8k, 8000, 16000)).text
        assert len(english_words(heard)) >= 2, heard


def test_a_number_typed_on_the_keypad_is_answered_as_a_turn(
    tmp_path: Path, data_dir: Path, real_engines: SessionEngines
) -> None:
    """SIPp asks the question, then types 4719# as RFC 4733 telephone-events: the keys are a turn of
    their own, answered with speech (and a reply still playing is cut by the first key)."""
    audio, rate = load_audio(data_dir / QUESTION_WAV)
    question_8k = resample(audio, rate, 8000)
    question_8k = question_8k / float(np.abs(question_8k).max()) * 0.5
    typed_at = 0.5 + len(question_8k) / 8000 + 4.0
    pcap = write_rtp_pcap(
        tmp_path / "keys.pcap",
        np.concatenate(
            [np.zeros(4000, np.float32), question_8k, np.zeros(int(TRAILING_SILENCE_S * 8000), np.float32)]
        ),
        keys=tuple((typed_at + 0.25 * i, key) for i, key in enumerate("4719#")),
    )
    sessions: list[Session] = []

    async def answer(call: CallAudio) -> None:
        session = Session(
            engines=real_engines, config=session_config(load_settings(None)), **call_session_kwargs(call)
        )
        sessions.append(session)
        await session.run(max_turns=2)
        await call.drain()
        await call.hangup()

    ((returncode, output, _reply_8k),) = asyncio.run(_calls(tmp_path, [pcap], answer))
    assert returncode == 0, output
    (session,) = sessions
    spoken, typed = session.turns.traces
    assert "brooklyn" in spoken.transcript.lower(), spoken.transcript
    assert typed.transcript == "Typed on the phone's keypad: 4719" and typed.endpoint_by == "keypad"
    assert english_words(typed.reply) and typed.played_reply, typed.reply
    latency = typed.stage_s("turn_latency")
    print(f"keypad: # to the reply's first audio {latency:.3f} s; the spoken reply cut: {spoken.cancelled}")
