"""The TLS listener's side of a handshake: a phone system calling in over TLS (sip.tls_port).

The listener accepts plain TCP and runs the handshake itself (``loop.start_tls``) so that a handshake that
fails is seen: asyncio's own TLS servers drop those silently. Each failure is counted and logged with the
reason and the fix (a caller speaking plain SIP to the TLS port, a phone system that does not trust this
device's certificate, no handshake in time).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from appliance.sip.params import SipParams
from appliance.sip.tcp import SipTcpConnection, TcpLimits
from appliance.sip.tls import HANDSHAKE_TIMEOUT_S, Address, SipTls

log = logging.getLogger(__name__)

_REFUSED_OUR_CERTIFICATE = (
    "UNKNOWN_CA",
    "BAD_CERTIFICATE",
    "CERTIFICATE_UNKNOWN",
    "UNSUPPORTED_CERTIFICATE",
    "ACCESS_DENIED",
)
_TRUST_FIX = (
    "fix: give the phone system the device's CA file or this fingerprint (appliance doctor shows it), or "
    "set sip.tls_cert_file to a certificate from the site's CA"
)
_NOT_TLS = ("HTTP_REQUEST", "WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE")


def explain_incoming(err: BaseException, peer: Address, fingerprint: str) -> str:
    """A failed handshake of a connection to our TLS listener, with the reason and the fix."""
    where = f"{peer[0]}:{peer[1]}"
    reason = str(getattr(err, "reason", "") or "").upper()
    if isinstance(err, (asyncio.TimeoutError, TimeoutError)):
        return (
            f"a connection from {where} to the SIP TLS port made no TLS handshake within "
            f"{HANDSHAKE_TIMEOUT_S:.0f} s; fix: the phone system sends to this port with transport TLS"
        )
    if any(code in reason for code in _NOT_TLS):
        return (
            f"a connection from {where} to the SIP TLS port did not speak TLS ({reason.lower()}); fix: the "
            "phone system sends to this port with transport TLS, or to sip.port without it"
        )
    if any(code in reason for code in _REFUSED_OUR_CERTIFICATE):
        return (
            f"the phone system at {where} refused this device's certificate ({fingerprint or 'none'}; "
            f"{reason.lower()}); {_TRUST_FIX}"
        )
    if isinstance(err, ssl.SSLError):
        return (
            f"TLS from {where} failed ({reason.lower() or err}); fix: the phone system must offer TLS 1.2 or "
            "newer"
        )
    return (
        f"the connection from {where} to the SIP TLS port closed during the handshake, most often because "
        f"the phone system does not trust this device's certificate ({fingerprint or 'none'}); {_TRUST_FIX}"
    )


class TlsAccept(asyncio.Protocol):
    """One accepted connection: the handshake, then a SipTcpConnection over the TLS transport.

    Bytes the TLS layer hands on before the connection is made are kept and given to it in order."""

    def __init__(
        self,
        context: ssl.SSLContext,
        make_connection: Callable[[], SipTcpConnection],
        limits: TcpLimits,
        on_failed: Callable[[str], None],
        fingerprint: str = "",
    ) -> None:
        self._context = context
        self._make_connection = make_connection
        self._limits = limits
        self._on_failed = on_failed
        self._fingerprint = fingerprint
        self._connection: SipTcpConnection | None = None
        self._early: list[bytes] = []
        self._lost = False
        self._handshake: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference

    def connection_made(self, tcp: asyncio.BaseTransport) -> None:
        host, port = tcp.get_extra_info("peername")[:2]
        peer = (str(host), int(port))
        if not self._limits.allowed(peer[0]):  # refused before a handshake is spent on it
            tcp.abort()  # type: ignore[attr-defined]
            return
        self._handshake = asyncio.get_running_loop().create_task(self._shake(tcp, peer))

    async def _shake(self, tcp: asyncio.BaseTransport, peer: Address) -> None:
        try:
            wrapped = await asyncio.get_running_loop().start_tls(
                tcp,
                self,
                self._context,
                server_side=True,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
            )
        except (OSError, asyncio.TimeoutError, EOFError) as err:
            self._on_failed(explain_incoming(err, peer, self._fingerprint))
            return
        if wrapped is None or self._lost:
            return
        self._connection = self._make_connection()
        self._connection.connection_made(wrapped)
        early, self._early = self._early, []
        for data in early:
            self._connection.data_received(data)

    def data_received(self, data: bytes) -> None:
        if self._connection is None:
            self._early.append(data)
        else:
            self._connection.data_received(data)

    def eof_received(self) -> bool | None:
        return None  # close; a SIP connection has nothing to send after the caller's end

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._connection is not None:
            self._connection.connection_lost(exc)


async def listen_tls(
    tls: SipTls,
    config: SipParams,
    limits: TcpLimits,
    make_connection: Callable[[], SipTcpConnection],
    on_failed: Callable[[str], None],
) -> asyncio.Server | None:
    """The TLS listener on ``sip.tls_port``; None (and the reason logged) when it cannot be."""
    if tls.server is None:
        log.error(
            "SIP over TLS has no certificate to present: calls over TLS are not taken (fix: set "
            "sip.tls_cert_file and sip.tls_key_file)"
        )
        return None
    context, fingerprint = tls.server, tls.fingerprint
    try:
        return await asyncio.get_running_loop().create_server(
            lambda: TlsAccept(context, make_connection, limits, on_failed, fingerprint),
            config.bind_host,
            config.tls_port,
        )
    except OSError as err:
        log.error(
            "SIP over TLS cannot listen on port %d (%s): calls over TLS are not taken (fix: free the "
            "port, or set sip.tls_port)",
            config.tls_port,
            err,
        )
        return None
