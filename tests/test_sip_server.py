"""Server behaviour over raw UDP on loopback (no SIPp): retransmissions, races, shutdown."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from appliance.ratelog import ThrottledLog
from appliance.sip.call import CallAudio
from appliance.sip.message import SipRequest, SipResponse, parse_message
from appliance.sip.server import SipServer
from appliance.sip.transactions import Retransmitter
from tests.fixtures.net import send_datagram
from tests.test_sip_helpers import LOOPBACK, free_udp_port, running_server


class Phone:
    """A bare UDP endpoint that sends SIP requests and collects whatever comes back."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def invite(self, call_id: str, branch: str) -> bytes:
        sdp = f"v=0\r\no=p 1 1 IN IP4 {LOOPBACK}\r\ns=-\r\nc=IN IP4 {LOOPBACK}\r\nt=0 0\r\nm=audio {free_udp_port()} RTP/AVP 0\r\n"
        return (
            f"INVITE sip:appliance@{LOOPBACK} SIP/2.0\r\nVia: SIP/2.0/UDP {LOOPBACK}:{self.port};branch={branch}\r\n"
            f"From: <sip:phone@{LOOPBACK}>;tag={call_id}-tag\r\nTo: <sip:appliance@{LOOPBACK}>\r\nCall-ID: {call_id}\r\n"
            f"CSeq: 1 INVITE\r\nContact: <sip:phone@{LOOPBACK}:{self.port}>\r\nContent-Type: application/sdp\r\n"
            f"Content-Length: {len(sdp)}\r\n\r\n{sdp}"
        ).encode()

    async def send(self, data: bytes, port: int) -> None:
        await send_datagram(self.sock, data, (LOOPBACK, port))

    async def collect(self, seconds: float) -> list[SipRequest | SipResponse]:
        loop = asyncio.get_running_loop()
        messages: list[SipRequest | SipResponse] = []
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            try:
                messages.append(parse_message(await asyncio.wait_for(loop.sock_recv(self.sock, 65535), left)))
            except asyncio.TimeoutError:
                break
        return messages

    def close(self) -> None:
        self.sock.close()


async def _hold(call: CallAudio) -> None:
    async for _ in call.frames():
        pass


def _options(phone: Phone, call_id: str) -> bytes:
    return (
        f"OPTIONS sip:appliance@{LOOPBACK} SIP/2.0\r\nVia: SIP/2.0/UDP {LOOPBACK}:{phone.port};branch=z9hG4bK{call_id}\r\n"
        f"From: <sip:proxy@{LOOPBACK}>;tag={call_id}\r\nTo: <sip:appliance@{LOOPBACK}>\r\nCall-ID: {call_id}\r\n"
        "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    ).encode()


def test_a_full_device_answers_503_with_retry_after_and_says_so_to_a_proxys_probe() -> None:
    async def scenario(**config: object) -> list[SipResponse]:
        async with running_server(_hold, max_calls=1, **config) as server:
            caller, proxy = Phone(), Phone()
            await proxy.send(_options(proxy, "probe-free"), server.local_port)
            free = await proxy.collect(0.3)
            await caller.send(caller.invite("holds", "z9hG4bKholds"), server.local_port)
            await caller.collect(0.3)
            await proxy.send(proxy.invite("over", "z9hG4bKover"), server.local_port)
            over = await proxy.collect(0.3)
            await proxy.send(_options(proxy, "probe-full"), server.local_port)
            full = await proxy.collect(0.3)
            caller.close()
            proxy.close()

            def final(
                messages: list[SipRequest | SipResponse],
            ) -> SipResponse:  # (a 503 is repeated until ACKed)
                return next(m for m in messages if isinstance(m, SipResponse) and m.status >= 200)

            return [final(free), final(over), final(full)]

    free, over, full = asyncio.run(scenario())
    assert free.status == 200 and free.get("X-Appliance-Calls") == "0/1" and free.get("Retry-After") is None
    assert over.status == 503 and over.get("Retry-After") == "5"
    assert full.status == 503 and full.get("X-Appliance-Calls") == "1/1" and full.get("Retry-After") == "5"
    _, busy, _ = asyncio.run(scenario(full_status=486, retry_after_s=9))
    assert busy.status == 486 and busy.get("Retry-After") is None


def test_while_the_engines_load_every_invite_and_probe_gets_503_with_retry_after() -> None:
    async def scenario() -> list[SipResponse]:
        async with running_server(_hold, max_calls=2) as server:
            server.accepting = False
            phone = Phone()
            await phone.send(_options(phone, "probe-loading"), server.local_port)
            probe = await phone.collect(0.3)
            await phone.send(phone.invite("early", "z9hG4bKearly"), server.local_port)
            early = await phone.collect(0.3)
            server.accepting = True
            await phone.send(_options(phone, "probe-ready"), server.local_port)
            ready = await phone.collect(0.3)
            phone.close()
            finals = [
                next(m for m in r if isinstance(m, SipResponse) and m.status >= 200)
                for r in (probe, early, ready)
            ]
            return finals

    probe, early, ready = asyncio.run(scenario())
    assert (
        probe.status == 503
        and probe.get("X-Appliance-State") == "loading"
        and probe.get("Retry-After") == "5"
    )
    assert early.status == 503 and early.get("Retry-After") == "5"
    assert ready.status == 200 and ready.get("X-Appliance-State") == "ready"


def _statuses(messages: list[SipRequest | SipResponse]) -> list[int]:
    return [m.status for m in messages if isinstance(m, SipResponse)]


def test_retransmitter_backs_off_and_times_out() -> None:
    async def scenario() -> tuple[list[float], bool, int, int]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        sent: list[float] = []
        timed_out = asyncio.Event()
        Retransmitter(lambda: sent.append(loop.time() - start), timed_out.set, timeout_s=2.0)
        stopped: list[float] = []
        Retransmitter(lambda: stopped.append(0.0)).stop()
        once: list[float] = []
        Retransmitter(lambda: once.append(0.0), max_sends=1)
        await asyncio.wait_for(timed_out.wait(), 3.0)
        return sent, timed_out.is_set(), len(stopped), len(once)

    sent, timed_out, stopped, once = asyncio.run(scenario())
    assert [round(t, 1) for t in sent] == [0.0, 0.5, 1.5]  # T1, then 2*T1
    assert timed_out and stopped == 1 and once == 1


def test_two_invites_at_once_for_the_last_slot_get_one_answer_and_one_503() -> None:
    async def scenario() -> tuple[list[int], list[int], int]:
        async with running_server(_hold, max_calls=1) as server:
            first, second = Phone(), Phone()
            await asyncio.gather(
                first.send(first.invite("race-1", "z9hG4bKrace1"), server.local_port),
                second.send(second.invite("race-2", "z9hG4bKrace2"), server.local_port),
            )
            replies = await asyncio.gather(first.collect(0.4), second.collect(0.4))
            calls = len(server.calls)
            first.close()
            second.close()
            return _statuses(replies[0]), _statuses(replies[1]), calls

    one, two, calls = asyncio.run(scenario())
    finals = sorted([s for s in one + two if s >= 200])
    assert finals[0] == 200 and 503 in finals and 200 not in finals[1:]
    assert calls == 1


def test_retransmitted_invite_gets_the_same_answer_and_200_repeats_until_ack() -> None:
    async def scenario() -> tuple[list[int], list[int], int, SipServer]:
        async with running_server(_hold) as server:
            phone = Phone()
            invite = phone.invite("retx", "z9hG4bKretx")
            await phone.send(invite, server.local_port)
            first = await phone.collect(1.2)  # 100, 180, 200 and its repeat at T1
            await phone.send(invite, server.local_port)  # a retransmission: not a second call
            again = await phone.collect(0.2)
            calls = len(server.calls)
            phone.close()
            return _statuses(first), _statuses(again), calls, server

    first, again, calls, server = asyncio.run(scenario())
    assert first[:3] == [100, 180, 200] and first.count(200) >= 2
    assert 200 in again
    assert calls == 1 and server.stats.calls_started == 1


def test_stop_sends_bye_to_every_call() -> None:
    async def scenario() -> list[str]:
        phone = Phone()
        async with running_server(_hold) as server:
            await phone.send(phone.invite("stop", "z9hG4bKstop"), server.local_port)
            replies = await phone.collect(0.3)
            ok = next(m for m in replies if isinstance(m, SipResponse) and m.status == 200)
            ack = (
                f"ACK sip:appliance@{LOOPBACK}:{server.local_port} SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP {LOOPBACK}:{phone.port};branch=z9hG4bKack\r\n"
                f"From: <sip:phone@{LOOPBACK}>;tag=stop-tag\r\nTo: {ok.get('To')}\r\nCall-ID: stop\r\nCSeq: 1 ACK\r\n\r\n"
            ).encode()
            await phone.send(ack, server.local_port)
            await asyncio.sleep(0.1)
        requests = [m.method for m in await phone.collect(0.3) if isinstance(m, SipRequest)]
        phone.close()
        return requests

    assert asyncio.run(scenario()) == ["BYE"]


def test_a_flood_of_malformed_datagrams_writes_a_line_or_two_not_one_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """2,000 garbage datagrams at the real server: all counted, each answered or dropped as before, but
    the log gets the first one and a count, not 2,000 lines (disk and eMMC wear on the device)."""
    flood = 2000

    async def scenario() -> int:
        async with running_server(_hold) as server:
            phone = Phone()
            try:
                for n in range(flood):
                    await phone.send(b"NOT SIP %d\r\n\r\n" % n, server.local_port)
                    if n % 50 == 49:
                        await asyncio.sleep(0.005)  # a flood, paced so that loopback UDP drops none
                for _ in range(200):
                    if server.stats.malformed >= flood:
                        break
                    await asyncio.sleep(0.02)
            finally:
                phone.close()
            return server.stats.malformed

    with caplog.at_level(logging.INFO, logger="appliance.sip.server"):
        counted = asyncio.run(scenario())
    lines = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert counted >= 0.9 * flood
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]


def test_the_throttled_log_counts_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    throttled = ThrottledLog(logging.getLogger("tests.throttle"), interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="tests.throttle"):
        written = [throttled.info("bad", "bad packet %d", n) for n in range(5)]
        now[0] = 10.5
        throttled.info("bad", "bad packet %d", 5)
        throttled.info("other", "another kind")
    assert written == [True, False, False, False, False]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "bad packet 0",
        "bad packet 5 (and 4 more like it in the last 10 s, not logged)",
        "another kind",
    ]


def test_an_invite_never_acked_gives_its_slot_back_after_64_t1() -> None:
    # T1 = 50 ms (a LAN): the 200 OK is repeated, then after 64*T1 = 3.2 s without an ACK the call
    # ends with a BYE and a second caller gets the only slot.
    async def scenario() -> tuple[list[int], list[str], list[int], float]:
        async with running_server(_hold, max_calls=1, t1_ms=50) as server:
            silent, second = Phone(), Phone()
            started = asyncio.get_running_loop().time()
            await silent.send(silent.invite("no-ack", "z9hG4bKnoack"), server.local_port)
            await silent.collect(0.3)
            await second.send(second.invite("busy", "z9hG4bKbusy"), server.local_port)
            busy = _statuses(await second.collect(0.3))
            heard = await silent.collect(3.5)
            freed_after = asyncio.get_running_loop().time() - started
            await second.send(second.invite("later", "z9hG4bKlater"), server.local_port)
            later = _statuses(await second.collect(0.3))
            silent.close()
            second.close()
            return busy, [m.method for m in heard if isinstance(m, SipRequest)], later, freed_after

    busy, requests, later, freed_after = asyncio.run(scenario())
    assert 503 in busy  # the unACKed call holds the slot at first
    assert "BYE" in requests  # then it is ended, and the caller told so
    assert 200 in later and freed_after < 5.0
