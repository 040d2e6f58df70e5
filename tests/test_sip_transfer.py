"""Putting a caller through to a person (blind transfer, RFC 3515) with SIPp as the caller's phone: the
operator key and the model's transfer tool lead to a REFER to the configured target; an accepted one is
followed through its NOTIFYs and the appliance hangs up; a refused one is said so and the call goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from appliance.audio.call import call_session_kwargs
from appliance.pipeline.params import CallParams
from appliance.pipeline.session import Session
from appliance.sip import CallAudio
from tests.fixtures.pipeline import SILENCE_ONLY, make_fakes
from tests.test_sip_helpers import free_udp_port, requires_sipp, run_sipp, running_server, write_rtp_pcap

pytestmark = requires_sipp

TARGETS = {"operator": "sip:2000@127.0.0.1:5099"}


def _call(tmp_path: Path, scenario: str, *, pause_ms: int = 0) -> tuple[int, str, list[Session]]:
    """SIPp calls, presses 0 one second in; the session runs on the fake engines with the operator key."""
    pcap = write_rtp_pcap(tmp_path / "key.pcap", np.zeros(8000 * 12, np.float32), keys=((1.0, "0"),))
    call_params = CallParams(transfer_targets=TARGETS, operator_digit="0", operator_target="operator")
    config = SILENCE_ONLY.__class__(**{**SILENCE_ONLY.__dict__, "call": call_params})
    sessions: list[Session] = []
    fakes = make_fakes("unused")

    async def answer(call: CallAudio) -> None:
        session = Session(engines=fakes.engines, config=config, **call_session_kwargs(call))
        sessions.append(session)
        await session.run()

    async def scenario_run() -> tuple[int, str]:
        async with running_server(answer) as server:
            result = await run_sipp(
                scenario,
                server,
                keys={"rtp_port": str(free_udp_port()), "codecs": "0 101", "pcap": str(pcap)},
                pause_ms=pause_ms,
                timeout_s=40,
                workdir=tmp_path,
            )
            return result.returncode, result.output

    returncode, output = asyncio.run(scenario_run())
    return returncode, output, sessions


def test_the_operator_key_puts_the_caller_through_and_the_appliance_hangs_up(tmp_path: Path) -> None:
    returncode, output, sessions = _call(tmp_path, "transfer.xml")
    # SIPp checked the Refer-To, answered 202, reported 100 then 200, and got the appliance's BYE.
    assert returncode == 0, output
    (session,) = sessions
    (said,) = session.traces
    assert said.endpoint_by == "operator_key" and said.reply == "I'll put you through to operator."
    assert said.reply_audio_s > 0


def test_a_refused_transfer_is_said_and_the_call_goes_on(tmp_path: Path) -> None:
    returncode, output, sessions = _call(tmp_path, "transfer_refused.xml", pause_ms=8000)
    assert returncode == 0, output  # the caller hung up when it chose to: the call went on
    (session,) = sessions
    preamble, failed = session.traces
    assert preamble.endpoint_by == "operator_key"
    assert failed.endpoint_by == "transfer_failed"
    assert failed.reply == "Sorry, I could not put you through to operator just now."


def test_transfer_targets_are_checked_with_the_fix() -> None:
    import pytest
    from pydantic import ValidationError

    from appliance.config import SipConfig

    with pytest.raises(ValidationError, match=r"is an extension but sip\.registrar is not set"):
        SipConfig(transfer_targets={"front desk": "2000"})
    with pytest.raises(ValidationError, match=r"'reception' is not one of sip\.transfer_targets"):
        SipConfig(transfer_targets=TARGETS, operator_digit="0", operator_target="reception")
    at_pbx = SipConfig(registrar="10.20.0.2", register_user="2301", transfer_targets={"front desk": "2000"})
    assert at_pbx.transfer_uri("front desk") == "sip:2000@10.20.0.2"
