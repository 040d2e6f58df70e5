"""The SIP TLS listener (sip.tls_port) as a phone system calling in sees it: a request in the same
write as the handshake's end is answered; a caller speaking plain SIP to the TLS port, and a phone system
that does not trust the device's certificate, are each counted and logged with the reason and the fix."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from appliance.config import SipParams
from appliance.sip.server import SipServer
from tests.fixtures.certs import Issued, SiteCa

OPTIONS = (
    "OPTIONS sip:kiosk@127.0.0.1 SIP/2.0\r\n"
    "Via: SIP/2.0/TLS 127.0.0.1:5999;branch=z9hG4bK-tls-1\r\n"
    "From: <sip:pbx@127.0.0.1>;tag=1\r\nTo: <sip:kiosk@127.0.0.1>\r\n"
    "Call-ID: tls-listener-1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[SiteCa, Issued]:
    ca = SiteCa(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("appliance")


@asynccontextmanager
async def _listening(appliance: Issued) -> AsyncIterator[SipServer]:
    config = SipParams(
        enabled=True, port=0, tls=True, tls_port=0, tls_cert_file=appliance.cert, tls_key_file=appliance.key
    )
    server = SipServer(config, lambda call: asyncio.sleep(0))
    await server.start()
    try:
        assert server.tls_port
        yield server
    finally:
        await server.stop()


async def _until(check: object, wait_s: float = 5.0) -> None:
    for _ in range(int(wait_s / 0.05)):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)


def _connect(context: ssl.SSLContext, port: int) -> None:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        pass


def test_a_request_sent_with_the_handshakes_end_is_answered(site: tuple[SiteCa, Issued]) -> None:
    ca, appliance = site

    async def run() -> bytes:
        async with _listening(appliance) as server:
            trusting = ssl.create_default_context(cafile=str(ca.cert))
            reader, writer = await asyncio.open_connection("127.0.0.1", server.tls_port, ssl=trusting)
            writer.write(OPTIONS.encode())
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.close()
            assert server.stats.tls_failed_incoming == 0
            return answer

    assert asyncio.run(run()).startswith(b"SIP/2.0 200"), "OPTIONS over TLS not answered"


def test_plain_sip_to_the_tls_port_is_counted_and_explained(
    site: tuple[SiteCa, Issued], caplog: pytest.LogCaptureFixture
) -> None:
    _, appliance = site

    async def run() -> int:
        async with _listening(appliance) as server:
            _, writer = await asyncio.open_connection("127.0.0.1", server.tls_port)
            writer.write(OPTIONS.encode())
            await _until(lambda: server.stats.tls_failed_incoming)
            writer.close()
            return server.stats.tls_failed_incoming

    with caplog.at_level(logging.WARNING, logger="appliance.sip.server"):
        assert asyncio.run(run()) == 1
    assert "did not speak TLS" in caplog.text and "with transport TLS" in caplog.text, caplog.text


def test_a_phone_system_refusing_the_devices_certificate_is_told_the_fingerprint(
    site: tuple[SiteCa, Issued], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, appliance = site
    other_ca = SiteCa(tmp_path / "other", name="Another CA")

    async def run() -> int:
        async with _listening(appliance) as server:
            wrong = ssl.create_default_context(cafile=str(other_ca.cert))
            # A blocking client, as OpenSSL in a phone system: it sends its alert before closing.
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.to_thread(_connect, wrong, server.tls_port or 0)
            await _until(lambda: server.stats.tls_failed_incoming)
            assert server.tls is not None
            assert server.tls.fingerprint in caplog.text
            return server.stats.tls_failed_incoming

    with caplog.at_level(logging.WARNING, logger="appliance.sip.server"):
        assert asyncio.run(run()) == 1
    assert "refused this device's certificate" in caplog.text and "appliance doctor" in caplog.text


def test_a_connection_from_outside_allow_from_gets_no_handshake(site: tuple[SiteCa, Issued]) -> None:
    ca, appliance = site

    async def run() -> None:
        config = SipParams(
            enabled=True, port=0, tls=True, tls_port=0, tls_cert_file=appliance.cert, tls_key_file=appliance.key,
            allow_from=("10.9.9.0/24",),
        )  # fmt: skip
        server = SipServer(config, lambda call: asyncio.sleep(0))
        await server.start()
        try:
            trusting = ssl.create_default_context(cafile=str(ca.cert))
            with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
                await asyncio.wait_for(asyncio.open_connection("127.0.0.1", server.tls_port, ssl=trusting), 5)
            assert server.stats.tls_failed_incoming == 0  # refused before any handshake: nothing to explain
        finally:
            await server.stop()

    asyncio.run(run())
