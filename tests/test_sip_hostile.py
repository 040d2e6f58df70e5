"""Hostile or careless SIP input against the real server: an SDP that names a host instead of an
address, and floods of INVITEs the device refuses. The event loop is watched for blocking work
(``watch_loop``) and the name-lookup guard the daemon installs is installed here too."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator

import pytest

from appliance.rtp.stream import MediaParams
from appliance.sip.call import CallAudio
from appliance.sip.message import SipResponse
from appliance.sip.sdp import SdpError, parse_sdp
from appliance.sip.server import SipServer
from engines.net import NameLookupGuard, NameLookupRefused, name_lookup_allowed
from tests.fixtures.loopwatch import watch_loop
from tests.test_sip_helpers import LOOPBACK, free_udp_port, running_server, sip_config
from tests.test_sip_server import Phone, _options

_REAL_SENDTO = socket.socket.sendto


@pytest.fixture
def guard() -> Iterator[NameLookupGuard]:
    installed = NameLookupGuard(lambda host, where: None)
    installed.install()
    try:
        yield installed
    finally:
        installed.uninstall()


def _invite(phone: Phone, call_id: str, connection: str) -> bytes:
    sdp = (
        f"v=0\r\no=p 1 1 IN IP4 {LOOPBACK}\r\ns=-\r\nc={connection}\r\nt=0 0\r\n"
        f"m=audio {free_udp_port()} RTP/AVP 0\r\n"
    )
    return (
        f"INVITE sip:appliance@{LOOPBACK} SIP/2.0\r\nVia: SIP/2.0/UDP {LOOPBACK}:{phone.port};branch=z9hG4bK{call_id}\r\n"
        f"From: <sip:phone@{LOOPBACK}>;tag={call_id}-tag\r\nTo: <sip:appliance@{LOOPBACK}>\r\nCall-ID: {call_id}\r\n"
        f"CSeq: 1 INVITE\r\nContact: <sip:phone@{LOOPBACK}:{phone.port}>\r\nContent-Type: application/sdp\r\n"
        f"Content-Length: {len(sdp)}\r\n\r\n{sdp}"
    ).encode()


async def _hold(call: CallAudio) -> None:
    async for _ in call.frames():
        pass


def test_an_sdp_host_name_is_refused_with_488_and_nothing_is_looked_up(guard: NameLookupGuard) -> None:
    """`c=IN IP4 media.example.net` is legal SDP a PBX may send; resolving it would put a blocking DNS
    query on the event loop for every RTP packet. The INVITE gets 488 naming the problem, no lookup is
    tried, the loop never stalls, and the next (numeric) call is answered."""

    async def scenario() -> tuple[list[SipResponse], list[SipResponse], list[SipResponse], list[str]]:
        async with watch_loop() as slow, running_server(_hold) as server:
            phone = Phone()
            try:
                await phone.send(_invite(phone, "named", "IN IP4 media.example.net"), server.local_port)
                named = [m for m in await phone.collect(0.5) if isinstance(m, SipResponse)]
                await phone.send(_options(phone, "after"), server.local_port)
                options = [m for m in await phone.collect(0.3) if isinstance(m, SipResponse)]
                await phone.send(_invite(phone, "numeric", f"IN IP4 {LOOPBACK}"), server.local_port)
                numeric = [m for m in await phone.collect(0.5) if isinstance(m, SipResponse)]
            finally:
                phone.close()
            return named, options, numeric, list(slow)

    named, options, numeric, slow = asyncio.run(scenario())
    assert [r.status for r in named][-1] == 488, named
    assert "host name" in (named[-1].get("Warning") or "")
    assert [r.status for r in options if r.get("Call-ID") == "after"] == [200]
    assert 200 in [r.status for r in numeric if r.get("Call-ID") == "numeric"]
    assert guard.refused == []  # nothing even tried to resolve the name
    assert slow == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("c=IN IP4 media.example.net", "host name"),
        ("c=IN IP4 pbx.local.", "host name"),
        ("c=IN IP4 ::1", "not an IP4 address"),
        ("c=IN IP6 192.0.2.1", "not an IP6 address"),
    ],
)
def test_connection_addresses_must_be_ip_literals_of_their_type(line: str, problem: str) -> None:
    with pytest.raises(SdpError, match=problem):
        parse_sdp(f"v=0\r\n{line}\r\nm=audio 4000 RTP/AVP 0\r\n")
    assert parse_sdp("v=0\r\nc=IN IP6 2001:db8::1\r\nm=audio 4000 RTP/AVP 0\r\n").connection == "2001:db8::1"


def test_the_rtp_stream_refuses_a_peer_that_is_not_an_address() -> None:
    with pytest.raises(ValueError, match="not an IP address"):
        MediaParams("media.example.net", 4000, "PCMU", 0)
    assert MediaParams("::1", 4000, "PCMU", 0).remote_host == "::1"


def test_the_guard_refuses_names_outside_the_allowed_places(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lookups of literals and of the local names go through; a name only inside
    ``name_lookup_allowed`` (the LLM server and the http tool open it for their listed hosts)."""
    asked: list[str] = []

    def resolver(host: str, *args: object, **kwargs: object) -> list[object]:
        asked.append(host)
        return []

    monkeypatch.setattr(socket, "getaddrinfo", resolver)  # the guard wraps this stand-in resolver
    guard = NameLookupGuard(lambda host, where: None)
    guard.install()
    try:
        with pytest.raises(NameLookupRefused, match=r"media\.example\.net"):
            socket.getaddrinfo("media.example.net", 4000)
        with pytest.raises(NameLookupRefused):
            socket.create_connection(("media.example.net", 80), timeout=0.1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, pytest.raises(NameLookupRefused):
            sock.sendto(b"x", ("media.example.net", 4000))  # resolved in C: the socket is guarded too
        socket.getaddrinfo("127.0.0.1", 80)
        socket.getaddrinfo("localhost", 80)
        with name_lookup_allowed("llm.site.lan"):
            socket.getaddrinfo("LLM.site.lan.", 8000)
        with pytest.raises(NameLookupRefused):
            socket.getaddrinfo("llm.site.lan", 8000)  # the permission ends with the block
    finally:
        guard.uninstall()
    assert asked == ["127.0.0.1", "localhost", "LLM.site.lan."]
    assert guard.refused == ["media.example.net", "media.example.net", "media.example.net", "llm.site.lan"]
    assert socket.getaddrinfo is resolver and socket.socket.sendto is _REAL_SENDTO


def test_refused_invites_write_a_line_per_kind_not_one_each(caplog: pytest.LogCaptureFixture) -> None:
    """A flood of INVITEs the device refuses (still loading; a host-named SDP) goes through the
    throttled log like malformed datagrams: the first of each kind and a count."""
    flood = 300

    async def scenario(accepting: bool, connection: str) -> int:
        server = SipServer(sip_config(), _hold, accepting=accepting)
        await server.start()
        phone = Phone()
        answered = 0
        try:
            for n in range(flood):
                await phone.send(_invite(phone, f"flood{n}", connection), server.local_port)
                if n % 50 == 49:
                    answered += len(await phone.collect(0.05))
            answered += len(await phone.collect(0.3))
        finally:
            phone.close()
            await server.stop()
        return answered

    with caplog.at_level(logging.INFO, logger="appliance.sip"):
        loading = asyncio.run(scenario(False, f"IN IP4 {LOOPBACK}"))
        named = asyncio.run(scenario(True, "IN IP4 media.example.net"))
    assert loading >= flood * 0.9 and named >= flood * 0.9  # each was still answered
    lines = [r.getMessage() for r in caplog.records if "INVITE" in r.getMessage()]
    assert 2 <= len(lines) <= 4, lines
    assert any("still loading" in line for line in lines) and any("host name" in line for line in lines)
