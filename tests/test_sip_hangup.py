"""The appliance ends a call, with SIPp as the caller's phone waiting for its BYE: the model's end_call
tool after the goodbye is played, and a caller who stays silent, asked once whether they are there."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import numpy as np

from appliance.agent.params import ToolConfig
from appliance.audio.call import call_session_kwargs
from appliance.config import AgentParams
from appliance.pipeline.params import CallParams
from appliance.pipeline.session import Session, SessionConfig
from appliance.sip.call import CallAudio
from tests.fixtures.pipeline import SILENCE_ONLY, Fakes, make_fakes, tone, tool_calling_fakes
from tests.test_sip_helpers import free_udp_port, requires_sipp, run_sipp, running_server, write_rtp_pcap

pytestmark = requires_sipp


def _call_until_bye(
    tmp_path: Path, fakes: Fakes, config: SessionConfig, *, silence_s: float
) -> tuple[int, str, Session, float]:
    """SIPp says something (a tone the fake VAD hears), then stays silent ``silence_s`` while waiting
    for the appliance's BYE; SIPp's status, its output, the session and the call's length."""
    said = tone(0.6, rate_hz=8000)
    pcap = write_rtp_pcap(
        tmp_path / "said.pcap",
        np.concatenate([np.zeros(4000, np.float32), said, np.zeros(int(8000 * silence_s), np.float32)]),
    )
    sessions: list[Session] = []

    async def answer(call: CallAudio) -> None:
        session = Session(engines=fakes.engines, config=config, **call_session_kwargs(call))
        sessions.append(session)
        await session.run()

    async def scenario_run() -> tuple[int, str, float]:
        async with running_server(answer) as server:
            started = time.monotonic()
            result = await run_sipp(
                "call_until_bye.xml",
                server,
                keys={"rtp_port": str(free_udp_port()), "codecs": "0 101", "pcap": str(pcap)},
                timeout_s=40,
                workdir=tmp_path,
            )
            return result.returncode, result.output, time.monotonic() - started

    returncode, output, took = asyncio.run(scenario_run())
    (session,) = sessions
    return returncode, output, session, took


def test_the_model_hangs_up_after_its_goodbye_is_played(tmp_path: Path) -> None:
    fakes = tool_calling_fakes(
        '{"name": "end_call", "arguments": {}}',
        "Goodbye, and have a nice day.",
        ToolConfig(name="end_call", kind="end_call", description="end the phone call after a goodbye"),
    )
    returncode, output, session, took = _call_until_bye(tmp_path, fakes, SILENCE_ONLY, silence_s=25.0)
    assert returncode == 0, output  # SIPp got the appliance's BYE and answered it
    (goodbye,) = session.turns.traces
    assert goodbye.tool_calls == ["end_call"] and goodbye.reply == AgentParams().goodbye_reply
    assert goodbye.reply_audio_s > 0 and not goodbye.cancelled  # played whole before the BYE
    assert took < 20.0, took  # ended by the appliance, long before the caller's 25 s of silence


def test_a_silent_caller_is_asked_once_then_the_appliance_hangs_up(tmp_path: Path) -> None:
    call = CallParams(silence_prompt_s=2.0, silence_hangup_s=2.0, silence_prompt="Are you still there?")
    config = dataclasses.replace(SILENCE_ONLY, call=call)
    fakes = make_fakes("The depot opens at seven.")
    returncode, output, session, took = _call_until_bye(tmp_path, fakes, config, silence_s=25.0)
    assert returncode == 0, output
    answered, prompt = session.turns.traces
    assert answered.reply == "The depot opens at seven."
    assert prompt.endpoint_by == "silence_prompt" and prompt.reply == "Are you still there?"
    assert took < 20.0, took
