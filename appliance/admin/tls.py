"""The admin page on the wire: HTTPS with the site's certificate, or the device's own.

On a LAN address the page is served over TLS 1.2+: with ``admin.tls_cert_file``/``tls_key_file`` when the
site gives its own certificate, else with a device certificate made once and kept in ``admin.tls_dir``
(ECDSA P-256, the device ID as its name, the addresses it answers on as subject alternative names). Its
fingerprint (sha256 of the certificate) is what a technician compares: ``appliance doctor``, the
provisioning report and the page's footer show it. On loopback nothing crosses a network, so plain HTTP
stays; a LAN address without TLS only with ``admin.allow_plain_http``, said loudly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from appliance.admin.params import AdminParams
from appliance.certificates import (
    DEVICE_CERT,
    TlsSetupError,
    device_certificate,
    fingerprint_of,
    is_loopback,
    spki_pin,
)

__all__ = ["AdminTls", "TlsSetupError", "admin_tls", "fingerprint_of", "is_loopback", "spki_pin"]

PLAIN_ON_LAN = (
    "the admin page is served over plain HTTP on {host}: passwords and session cookies cross the network "
    "readable (admin.allow_plain_http = true; fix: remove it, and the device's certificate is used)"
)


@dataclass(frozen=True)
class AdminTls:
    """How the page is served: ``cert``/``key`` None for plain HTTP."""

    cert: Path | None = None
    key: Path | None = None
    fingerprint: str = ""  # "sha256:AB:CD:..." of the certificate
    source: str = "none"  # "site", "device", "none" (loopback), "plain" (allow_plain_http on a LAN)
    warning: str | None = None

    @property
    def enabled(self) -> bool:
        return self.cert is not None

    @property
    def scheme(self) -> str:
        return "https" if self.enabled else "http"


def admin_tls(admin: AdminParams, device_id: str, *, make: bool = True) -> AdminTls:
    """How the admin page is served with these settings, making the device certificate when it is due
    (``make``; else a missing one is reported as not made yet: source "device", no fingerprint)."""
    if admin.tls_cert_file is not None and admin.tls_key_file is not None:
        cert, key = admin.tls_cert_file, admin.tls_key_file
        return AdminTls(cert, key, fingerprint_of(cert), "site")
    if is_loopback(admin.bind_host):
        return AdminTls()
    if admin.allow_plain_http:
        return AdminTls(source="plain", warning=PLAIN_ON_LAN.format(host=admin.bind_host))
    if not make and not (admin.tls_dir / DEVICE_CERT).is_file():
        return AdminTls(source="device", warning="the device certificate is made at the daemon's first start")
    cert, key = device_certificate(admin.tls_dir, device_id, admin.bind_host)
    return AdminTls(cert, key, fingerprint_of(cert), "device")
