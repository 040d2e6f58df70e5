"""Registration with the site's phone system as an extension (RFC 3261 section 10): REGISTER with
digest authentication, renewed at 80% of the lifetime granted, retried with back-off when it fails,
removed (Expires: 0) when the daemon stops. The INVITEs the registrar then sends to the extension are
answered like any other call (``sip.registrar`` is allowed as a peer). Over TCP
(``sip.register_transport``) each transaction first makes sure a connection to the registrar is open
(the server's ``connect``), is sent once (a reliable transport has no retransmissions) and times out
after 64*T1 as over UDP.

The password is read from ``sip.register_password_file`` and goes nowhere but into the digest: not
into logs, traces, the admin page or /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from appliance.sip.client import ClientTransactions, NoAnswer
from appliance.sip.digest import ChallengeError, answer
from appliance.sip.labels import RegistrationState
from appliance.sip.message import SipRequest, SipResponse
from appliance.sip.params import SipParams
from engines.setting_files import SECRET, read_setting_text

log = logging.getLogger(__name__)

Address = tuple[str, int]
RETRY_FIRST_S = 5.0
RENEW_AT = 0.8  # of the lifetime granted
MAX_GRANTED_S = 86400 * 7


def bounded_seconds(text: str, *, low: float, high: float) -> float | None:
    """A registrar's number of seconds (Expires, Retry-After, expires=) clamped to [low, high]; None
    when it is not a plain number (never int() of an unbounded string)."""
    text = text.strip()
    if not text.isdigit() or not text.isascii():
        return None
    if len(text) > 10:
        return high
    return min(high, max(low, float(int(text))))


UNREGISTER_WAIT_S = 2.0


class RegistrationFailed(Exception):
    def __init__(self, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class RegistrationStatus:
    state: RegistrationState = RegistrationState.OFF
    detail: str = ""  # why it fails, or what it waits for
    registrar: str = ""
    user: str = ""
    since: float | None = None  # Unix time of the last change of state
    expires_s: int | None = None  # granted by the registrar
    last_register_ms: float | None = None  # the last REGISTER transaction, challenge included
    renewals: int = 0
    failures: int = 0
    auth: str = ""  # how the registrar was answered: "digest SHA-256", "digest MD5", "none"


def read_password(path: Path | None) -> str | None:
    """The password in ``path`` (its first line), or None without a file."""
    if path is None:
        return None
    text = read_setting_text(path, SECRET)
    return text.splitlines()[0] if text.strip() else ""


def local_address_towards(peer: Address) -> str:
    """The address of this machine's interface that reaches ``peer`` (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in peer[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(peer)
        return str(probe.getsockname()[0])


@dataclass
class Registration:
    """One extension's registration over the SIP server's socket (``send``)."""

    config: SipParams
    send: Callable[[bytes, Address], None]
    local_port: int
    password: str | None = None
    connect: Callable[[Address], Awaitable[None]] | None = None  # opens a TCP connection, when none is open
    connected: Callable[[Address], bool] | None = None  # whether that connection is still open
    clock: Callable[[], float] = time.time
    status: RegistrationStatus = field(init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    realm: str | None = field(default=None, init=False)  # the registrar's, once it has challenged us

    def __post_init__(self) -> None:
        self.registrar = self.config.registrar_address
        self.user = self.config.register_user
        self.auth_user = self.config.register_auth_user or self.user
        self.domain = self.config.register_domain or self.registrar[0]
        advertised = self.config.advertise_host or self.config.bind_host
        self.local_host = (
            local_address_towards(self.registrar) if advertised in ("0.0.0.0", "::") else advertised
        )
        self.over_tcp = self.config.register_transport in ("tcp", "tls")  # over a connection
        self.call_id = f"{secrets.token_hex(10)}@{self.local_host}"
        self.from_tag = secrets.token_hex(6)
        self.cseq = 0
        self.status = RegistrationStatus(registrar=self.config.registrar, user=self.user)
        self._client = ClientTransactions(self.send, t1_s=self.config.t1_s)

    @property
    def aor(self) -> str:
        return f"sip:{self.user}@{self.domain}"

    @property
    def contact(self) -> str:
        name = self.config.register_transport
        param = "" if name == "udp" else f";transport={name}"
        return f"<sip:{self.user}@{self.local_host}:{self.local_port}{param}>"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._keep_registered(), name="sip-register")

    async def stop(self) -> None:
        """Stop renewing; remove the binding when there is one (waits at most UNREGISTER_WAIT_S)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.status.state == RegistrationState.REGISTERED:
            with contextlib.suppress(RegistrationFailed, asyncio.TimeoutError):
                await asyncio.wait_for(self.register(0), UNREGISTER_WAIT_S)
            log.info("SIP: %s unregistered from %s", self.aor, self.config.registrar)
        self._client.stop()
        self._set(RegistrationState.OFF, "stopped")

    def on_response(self, response: SipResponse) -> bool:
        """A response to one of our REGISTERs (True), or not ours (False)."""
        return self._client.on_response(response, self.registrar)

    async def _keep_registered(self) -> None:
        backoff = RETRY_FIRST_S
        retry_max = self.config.register_retry_max_s
        while True:
            self._set(RegistrationState.REGISTERING, "")
            try:
                granted = await self.register(self.config.register_expires_s)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # whatever the registrar sent, registration goes on and says why
                reason = (
                    err.reason if isinstance(err, RegistrationFailed) else f"unexpected error: {err!r:.200}"
                )
                asked = err.retry_after_s if isinstance(err, RegistrationFailed) else None
                wait = min(asked or backoff, retry_max)
                self.status = replace(self.status, failures=self.status.failures + 1)
                self._set(RegistrationState.FAILING, f"{reason}; trying again in {wait:.0f} s")
                log.error(
                    "SIP: registration of %s with %s failed: %s; trying again in %.0f s",
                    self.aor,
                    self.config.registrar,
                    reason,
                    wait,
                )
                await asyncio.sleep(wait)
                backoff = min(backoff * 2, retry_max)
                continue
            backoff = RETRY_FIRST_S
            least = self.config.register_min_interval_s
            renew_in = max(least, granted * RENEW_AT)
            if granted * RENEW_AT < least:
                log.warning(
                    "SIP: the registrar %s granted %s only %d s; renewing every %.0f s "
                    "(sip.register_min_interval_s) instead",
                    self.config.registrar,
                    self.aor,
                    granted,
                    least,
                )
            self._set(RegistrationState.REGISTERED, f"renewed in {renew_in:.0f} s", expires_s=granted)
            await asyncio.sleep(renew_in)
            self.status = replace(self.status, renewals=self.status.renewals + 1)

    async def register(self, expires_s: int) -> int:
        """One REGISTER (answering a challenge once); the lifetime granted. Raises RegistrationFailed."""
        started = time.monotonic()
        credentials: tuple[str, str] | None = None
        self.status = replace(self.status, auth="none")
        for _ in range(3):  # a challenge, and a second one when the first nonce went stale
            response = await self._transaction(self._request(expires_s, credentials))
            if 200 <= response.status < 300:
                self.status = replace(
                    self.status, last_register_ms=round((time.monotonic() - started) * 1000, 1)
                )
                return self._granted(response, expires_s)
            if response.status in (401, 407):
                credentials = self._answer(response, stale_only=credentials is not None)
                continue
            least = bounded_seconds(response.get("Min-Expires") or "", low=1, high=MAX_GRANTED_S)
            if response.status == 423 and least is not None:
                expires_s = int(least)
                continue
            retry = (response.get("Retry-After") or "").split(";")[0]
            raise RegistrationFailed(
                f"the registrar answered {response.status} {response.reason[:80]}",
                retry_after_s=bounded_seconds(retry, low=1, high=self.config.register_retry_max_s),
            )
        raise RegistrationFailed("the registrar kept challenging the answers")

    def _answer(self, response: SipResponse, *, stale_only: bool) -> tuple[str, str]:
        if self.password is None:
            raise RegistrationFailed("the registrar asks for a password: set sip.register_password_file")
        try:
            challenge, credentials = answer(
                response, method="REGISTER", uri=self._uri, username=self.auth_user, password=self.password
            )
        except ChallengeError as err:
            raise RegistrationFailed(f"cannot answer the registrar's challenge: {err}") from err
        if stale_only and not challenge.stale:
            raise RegistrationFailed(
                f"the registrar refused the password of {self.auth_user} (fix: the password in "
                "sip.register_password_file, or sip.register_auth_user)"
            )
        self.status = replace(self.status, auth=f"digest {challenge.algorithm}")
        self.realm = challenge.realm
        return credentials

    @property
    def _uri(self) -> str:
        host, port = self.registrar
        return f"sip:{self.domain}" if self.config.register_domain else f"sip:{host}:{port}"

    def _request(self, expires_s: int, credentials: tuple[str, str] | None) -> SipRequest:
        self.cseq += 1
        request = SipRequest(method="REGISTER", uri=self._uri)
        branch = f"z9hG4bK{secrets.token_hex(8)}"
        via = self.config.register_transport.upper()
        request.add("Via", f"SIP/2.0/{via} {self.local_host}:{self.local_port};branch={branch};rport")
        request.add("Max-Forwards", "70")
        request.add("From", f"<{self.aor}>;tag={self.from_tag}")
        request.add("To", f"<{self.aor}>")
        request.add("Call-ID", self.call_id)
        request.add("CSeq", f"{self.cseq} REGISTER")
        request.add("Contact", self.contact)
        request.add("Expires", str(expires_s))
        request.add("User-Agent", self.config.user_agent)
        if credentials is not None:
            request.add(*credentials)
        return request

    async def _transaction(self, request: SipRequest) -> SipResponse:
        if self.over_tcp:
            await self._connected()
        asking = asyncio.ensure_future(self._client.ask(request, self.registrar, over_tcp=self.over_tcp))
        try:
            while not asking.done():
                await asyncio.wait({asking}, timeout=0.2)
                if (
                    not asking.done()
                    and self.over_tcp
                    and self.connected
                    and not self.connected(self.registrar)
                ):
                    raise RegistrationFailed(self._closed_on_us())
            response, _ = asking.result()
        except NoAnswer:
            raise RegistrationFailed(
                f"no answer from the registrar {self.config.registrar} (is it reachable?)"
            ) from None
        finally:
            asking.cancel()
        return response

    def _closed_on_us(self) -> str:
        over = self.config.register_transport.upper()
        why = f"the registrar {self.config.registrar} closed the {over} connection without answering"
        if self.config.register_transport == "tls" and self.config.tls_cert_file is None:
            return why + (
                " (a phone system that wants a client certificate does so: set sip.tls_cert_file and "
                "sip.tls_key_file to the site's certificate for this device)"
            )
        return why

    async def _connected(self) -> None:
        if self.connect is None:
            raise RegistrationFailed("SIP over TCP is not available here (the server has no TCP)")
        try:
            await self.connect(self.registrar)
        except OSError as err:
            over = self.config.register_transport.upper()
            raise RegistrationFailed(
                f"cannot connect to the registrar {self.config.registrar} over {over}: {err.strerror or err}"
            ) from err

    def _granted(self, response: SipResponse, asked_s: int) -> int:
        """The lifetime of our Contact in the answer: its expires parameter, else Expires, else asked."""
        for contact in response.get_list("Contact"):
            if f"@{self.local_host}:{self.local_port}" in contact:
                found = re.search(r";\s*expires\s*=\s*(\d+)", contact, re.IGNORECASE)
                granted = bounded_seconds(found[1], low=0, high=MAX_GRANTED_S) if found else None
                if granted is not None:
                    return int(granted)
        expires = bounded_seconds(response.get("Expires") or "", low=0, high=MAX_GRANTED_S)
        return int(expires) if expires is not None else asked_s

    def _set(self, state: RegistrationState, detail: str, *, expires_s: int | None = None) -> None:
        changed = state != self.status.state
        self.status = replace(
            self.status,
            state=state,
            detail=detail,
            since=self.clock() if changed else self.status.since,
            expires_s=expires_s if state == RegistrationState.REGISTERED else None,
        )
        if changed and state == RegistrationState.REGISTERED:
            log.info("SIP: registered %s with %s (%s)", self.aor, self.config.registrar, detail)


async def try_registration(config: SipParams, *, timeout_s: float = 10.0) -> tuple[bool, str]:
    """Register once from a port of its own and remove that binding at once (``appliance doctor``:
    the credentials and the registrar checked without touching the daemon's own registration)."""
    from appliance.sip import tcp
    from appliance.sip.message import SipSyntaxError, parse_message
    from appliance.sip.tls import sip_tls

    loop = asyncio.get_running_loop()
    holder: list[Registration] = []

    def on_message(data: bytes, _source: object = None) -> None:
        with contextlib.suppress(SipSyntaxError):
            message = parse_message(data)
            if isinstance(message, SipResponse) and holder:
                holder[0].on_response(message)

    class _Socket(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
            on_message(data)

    connections: dict[Address, tcp.SipTcpConnection] = {}
    limits = tcp.TcpLimits(allowed=lambda host: True)

    tls = sip_tls(config) if config.register_transport == "tls" else None

    async def connect(address: Address) -> None:
        await tcp.connect(address, connections, on_message, limits, tls=tls)

    def send(data: bytes, address: Address) -> None:
        if address in connections:
            connections[address].write(data)
        else:
            transport.sendto(data, address)

    bind = "0.0.0.0" if config.bind_host in ("0.0.0.0", "::") else config.bind_host
    transport, _ = await loop.create_datagram_endpoint(_Socket, local_addr=(bind, 0))
    try:
        port = int(transport.get_extra_info("sockname")[1])
        try:
            password = read_password(config.register_password_file)
        except OSError as err:
            return False, f"cannot read sip.register_password_file: {err}"
        registration = Registration(config, send, port, password, connect=connect)
        holder.append(registration)
        try:
            await asyncio.wait_for(registration.register(config.register_expires_s), timeout_s)
            took = registration.status.last_register_ms
            await asyncio.wait_for(registration.register(0), timeout_s)
        except RegistrationFailed as err:
            return False, err.reason
        except asyncio.TimeoutError:
            return False, f"no answer from the registrar {config.registrar} within {timeout_s:.0f} s"
        return True, (
            f"{registration.aor} registered with {config.registrar} over {config.register_transport.upper()} "
            f"in {took} ms ({registration.status.auth}); that test binding was removed again"
        )
    finally:
        transport.close()
        for connection in list(connections.values()):
            connection.close()
