"""Putting a caller through to a person (blind transfer, RFC 3515). With SIPp as the caller's phone: the
operator key leads to a REFER to the configured target; an accepted one is followed through its NOTIFYs
and the appliance hangs up; a refused one is said so and the call goes on. With baresip as the caller's
phone and SIPp as the front desk's: the model's transfer tool makes the desk ring."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from appliance.agent.params import ToolConfig
from appliance.audio.call import call_session_kwargs
from appliance.pipeline.params import CallParams
from appliance.pipeline.session import Session
from appliance.sip.call import CallAudio
from tests.fixtures.baresip import baresip_phone, baresip_said, requires_baresip
from tests.fixtures.pipeline import SILENCE_ONLY, make_fakes, tone, tool_calling_fakes
from tests.test_sip_helpers import (
    LOOPBACK,
    SCENARIOS,
    SIPP,
    free_media_ports,
    free_udp_port,
    requires_sipp,
    run_sipp,
    running_server,
    write_rtp_pcap,
)

pytestmark = requires_sipp

TARGETS = {"operator": "sip:2000@127.0.0.1:5099"}


def _call(
    tmp_path: Path,
    scenario: str,
    *,
    pause_ms: int = 0,
    server: dict[str, object] | None = None,
    sipp_port: int | None = None,
    greeting: str = "",
    key_at_s: float = 1.0,
) -> tuple[int, str, list[Session]]:
    """SIPp calls, presses 0 one second in; the session runs on the fake engines with the operator key."""
    pcap = write_rtp_pcap(tmp_path / "key.pcap", np.zeros(8000 * 12, np.float32), keys=((key_at_s, "0"),))
    call_params = CallParams(
        transfer_targets=TARGETS, operator_digit="0", operator_target="operator", greeting=greeting
    )
    config = SILENCE_ONLY.__class__(**{**SILENCE_ONLY.__dict__, "call": call_params})
    sessions: list[Session] = []
    fakes = make_fakes("unused")

    async def answer(call: CallAudio) -> None:
        session = Session(engines=fakes.engines, config=config, **call_session_kwargs(call))
        sessions.append(session)
        await session.run()

    async def scenario_run() -> tuple[int, str]:
        async with running_server(answer, **(server or {})) as listening:
            result = await run_sipp(
                scenario,
                listening,
                keys={"rtp_port": str(free_udp_port()), "codecs": "0 101", "pcap": str(pcap)},
                pause_ms=pause_ms,
                timeout_s=40,
                local_port=sipp_port,
                workdir=tmp_path,
            )
            return result.returncode, result.output

    returncode, output = asyncio.run(scenario_run())
    return returncode, output, sessions


def test_a_call_is_answered_with_the_sites_greeting(tmp_path: Path) -> None:
    greeting = "Plant 3 reception, how can I help?"
    returncode, output, sessions = _call(tmp_path, "transfer.xml", greeting=greeting, key_at_s=6.0)
    assert returncode == 0, output
    (session,) = sessions
    greeted, said = session.turns.traces
    assert greeted.endpoint_by == "greeting" and greeted.reply == greeting and greeted.reply_audio_s > 1.0
    assert said.endpoint_by == "operator_key"


def test_the_operator_key_puts_the_caller_through_and_the_appliance_hangs_up(tmp_path: Path) -> None:
    returncode, output, sessions = _call(tmp_path, "transfer.xml")
    # SIPp checked the Refer-To, answered 202, reported 100 then 200, and got the appliance's BYE.
    assert returncode == 0, output
    (session,) = sessions
    (said,) = session.turns.traces
    assert said.endpoint_by == "operator_key" and said.reply == "I'll put you through to the operator."
    assert said.reply_audio_s > 0


def _extension(tmp_path: Path, registrar: str) -> dict[str, object]:
    password = tmp_path / "extension.password"
    password.write_text("s3cret-ext-42\n")
    password.chmod(0o600)
    return {"registrar": registrar, "register_user": "kiosk", "register_password_file": password}


def test_a_transfer_the_phone_system_challenges_is_sent_again_with_the_extensions_digest(
    tmp_path: Path,
) -> None:
    """The call comes from the phone system at sip.registrar (SIPp on that address; it leaves the
    REGISTERs unanswered), which answers the REFER with 401 and a digest challenge; the REFER is sent
    again with an Authorization for the extension (SIPp verifies the digest with the password), then
    the transfer goes on as an unchallenged one."""
    pbx_port = free_udp_port()
    extension = _extension(tmp_path, f"127.0.0.1:{pbx_port}")
    returncode, output, sessions = _call(
        tmp_path, "transfer_challenged.xml", server=extension, sipp_port=pbx_port
    )
    assert returncode == 0, output  # a wrong digest would have been answered 403 and failed SIPp
    (session,) = sessions
    (said,) = session.turns.traces
    assert said.endpoint_by == "operator_key"


def test_a_caller_who_challenges_the_transfer_gets_no_digest_of_the_extensions_password(
    tmp_path: Path,
) -> None:
    """A caller who is not the phone system presses the operator key and answers the REFER sent to
    it with its own 401 (any realm, a fixed nonce: an offline guess of the password would follow).
    The REFER is not sent again (SIPp fails on any further REFER), the caller is told the transfer
    failed, and the call goes on."""
    extension = _extension(tmp_path, f"127.0.0.1:{free_udp_port()}")  # the PBX is elsewhere
    returncode, output, sessions = _call(
        tmp_path, "transfer_hostile_challenge.xml", server=extension, pause_ms=6000
    )
    assert returncode == 0, output  # no second REFER, with or without an Authorization
    (session,) = sessions
    preamble, failed = session.turns.traces
    assert preamble.endpoint_by == "operator_key"
    assert failed.endpoint_by == "transfer_failed"


def test_a_refused_transfer_is_said_and_the_call_goes_on(tmp_path: Path) -> None:
    returncode, output, sessions = _call(tmp_path, "transfer_refused.xml", pause_ms=8000)
    assert returncode == 0, output  # the caller hung up when it chose to: the call went on
    (session,) = sessions
    preamble, failed = session.turns.traces
    assert preamble.endpoint_by == "operator_key"
    assert failed.endpoint_by == "transfer_failed"
    assert failed.reply == "Sorry, I could not put you through to the operator just now."


def test_transfer_targets_are_checked_with_the_fix() -> None:
    import pytest
    from pydantic import ValidationError

    from appliance.config import Settings
    from appliance.pipeline.params import CallParams

    pbx = {"registrar": "10.20.0.2", "register_user": "2301"}
    with pytest.raises(ValidationError, match=r"is an extension but sip\.registrar is not set"):
        Settings(call={"transfer_targets": {"front desk": "2000"}})
    with pytest.raises(ValidationError, match=r"'reception' is not one of call\.transfer_targets"):
        CallParams(transfer_targets=TARGETS, operator_digit="0", operator_target="reception")
    at_pbx = Settings(sip=pbx, call={"transfer_targets": {"front desk": "2000"}})
    assert at_pbx.call.transfer_uri("front desk", at_pbx.sip.transfer_domain()) == "sip:2000@10.20.0.2"
    on_a_port = Settings(
        sip={**pbx, "registrar": "127.0.0.1:5090"}, call={"transfer_targets": {"desk": "2100"}}
    )
    assert (
        on_a_port.call.transfer_uri("desk", on_a_port.sip.transfer_domain()) == "sip:2100@127.0.0.1:5090"
    )  # not 5060


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        (
            {"transfer_targets": {"desk": "sip:2000@10.0.0.2>\r\nRefer-To: <sip:9@evil"}},
            "neither an extension",
        ),
        ({"transfer_targets": {"desk\r\nX-Injected: 1": "2000"}}, "one line"),
        ({"transfer_targets": {"desk": "20 00"}}, "neither an extension"),
        ({"transfer_preamble": "{oops}"}, r"\{oops\} is not a placeholder this sentence can use"),
        ({"transfer_failed_reply": "Sorry {target.__class__}"}, "not a placeholder"),
        ({"transfer_preamble": "Put through to {target"}, "unbalanced braces"),
        ({"silence_prompt": "Still there?\r\nBye"}, "one line"),
    ],
)
def test_settings_that_reach_sip_headers_or_sentences_are_refused_with_the_fix(
    keys: dict[str, object], problem: str
) -> None:
    """A CR/LF in a transfer target would add headers to the REFER; an unknown placeholder in a
    sentence crashed every operator-key call with KeyError. Both are refused where settings are
    checked (the admin page's write and `appliance config check` use the same schema)."""
    from pydantic import ValidationError

    from appliance.pipeline.params import CallParams

    with pytest.raises(ValidationError, match=problem):
        CallParams.model_validate(keys)


class _TimedTransfers:
    """A call whose transfers are timed (wall clock, to compare with SIPp's message log)."""

    def __init__(self, call: CallAudio) -> None:
        self._call = call
        self.asked_at: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)

    async def transfer(self, target: str) -> None:
        self.asked_at.append(time.time())
        await self._call.transfer(target)


def _received_at(message_log: Path, method: str) -> float:
    """When SIPp's ``-trace_msg`` log first has ``method`` received."""
    found = re.search(
        rf"-+ (\S+ \S+)\s*\n\w+ message received \[\d+\] bytes :\s*\n\s*{method} ", message_log.read_text()
    )
    assert found is not None, message_log.read_text()[-3000:]
    return datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S.%f").timestamp()


@requires_baresip
def test_the_model_puts_the_caller_through_to_a_desk_phone_that_rings(tmp_path: Path) -> None:
    """baresip calls and speaks (a tone the fake VAD hears); the model calls the transfer tool; after the
    reply the appliance REFERs baresip to the front desk, baresip calls the desk (SIPp), which rings and
    answers; baresip reports it (NOTIFY 200) and the appliance hangs up; the caller then talks to the
    desk until it hangs up."""
    desk_port = free_udp_port()
    fakes = tool_calling_fakes(
        '{"name": "transfer_call", "arguments": {"destination": "front desk"}}',
        "I will put you through to the front desk.",
        ToolConfig(name="transfer_call", kind="transfer", description="put the caller through to a person"),
        transfer_targets=("front desk",),
        heard="Could you put me through to the front desk, please?",
    )
    targets = CallParams(transfer_targets={"front desk": f"sip:desk@{LOOPBACK}:{desk_port}"})
    config = dataclasses.replace(SILENCE_ONLY, call=targets)
    microphone = tmp_path / "caller.wav"
    said = np.concatenate([np.zeros(8000), tone(0.6, rate_hz=8000), np.zeros(8000 * 20)])
    sf.write(microphone, said, 8000, subtype="PCM_16")  # what baresip's aufile source reads
    calls: list[_TimedTransfers] = []
    sessions: list[Session] = []
    ended = asyncio.Event()
    desk_messages = tmp_path / "desk.messages.log"

    async def answer(call: CallAudio) -> None:
        timed = _TimedTransfers(call)
        calls.append(timed)
        session = Session(engines=fakes.engines, config=config, **call_session_kwargs(timed))
        sessions.append(session)
        try:
            await session.run()
        finally:
            ended.set()

    async def scenario_run() -> tuple[int, str, str]:
        assert SIPP is not None
        desk = await asyncio.create_subprocess_exec(
            SIPP, "-sf", str(SCENARIOS / "front_desk.xml"), "-i", LOOPBACK, "-p", str(desk_port),
            "-mp", str(free_media_ports()), "-m", "1", "-nostdin", "-timeout", "40s", "-timeout_error",
            "-trace_msg", "-message_file", str(desk_messages),
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        async with running_server(answer) as server:
            dial = f"sip:appliance@{LOOPBACK}:{server.local_port}"
            with baresip_phone(tmp_path, port=free_udp_port(), microphone=microphone, dial=dial) as log:
                await asyncio.wait_for(ended.wait(), 30)  # the appliance hung up once the desk answered
                await asyncio.sleep(1.0)  # the caller and the desk talk
            output, _ = await asyncio.wait_for(desk.communicate(), 20)  # baresip hung up on the desk
        return desk.returncode or 0, output.decode(errors="replace"), baresip_said(log)

    returncode, desk_output, phone = asyncio.run(scenario_run())
    assert returncode == 0, desk_output + phone[-3000:]
    (timed,) = calls
    (session,) = sessions
    (asked,) = session.turns.traces  # one turn: the call ended with the transfer
    assert (
        asked.tool_calls == ["transfer_call"] and asked.reply == "I'll put you through to the front desk."
    )  # call.transfer_preamble, not the model
    assert re.search(rf"Call established: sip:desk@{LOOPBACK}:{desk_port}", phone), phone[-3000:]
    rang_after_s = _received_at(desk_messages, "INVITE") - timed.asked_at[0]
    print(f"transfer: the desk phone rang {rang_after_s * 1000:.0f} ms after the REFER was asked for")
    assert rang_after_s > 0
