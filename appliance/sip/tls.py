"""SIP over TLS (RFC 3261 section 26, RFC 5630): the contexts of the listener and of the connection to the
phone system, and what a failed handshake tells the technician.

The listener presents ``sip.tls_cert_file`` or the device's own certificate. The phone system's
certificate is checked against ``sip.tls_ca_file`` (its address among the certificate's names), or its
fingerprint against ``sip.tls_peer_fingerprint``; the site's certificate, when given, is presented to it as
a client certificate. TLS 1.2 or newer only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.certificates import TlsSetupError, fingerprint_of, fingerprint_of_der
from appliance.sip.params import SipParams

Address = tuple[str, int]
HANDSHAKE_TIMEOUT_S = 10.0


class TlsFailed(OSError):
    """A connection to the phone system over TLS failed; the message has the reason and the fix."""


class TlsPeerRefused(OSError):
    """The phone system's certificate is not the one this device was told to trust."""


@dataclass(frozen=True)
class SipTls:
    client: ssl.SSLContext  # towards the phone system
    server: ssl.SSLContext | None = None  # the listener's (None: no certificate, connecting out only)
    pin: str = ""  # the phone system's fingerprint when pinned
    fingerprint: str = ""  # the certificate this device presents


def _context(purpose: int) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def sip_tls(config: SipParams, device_cert: Callable[[], tuple[Path, Path]] | None = None) -> SipTls:
    """The contexts for these settings; ``device_cert`` makes or finds the device's own certificate, for
    a listener without ``sip.tls_cert_file``. TlsSetupError names what is wrong and the fix."""
    cert_key: tuple[Path, Path] | None = None
    if config.tls_cert_file is not None and config.tls_key_file is not None:
        cert_key = config.tls_cert_file, config.tls_key_file
    elif device_cert is not None:
        cert_key = device_cert()
    client = _context(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if config.tls_ca_file is not None:
            client.load_verify_locations(cafile=str(config.tls_ca_file))
        elif config.tls_peer_fingerprint:
            client.check_hostname = False
            client.verify_mode = ssl.CERT_NONE  # the fingerprint is compared once connected
        else:
            client.load_default_certs()
        if config.tls_cert_file is not None and config.tls_key_file is not None:
            client.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        server = None
        if cert_key is not None:
            server = _context(ssl.PROTOCOL_TLS_SERVER)
            server.load_cert_chain(*cert_key)
    except (OSError, ValueError) as err:
        raise TlsSetupError(
            f"SIP over TLS cannot use its certificates: {err} (fix: sip.tls_cert_file and sip.tls_key_file "
            "name a PEM certificate and its key, sip.tls_ca_file the PEM CA certificates)"
        ) from err
    return SipTls(
        client,
        server,
        pin=config.tls_peer_fingerprint,
        fingerprint=fingerprint_of(cert_key[0]) if cert_key is not None else "",
    )


def check_pin(tls: SipTls, transport: asyncio.Transport, address: Address) -> None:
    """With a pinned fingerprint, refuse a connection whose certificate is another."""
    if not tls.pin:
        return
    ssl_object = transport.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    presented = fingerprint_of_der(der) if der else "no certificate"
    if presented != tls.pin:
        transport.abort()
        raise TlsPeerRefused(
            f"the phone system at {address[0]}:{address[1]} presented the certificate {presented}, not the "
            f"one pinned in sip.tls_peer_fingerprint ({tls.pin}); fix: if the phone system's certificate "
            "was renewed, pin the new fingerprint after checking it with the site's IT"
        )


async def presented_fingerprint(address: Address) -> str:
    """The fingerprint of the certificate at ``address``, read without trusting it (for the log of a
    refused one: what to compare with the site's IT, and what to pin)."""
    probe = _context(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(*address, ssl=probe), timeout=HANDSHAKE_TIMEOUT_S
        )
    except (OSError, asyncio.TimeoutError):
        return "unknown"
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return fingerprint_of_der(der) if der else "unknown"
    finally:
        writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), HANDSHAKE_TIMEOUT_S)


def explain(err: OSError, address: Address, presented: str) -> str:
    """A failed handshake with the phone system, with the reason and the fix."""
    where = f"{address[0]}:{address[1]}"
    if isinstance(err, TlsPeerRefused):
        return str(err)
    if isinstance(err, ssl.SSLCertVerificationError):
        return (
            f"TLS to the phone system at {where} refused its certificate ({err.verify_message}; it presented "
            f"{presented}); fix: set sip.tls_ca_file to the CA that signed it, with {address[0]} among its "
            "names, or pin it with sip.tls_peer_fingerprint once the site's IT confirms that fingerprint"
        )
    if isinstance(err, ssl.SSLError):
        return (
            f"TLS to the phone system at {where} failed ({err.reason or err}); fix: the phone system must "
            "offer TLS 1.2 or newer on that port, and want no client certificate this device lacks "
            "(sip.tls_cert_file)"
        )
    return f"cannot connect to the phone system at {where} over TLS: {err.strerror or err}"
