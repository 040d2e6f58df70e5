"""The admin page on the wire: a LAN address gets HTTPS with the device's own certificate (made once,
kept, its fingerprint shown) or the site's; loopback stays plain; plain HTTP on a LAN only when the site
says so. Over a recording relay a login over HTTPS leaves no password or cookie readable (over plain
HTTP, the same relay reads both); headless Chromium logs in trusting exactly the device's key."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from appliance.admin.app import create_app
from appliance.admin.params import AdminParams
from appliance.admin.tls import AdminTls, admin_tls, fingerprint_of, spki_pin
from appliance.config import ConfigError, load_settings
from tests.fixtures.admin import ADMIN_PASSWORD, ADMIN_USER, AdminEnv, mark_engines_ready
from tests.test_admin_browser import CHROMIUM, CHROMIUM_ARGS, ServerThread, playwright_api

LAN = "192.0.2.10"  # an address of the documentation range: never bound here, only named


def test_a_lan_address_gets_the_devices_certificate_made_once(tmp_path: Path) -> None:
    admin = AdminParams(bind_host=LAN, tls_dir=tmp_path / "tls")
    first = admin_tls(admin, "kiosk-07")
    assert first.enabled and first.source == "device" and first.warning is None
    assert first.key is not None and stat.S_IMODE(first.key.stat().st_mode) == 0o600
    assert first.cert is not None
    cert = x509.load_pem_x509_certificate(first.cert.read_bytes())
    assert cert.subject.rfc4514_string() == "CN=kiosk-07"
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert LAN in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    assert "kiosk-07" in names.get_values_for_type(x509.DNSName)
    assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    again = admin_tls(admin, "kiosk-07")
    assert again.fingerprint == first.fingerprint and first.fingerprint.startswith("sha256:")
    assert len(first.fingerprint.split(":")) == 33  # "sha256" and 32 bytes


def test_loopback_is_plain_and_a_plain_lan_page_is_said_loudly(tmp_path: Path) -> None:
    assert not admin_tls(AdminParams(tls_dir=tmp_path), "k").enabled  # 127.0.0.1: nothing on a network
    plain = admin_tls(AdminParams(bind_host=LAN, allow_plain_http=True, tls_dir=tmp_path), "k")
    assert not plain.enabled and plain.warning is not None and "readable" in plain.warning
    assert not list(tmp_path.iterdir())  # no certificate made for a page that will not use it


def test_the_sites_certificate_is_used_and_a_lone_half_is_refused(tmp_path: Path) -> None:
    made = admin_tls(AdminParams(bind_host=LAN, tls_dir=tmp_path / "made"), "site-ca")
    assert made.cert is not None and made.key is not None
    site = admin_tls(AdminParams(tls_cert_file=made.cert, tls_key_file=made.key, tls_dir=tmp_path), "k")
    assert site.source == "site" and site.fingerprint == fingerprint_of(made.cert)
    config = tmp_path / "site.toml"
    config.write_text(f'[admin]\ntls_cert_file = "{made.cert}"\n')
    with pytest.raises(ConfigError, match="tls_cert_file and tls_key_file go together"):
        load_settings(config)


@pytest.fixture
def device_tls(tmp_path: Path) -> AdminTls:
    """The device's certificate for 127.0.0.1 (named in it), as on a LAN address."""
    return admin_tls(AdminParams(bind_host=LAN, tls_dir=tmp_path / "tls"), "kiosk-07")


@pytest.fixture
def https_server(admin_env: AdminEnv, device_tls: AdminTls) -> Iterator[ServerThread]:
    mark_engines_ready(admin_env.registry)
    app = create_app(admin_env.backend, admin_env.settings, users=admin_env.users, tls=device_tls)
    admin_env.backend.certificate = device_tls.fingerprint
    with ServerThread(admin_env, app=app, tls=device_tls) as running:
        yield running


def _trusting(tls: AdminTls) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls.cert))
    return context


def test_https_with_the_device_certificate_and_a_secure_cookie(
    https_server: ServerThread, device_tls: AdminTls
) -> None:
    with httpx.Client(base_url=https_server.base_url, verify=_trusting(device_tls)) as client:
        assert client.get("/healthz").status_code == 200
        login = client.post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
        assert login.status_code == 200
        cookie = login.headers["set-cookie"].lower()
        assert "secure" in cookie and "httponly" in cookie
        assert client.get("/api/status").json()["certificate"] == device_tls.fingerprint
    old = _trusting(device_tls)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # this client would speak TLS 1.1: the refusal is the server's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.minimum_version = ssl.TLSVersion.TLSv1
    with pytest.raises((httpx.ConnectError, ssl.SSLError)):
        httpx.get(f"{https_server.base_url}/healthz", verify=old)
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets no page
        httpx.get(https_server.base_url.replace("https", "http") + "/healthz", timeout=5)


class RecordingRelay:
    """A TCP relay between a client and the page that keeps every byte it carries: what anyone on the
    wire would see."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                with self._lock:
                    self.seen += chunk
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            sink.close()

    def close(self) -> None:
        self.listener.close()


def _log_in_through(relay: RecordingRelay, scheme: str, verify: ssl.SSLContext | bool) -> str:
    with httpx.Client(base_url=f"{scheme}://127.0.0.1:{relay.port}", verify=verify) as client:
        login = client.post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
        assert login.status_code == 200, login.text
        assert client.get("/api/status").status_code == 200
        return str(login.json()["csrf_token"])


def test_a_login_over_https_leaves_nothing_readable_on_the_wire(
    admin_env: AdminEnv, https_server: ServerThread, device_tls: AdminTls
) -> None:
    relay = RecordingRelay(int(https_server.base_url.rsplit(":", 1)[1]))
    try:
        token = _log_in_through(relay, "https", _trusting(device_tls))
    finally:
        relay.close()
    seen = bytes(relay.seen)
    assert len(seen) > 1000  # the relay carried the exchange
    for secret in (ADMIN_PASSWORD, token, ADMIN_USER, "/api/login", "Set-Cookie"):
        assert secret.encode() not in seen, secret
    # The same relay over plain HTTP reads them all: the capture would have found them.
    with ServerThread(admin_env) as plain:
        relay = RecordingRelay(int(plain.base_url.rsplit(":", 1)[1]))
        try:
            token = _log_in_through(relay, "http", False)
        finally:
            relay.close()
    assert ADMIN_PASSWORD.encode() in relay.seen and token.encode() in relay.seen


def test_chromium_logs_in_over_https_trusting_the_devices_key(
    https_server: ServerThread, device_tls: AdminTls
) -> None:
    assert device_tls.cert is not None
    pin = spki_pin(device_tls.cert)  # what a technician's browser is told to trust: this key, no other
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, f"--ignore-certificate-errors-spki-list={pin}"],
        )
        try:
            page = browser.new_page()
            page.goto(f"{https_server.base_url}/login")
            page.fill("#username", ADMIN_USER)
            page.fill("#password", ADMIN_PASSWORD)
            page.click("#login-button")
            page.wait_for_url(f"{https_server.base_url}/")
            page.wait_for_selector("#certificate:has-text('certificate sha256:')")
            assert device_tls.fingerprint in page.inner_text("footer")
            cookies = page.context.cookies()
            assert cookies and all(c["secure"] for c in cookies)
        finally:
            browser.close()
