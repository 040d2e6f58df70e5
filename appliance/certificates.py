"""The device's own certificate and the fingerprints a technician compares.

(cryptography is imported where a certificate is made or read: the page and its checks load without it.)

One certificate per device (ECDSA P-256, the device ID as its name, the addresses it answers on as
subject alternative names), made once and kept with the device's state: the admin page serves it where the
site gives none, and the SIP listener over TLS presents it. Its fingerprint (sha256 of the certificate) is
what a technician reads on ``appliance doctor``, the provisioning report and the page's footer.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from engines.files import atomic_write

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

log = logging.getLogger(__name__)

DEVICE_CERT = "admin-cert.pem"  # the name it has had since the admin page was its only user
DEVICE_KEY = "admin-key.pem"
VALID_DAYS = 3650  # a device outlives a year; the fingerprint, not the date, is what is checked


class TlsSetupError(OSError):
    """A certificate cannot be made or read as configured; the message names the fix."""


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(host).is_loopback


def device_certificate(folder: Path, device_id: str, bind_host: str) -> tuple[Path, Path]:
    """The device's certificate and key in ``folder``, made on first use (the key mode 0600) and kept:
    the fingerprint a technician noted stays true across restarts."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    cert, key = folder / DEVICE_CERT, folder / DEVICE_KEY
    if cert.is_file() and key.is_file():
        return cert, key
    try:
        folder.mkdir(parents=True, exist_ok=True)
        private = ec.generate_private_key(ec.SECP256R1())
        atomic_write(
            key,
            private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            mode=0o600,
        )
        atomic_write(
            cert, _self_signed(private, device_id, bind_host).public_bytes(serialization.Encoding.PEM)
        )
    except OSError as err:
        raise TlsSetupError(
            f"the device certificate cannot be made in {folder}: {err.strerror or err} "
            "(fix: make admin.tls_dir writable by the service, or give the site's certificate: "
            "admin.tls_cert_file and admin.tls_key_file, sip.tls_cert_file and sip.tls_key_file)"
        ) from err
    log.info("made the device certificate %s (%s)", cert, fingerprint_of(cert))
    return cert, key


def _self_signed(private: ec.EllipticCurvePrivateKey, device_id: str, bind_host: str) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, device_id or socket.gethostname())])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_names(device_id, bind_host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(private, hashes.SHA256())
    )


def _names(device_id: str, bind_host: str) -> list[x509.GeneralName]:
    """The names a browser may reach the device by: its ID and host name, its address."""
    from cryptography import x509

    names: list[x509.GeneralName] = [x509.DNSName(n) for n in {device_id, socket.gethostname()} if _dns_ok(n)]
    address = ipaddress.ip_address(bind_host)
    if not address.is_unspecified:
        names.append(x509.IPAddress(address))
    names += [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    return names


def _dns_ok(name: str) -> bool:
    return bool(name) and all(part.replace("-", "").isalnum() for part in name.split("."))


def fingerprint_of(cert: Path) -> str:
    """sha256 of the certificate (DER), as browsers show it: "sha256:AB:CD:..."."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    except (OSError, ValueError) as err:
        raise TlsSetupError(
            f"the certificate {cert} cannot be read: {err} (fix: the setting names a PEM certificate; "
            "remove a damaged device certificate and it is made again)"
        ) from err
    return fingerprint_of_der(der)


def fingerprint_of_der(der: bytes) -> str:
    digest = hashlib.sha256(der).hexdigest().upper()
    return "sha256:" + ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def normal_fingerprint(text: str) -> str:
    """A fingerprint as a technician may type it ("sha256:ab:cd..", "AB CD ..", bare hex) in our form;
    ValueError when it is not 32 bytes of hex."""
    body = text.strip()
    if body.lower().startswith("sha256:"):
        body = body[7:]
    digits = "".join(c for c in body if c not in ": ").upper()
    if len(digits) != 64 or any(c not in "0123456789ABCDEF" for c in digits):
        raise ValueError(f"{text[:100]!r} is not a sha256 fingerprint (64 hex digits, as sha256:AB:CD:...)")
    return "sha256:" + ":".join(digits[i : i + 2] for i in range(0, 64, 2))


def spki_pin(cert: Path) -> str:
    """base64 sha256 of the certificate's public key: what a client pins (Chromium's
    --ignore-certificate-errors-spki-list, curl's --pinnedpubkey)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    public = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    spki = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode("ascii")
