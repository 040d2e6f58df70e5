"""The appliance as an extension of a real registrar with digest authentication (Kamailio with
deploy/kamailio/registrar.cfg on loopback): registered with MD5 and SHA-256, a wrong password refused
and reported, renewed before expiry, registered again after the registrar restarts, unregistered on
stop; and a call to the extension routed to the appliance and answered with speech."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from appliance.config import SipParams
from appliance.sip.call import CallAudio, CallHandler
from appliance.sip.register import Registration, RegistrationStatus
from appliance.sip.server import SipServer
from bench.sip_register import KamailioRegistrar
from tests.test_sip_helpers import free_udp_port

pytestmark = pytest.mark.skipif(
    shutil.which("kamailio") is None, reason="kamailio missing: ./scripts/setup installs it"
)

EXTENSION, PASSWORD = "kiosk", "s3cret-ext-42"


def _registrar(workdir: Path, *, algorithm: str = "MD5", extension: str = EXTENSION) -> KamailioRegistrar:
    return KamailioRegistrar(workdir, extension=extension, password=PASSWORD, algorithm=algorithm)


@pytest.fixture
def registrar(tmp_path: Path) -> Iterator[KamailioRegistrar]:
    found = _registrar(tmp_path)
    found.start()
    yield found
    found.stop()


def _config(registrar: KamailioRegistrar, password_file: Path, **changes: object) -> SipParams:
    values: dict[str, object] = {
        "enabled": True,
        "port": 0,
        "registrar": f"127.0.0.1:{registrar.port}",
        "register_user": EXTENSION,
        "register_password_file": password_file,
        "register_min_interval_s": 1.0,  # the test registrar grants 5 s
    }
    return SipParams(**(values | changes))


def _password_file(folder: Path, password: str) -> Path:
    path = folder / "extension.password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


async def _nothing(call: object) -> None:
    return None


async def _until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _serving(
    config: SipParams, handler: CallHandler | None = None, *, until: str = "registered", wait_s: float = 10
) -> AsyncIterator[tuple[SipServer, Registration]]:
    """A SIP server registering with ``config``'s registrar, once its registration is ``until`` (or
    ``wait_s`` passed); stopped (and unregistered) on the way out."""
    server = SipServer(config, handler or _nothing)
    await server.start()
    registration = server.registration
    assert registration is not None
    try:
        await _until(lambda: registration.status.state == until, wait_s)
        yield server, registration
    finally:
        await server.stop()


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_it_registers_renews_before_expiry_and_unregisters_on_stop(tmp_path: Path, algorithm: str) -> None:
    registrar = _registrar(tmp_path, algorithm=algorithm)
    registrar.start()
    config = _config(registrar, _password_file(tmp_path, PASSWORD), register_expires_s=30)

    async def run() -> tuple[list[float], str]:
        async with _serving(config) as (_, registration):
            first = registration.status
            assert first.state == "registered" and first.expires_s == 5, (first, registrar.log[-2000:])
            assert first.auth == f"digest {algorithm}"
            print(f"{algorithm}: registered in {first.last_register_ms} ms (challenge included)")
            # The registrar grants at most 5 s; renewed at 80% of it, twice (watched once: SHA-256).
            renewed_at = []
            for count in (1, 2) if algorithm == "SHA-256" else ():
                await _until(lambda count=count: registration.status.renewals >= count, 15)  # type: ignore[misc]
                await _until(lambda: registration.status.state == "registered", 5)
                renewed_at.append(time.monotonic())
            state = registration.status.state
        return renewed_at, state

    try:
        renewed_at, state = asyncio.run(run())
    finally:
        registrar.stop()
    saved = 1 + len(renewed_at) + 1  # registered, renewed, unregistered (Expires: 0)
    assert state == "registered" and registrar.saved() == saved, registrar.log[-3000:]
    if renewed_at:
        interval = renewed_at[1] - renewed_at[0]
        print(f"{algorithm}: renewal interval {interval:.2f} s (due every 4.0 s)")
        assert 3.0 < interval < 5.5


def test_a_wrong_password_is_refused_and_said_so_and_it_keeps_trying(
    registrar: KamailioRegistrar, tmp_path: Path
) -> None:
    config = _config(registrar, _password_file(tmp_path, "not-the-password"))

    async def run() -> RegistrationStatus:
        async with _serving(config, until="failing") as (_, registration):
            return registration.status

    status = asyncio.run(run())
    assert status.state == "failing" and status.failures == 1
    assert "refused the password of kiosk" in status.detail and "trying again in 5 s" in status.detail
    assert "not-the-password" not in status.detail
    assert registrar.saved() == 0


def test_after_the_registrar_restarts_the_next_renewal_registers_again(
    registrar: KamailioRegistrar, tmp_path: Path
) -> None:
    config = _config(registrar, _password_file(tmp_path, PASSWORD), register_expires_s=30)

    async def run() -> tuple[str, int]:
        async with _serving(config) as (_, registration):
            await asyncio.to_thread(registrar.stop)
            await asyncio.to_thread(registrar.start)  # its bindings are gone
            # The registrar logs "saved" before its 200 OK reaches the appliance: wait for both.
            await _until(lambda: registrar.saved() >= 2 and registration.status.state == "registered", 40)
            return registration.status.state, registration.status.renewals

    state, renewals = asyncio.run(run())
    assert state == "registered" and renewals >= 1 and registrar.saved() >= 2, registrar.log[-2000:]


@pytest.mark.slow
def test_a_call_to_the_extension_is_routed_by_the_registrar_and_answered_with_speech(
    tmp_path: Path, data_dir: Path
) -> None:
    """`appliance run` registered as extension "appliance"; SIPp calls that extension at the registrar,
    which sends the call to where the appliance registered: answered with speech. The admin page,
    /metrics and the OPTIONS answer say it is registered; the password appears nowhere."""
    import httpx

    from appliance.auth.passwords import ScryptParams, write_password_file
    from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, place_call

    registrar = _registrar(tmp_path / "registrar", extension="appliance")
    registrar.workdir.mkdir()
    registrar.start()
    password_file = _password_file(tmp_path, PASSWORD)
    config = DaemonConfig(tmp_path, free_udp_port(), free_tcp_port())
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    env |= {
        "APPLIANCE_SIP__REGISTRAR": f"127.0.0.1:{registrar.port}",
        "APPLIANCE_SIP__REGISTER_USER": "appliance",
        "APPLIANCE_SIP__REGISTER_PASSWORD_FILE": str(password_file),
    }
    write_password_file(tmp_path / "admin-password", "admin-pw-for-the-test", ScryptParams(log2_n=10))
    daemon = DaemonProcess(config, env=env)
    try:
        daemon.wait_ready()
        with httpx.Client(base_url=daemon.base_url, timeout=5) as admin:
            login = {"username": "admin", "password": "admin-pw-for-the-test"}
            assert admin.post("/api/login", json=login).status_code == 200
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                shown = admin.get("/api/status").json()["sip_registration"]
                if shown and shown["state"] == "registered":
                    break
                time.sleep(0.2)
            metrics = admin.get("/metrics").text
        answered, output = place_call(tmp_path, data_dir, registrar.port, scenario="call.xml", pause_ms=12000)
        for _attempt in range(40):
            if daemon.stored_turns():
                break
            time.sleep(0.5)
    finally:
        log = daemon.stop()
        registrar.stop()
    assert shown["state"] == "registered" and shown["auth"] == "digest MD5", shown
    print(f"registered in {shown['last_register_ms']} ms")
    assert (
        f'appliance_sip_registered{{registrar="127.0.0.1:{registrar.port}",user="appliance"}} 1.0' in metrics
    )
    assert answered == 0, output
    (turn,) = daemon.stored_turns()
    assert "brooklyn" in turn["transcript"].lower() and turn["played_reply"], turn
    assert (
        "REGISTER of appliance from 127.0.0.1: saved (0 s over udp)" in registrar.log
    )  # unregistered on the way out
    assert PASSWORD not in log and PASSWORD not in metrics and PASSWORD not in str(shown)


def test_it_registers_over_tcp_and_the_registrar_sends_the_call_over_tcp(
    tmp_path: Path, data_dir: Path
) -> None:
    """sip.register_transport = "tcp": the REGISTER (and its challenge) goes over a TCP connection to the
    registrar, the Contact asks for TCP, so a call to the extension (SIPp over UDP to the registrar)
    reaches the appliance over TCP; the binding is removed over TCP on stop."""
    from tests.fixtures.daemon_proc import place_call

    registrar = KamailioRegistrar(tmp_path, extension="appliance", password=PASSWORD, tcp=True)
    registrar.start()
    password_file = _password_file(tmp_path, PASSWORD)
    config = _config(registrar, password_file, register_user="appliance", register_transport="tcp")
    calls: list[str] = []

    async def answer(call: CallAudio) -> None:
        calls.append(call.call_id)
        await asyncio.sleep(1.0)  # the caller's ACK first: a BYE before it would be out of order for SIPp
        await call.hangup()

    async def run() -> tuple[RegistrationStatus, int, str, int]:
        async with _serving(config, answer) as (server, registration):
            status = registration.status
            answered, output = await asyncio.to_thread(
                place_call, tmp_path, data_dir, registrar.port, wait_for_bye_s=10, trailing_s=1.0
            )
            return status, answered, output, server.stats.stream_messages

    try:
        status, answered, output, over_tcp = asyncio.run(run())
    finally:
        registrar.stop()
    assert status.state == "registered" and status.auth == "digest MD5", (status, registrar.log[-2000:])
    saved = re.findall(
        r"REGISTER of appliance from 127\.0\.0\.1: saved \((\d+) s over (\w+)\)", registrar.log
    )
    assert saved == [("300", "tcp"), ("0", "tcp")], registrar.log[-2000:]  # registered; removed on stop
    assert answered == 0 and len(calls) == 1, output + registrar.log[-2000:]
    assert over_tcp >= 2 + 3, over_tcp  # 401 and 200, then the INVITE, its ACK and the BYE's 200


def test_doctor_registers_once_from_a_port_of_its_own_and_removes_that_binding(
    registrar: KamailioRegistrar, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from appliance.cli import main

    def doctor(password: str) -> tuple[int, str]:
        config = tmp_path / "site.toml"
        config.write_text(
            f'[sip]\nenabled = true\nregistrar = "127.0.0.1:{registrar.port}"\nregister_user = "{EXTENSION}"\n'
            f'register_password_file = "{_password_file(tmp_path, password)}"\n'
        )
        code = main(["doctor", "--config", str(config)])
        return code, capsys.readouterr().out

    code, out = doctor(PASSWORD)
    assert code == 0 and f"ok  sip registration: sip:{EXTENSION}@127.0.0.1 registered with" in out, out
    assert "that test binding was removed again" in out and registrar.saved() == 2  # added, removed
    code, out = doctor("wrong")
    assert code == 1 and "FAIL  sip registration: the registrar refused the password of kiosk" in out, out


@pytest.mark.parametrize(
    ("answer", "reported"),
    [
        ('401 Unauthorized\r\nWWW-Authenticate: Basic realm="pbx"', "the challenge is Basic, not Digest"),
        ("401 Unauthorized", "the challenge is empty, not Digest"),
        (
            '407 Proxy Authentication Required\r\nProxy-Authenticate: Digest realm="p", nonce="n", '
            "algorithm=SHA-512-256",
            "SHA-512-256 is not supported",
        ),
        ('401 Unauthorized\r\nWWW-Authenticate: Digest realm="p", nonce', "unreadable challenge parameters"),
        ("403 Forbidden", "the registrar answered 403 Forbidden; trying again in 5 s"),
        (
            "503 Service Unavailable\r\nRetry-After: 30",
            "answered 503 Service Unavailable; trying again in 30 s",
        ),
        (None, "no answer from the registrar"),
    ],
)
def test_a_registrar_answering_what_cannot_be_used_is_reported_and_nothing_breaks(
    tmp_path: Path, answer: str | None, reported: str
) -> None:
    """A registrar (a socket answering each REGISTER with ``answer``, or never) that cannot be
    registered with: the state says why; the server keeps answering OPTIONS."""
    from appliance.sip.message import SipRequest, parse_message

    class Answering(asyncio.DatagramProtocol):
        """Each datagram: a REGISTER, answered with ``answer`` (or not at all); an OPTIONS' answer."""

        def __init__(self) -> None:
            self.replies: asyncio.Queue[str] = asyncio.Queue()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
            message = parse_message(data)
            if not isinstance(message, SipRequest):
                self.replies.put_nowait(data.decode())
                return
            assert message.method == "REGISTER"
            if answer is not None:
                copied = "".join(
                    f"{n}: {message.get(n)}\r\n" for n in ("Via", "From", "To", "Call-ID", "CSeq")
                )
                reply = f"SIP/2.0 {answer}\r\n{copied}Content-Length: 0\r\n\r\n".encode()
                self.transport.sendto(reply, addr)  # type: ignore[attr-defined]

    async def run() -> tuple[RegistrationStatus, str]:
        loop = asyncio.get_running_loop()
        registrar, peer = await loop.create_datagram_endpoint(Answering, local_addr=("127.0.0.1", 0))
        config = SipParams(
            enabled=True,
            port=0,
            t1_ms=50,
            registrar=f"127.0.0.1:{registrar.get_extra_info('sockname')[1]}",
            register_user=EXTENSION,
            register_password_file=_password_file(tmp_path, PASSWORD),
        )
        try:
            async with _serving(config, until="failing") as (server, registration):
                registrar.sendto(
                    b"OPTIONS sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKx;rport\r\n"
                    b"From: <sip:p@127.0.0.1>;tag=1\r\nTo: <sip:a@127.0.0.1>\r\nCall-ID: o1\r\n"
                    b"CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
                    ("127.0.0.1", server.local_port),
                )
                return registration.status, await asyncio.wait_for(peer.replies.get(), 5)
        finally:
            registrar.close()

    status, options = asyncio.run(run())
    assert status.state == "failing" and reported in status.detail, status
    assert options.startswith("SIP/2.0 200") and f"X-Appliance-Registration: failing {EXTENSION}@" in options
