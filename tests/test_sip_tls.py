"""SIP over TLS with a real phone system: Kamailio with its TLS module (deploy/kamailio/registrar.cfg,
WITH_TLS) as the registrar and proxy, certificates from a site CA. The appliance registers over TLS
with the CA checked, or with the phone system's fingerprint pinned; a wrong CA and a wrong pin are
refused with the reason, the fix and the fingerprint presented; a call placed through the proxy over
TLS with SRTP required is answered with speech and its keypad digit heard, and a plain-RTP call is
refused with 488."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from appliance.audio.call import call_session_kwargs
from appliance.certificates import fingerprint_of
from appliance.config import SipParams, load_settings
from appliance.engine_set import session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from appliance.sip.call import Call, CallAudio
from bench.sip_register import KamailioRegistrar
from engines.audio import load_audio, resample
from tests.fixtures.baresip import baresip_phone, baresip_said, requires_baresip
from tests.fixtures.capture import TCP, UDP, Capture, loopback_capture, requires_root
from tests.fixtures.certs import Issued, SiteCa, kamailio_tls_config
from tests.test_sip_helpers import free_udp_port
from tests.test_sip_register import _password_file, _serving

QUESTION_WAV = "speech/en/google_audio.wav"  # "how old is the Brooklyn Bridge"

KAMAILIO_TLS = sorted(Path("/usr/lib").glob("*/kamailio/modules/tls.so"))  # x86_64-linux-gnu, aarch64-...
pytestmark = pytest.mark.skipif(
    shutil.which("kamailio") is None or not KAMAILIO_TLS,
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


def _config(pbx: KamailioRegistrar, tmp_path: Path, appliance: Issued, **changes: object) -> SipParams:
    values: dict[str, object] = {
        "enabled": True,
        "port": 0,
        "tls_port": 0,
        "registrar": f"127.0.0.1:{pbx.tls_port}",
        "register_transport": "tls",
        "register_user": EXTENSION,
        "register_password_file": _password_file(tmp_path, PASSWORD),
        "register_min_interval_s": 1.0,
        "tls_cert_file": appliance.cert,
        "tls_key_file": appliance.key,
    }
    return SipParams(**(values | changes))


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


def test_a_phone_system_that_wants_a_client_certificate_gets_the_sites(
    tmp_path: Path, site: tuple[SiteCa, Issued, Issued]
) -> None:
    ca, proxy, appliance = site
    tls_config = kamailio_tls_config(tmp_path / "tls.cfg", proxy, ca.cert, require_client=True)
    strict = KamailioRegistrar(tmp_path, extension=EXTENSION, password=PASSWORD, tls_config=tls_config)
    strict.start()

    async def run(config: SipParams, until: str) -> tuple[str, str]:
        async with _serving(config, until=until) as (_, registration):
            return registration.status.state, registration.status.detail

    try:
        with_cert = asyncio.run(run(_config(strict, tmp_path, appliance, tls_ca_file=ca.cert), "registered"))
        bare = _config(
            strict, tmp_path, appliance, tls_ca_file=ca.cert, tls_cert_file=None, tls_key_file=None
        )
        without = asyncio.run(run(bare, "failing"))
    finally:
        strict.stop()
    assert with_cert[0] == "registered", (with_cert, strict.log[-2000:])
    assert without[0] == "failing" and "sip.tls_cert_file" in without[1], without


def test_the_connection_to_the_registrar_is_kept_alive_for_the_calls_it_brings(
    pbx: KamailioRegistrar, tmp_path: Path, site: tuple[SiteCa, Issued, Issued]
) -> None:
    """Double-CRLF pings (RFC 5626) keep the one TLS connection open past the idle timeout (1 s here)."""
    ca, _, appliance = site
    config = _config(pbx, tmp_path, appliance, tls_ca_file=ca.cert, tcp_idle_timeout_s=1.0)

    async def run() -> tuple[bool, bool, str]:
        async with _serving(config) as (server, registration):
            first = server.transport.tcp.get(registration.registrar)
            await asyncio.sleep(4.0)
            still = server.transport.tcp.get(registration.registrar)
            return first is not None and still is first, bool(still and still.open), registration.status.state

    same, open_, state = asyncio.run(run())
    assert same and open_ and state == "registered", (same, open_, state, pbx.log[-2000:])


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


def _question_with_silence(data_dir: Path, path: Path) -> Path:
    """The recorded question, then 10 s of silence (baresip sends what the file holds, then nothing)."""
    audio, rate = load_audio(data_dir / QUESTION_WAV)
    audio_8k = resample(audio, rate, 8000)
    audio_8k = audio_8k / float(np.abs(audio_8k).max()) * 0.5
    sf.write(
        path,
        np.concatenate([np.zeros(4000), audio_8k, np.zeros(8000 * 10)]).astype(np.float32),
        8000,
        subtype="PCM_16",
    )
    return path


@requires_baresip
@requires_root
def test_a_call_over_tls_with_srtp_required_is_answered_and_its_key_heard(
    pbx: KamailioRegistrar,
    tmp_path: Path,
    data_dir: Path,
    site: tuple[SiteCa, Issued, Issued],
    real_engines: SessionEngines,
) -> None:
    """baresip calls the extension through Kamailio over TLS with SRTP required; the appliance (SRTP
    required too) answers the spoken question and hears the digit 5. The same phone with plain RTP is
    refused with 488."""
    ca, _, appliance = site
    config = _config(pbx, tmp_path, appliance, tls_ca_file=ca.cert, media_encryption="srtp")
    microphone = _question_with_silence(data_dir, tmp_path / "question.wav")
    sessions: list[Session] = []
    calls: list[CallAudio] = []

    async def answer(call: CallAudio) -> None:
        calls.append(call)
        session = Session(
            engines=real_engines, config=session_config(load_settings(None)), **call_session_kwargs(call)
        )
        sessions.append(session)
        await session.run(max_turns=1)
        await call.drain()
        await asyncio.sleep(3.0)  # the key pressed once the turn is over arrives
        await call.hangup()

    dial = f"sip:{EXTENSION}@127.0.0.1:{pbx.tls_port};transport=tls"
    tls_ports: set[int] = set()

    async def run(folder: Path, *, srtp: bool, wait_s: float) -> str:
        folder.mkdir()
        console = free_udp_port()
        async with _serving(config, answer) as (server, registration):
            assert registration.status.state == "registered", registration.status.detail
            tls_ports.add(server.tls_port or 0)
            with baresip_phone(
                folder, port=free_udp_port(), microphone=microphone, dial=dial, tls=True, ca_file=ca.cert,
                srtp=srtp, console_port=console,
            ) as log:  # fmt: skip
                deadline = time.monotonic() + wait_s
                pressed = False
                while time.monotonic() < deadline and not (
                    calls and calls[-1].ended if srtp else "488" in log.read_text(errors="replace")
                ):
                    await asyncio.sleep(0.2)
                    if srtp and not pressed and sessions and sessions[-1].turns.traces:
                        _press(console, "/sndcode 5\n")
                        pressed = True
                stats = server.stats
                assert stats.srtp_rejected == 0, stats
            return baresip_said(log)

    plain = asyncio.run(run(tmp_path / "plain", srtp=False, wait_s=20))
    assert "488" in plain, plain[-3000:]
    assert not calls
    with loopback_capture() as wire:
        said = asyncio.run(run(tmp_path / "srtp", srtp=True, wait_s=150))
    assert calls, said[-3000:] + pbx.log[-3000:]
    (call,) = calls
    assert isinstance(call, Call) and call.stream.params.srtp is not None
    _nothing_readable(wire, signalling={pbx.tls_port, *tls_ports}, media={call.stream.local_port})
    assert call.stream.stats.packets_received > 100 and call.stream.stats.srtp_rejected == 0
    (session,) = sessions
    (trace,) = session.turns.traces
    assert "brooklyn" in trace.transcript.lower(), trace.transcript
    assert trace.played_reply.strip(), trace
    assert "5" in call.stream.stats.digits, (call.stream.stats, said[-2000:])


def _nothing_readable(wire: Capture, *, signalling: set[int], media: set[int]) -> None:
    """On the wire during the call: SIP only inside TLS, the audio only inside SRTP (plain PCMU silence
    is 160 bytes of 0xFF; the question's lead-in and the caller's 10 s of silence would show it)."""
    sip = wire.between(signalling, TCP)
    rtp = wire.between(media, UDP)
    assert len(sip) > 10 and len(rtp) > 200, (len(sip), len(rtp))
    for packet in sip:
        assert b"SIP/2.0" not in packet.payload and b"a=crypto" not in packet.payload, packet
    assert all(b"\xff" * 40 not in packet.payload for packet in rtp)
    assert not any(PASSWORD.encode() in packet.payload for packet in wire.packets)


def _press(port: int, keys: str) -> None:
    """A command typed on baresip's console (``/sndcode 5``: the key 5 pressed and released, sent as
    RFC 4733 events inside the call's SRTP)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(keys.encode())
        time.sleep(0.5)
