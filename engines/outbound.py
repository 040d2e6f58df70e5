"""The one way out of the device: HTTP to a host a technician listed, and nothing else.

Two things may leave the device: an ``http`` tool's request to a service on the site's LAN
(``agent.allowed_hosts``) and the site LLM server's API (``llm_server.allowed_hosts``). Both go through here,
under the same rules, checked before any connection:

- the URL's scheme is one the caller allows and its host is listed (a name, an address or a network);
- a name is resolved only here (``engines.net.name_lookup_allowed``), and every address it resolves to
  must be private (loopback, link-local, RFC 1918, ULA) unless the caller allows public ones; the
  address checked is the one connected to (a second lookup cannot point elsewhere), with the name kept
  for the Host header and TLS;
- no proxy, netrc or certificate setting is read from the environment, no redirect is followed, and an
  answer is read up to a size limit.

The transport is httpx; a caller reads the response (streamed, for the LLM server's server-sent events)
inside ``open_response``.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from engines.net import host_allowed, is_ip_literal, is_private_address, name_lookup_allowed

DEFAULT_MAX_BODY_BYTES = 256 * 1024


class OutboundError(Exception):
    """A request that was refused or failed; ``kind``: bad_url, refused_host, public_address,
    unresolvable, unreachable (no connection), timeout (connected, no answer in time)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class OutboundRules:
    allowed_hosts: tuple[str, ...]
    setting: str  # the key that lists the hosts, named when one is refused ("agent.allowed_hosts")
    allow_public: bool = False
    schemes: tuple[str, ...] = ("http", "https")
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    user_agent: str = "voice-appliance"


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str  # as written in the URL, without IPv6 brackets
    port: int
    target: str  # path and query

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def check_url(url: str, rules: OutboundRules) -> Destination:
    """Where ``url`` leads, if the rules allow it; nothing is resolved or connected here."""
    parts = urlsplit(url)
    if parts.scheme not in rules.schemes or not parts.hostname:
        schemes = " or ".join(f"{s}://" for s in rules.schemes)
        raise OutboundError("bad_url", f"{url!r} is not a {schemes} URL with a host")
    host = parts.hostname
    if not host_allowed(host, rules.allowed_hosts):
        raise OutboundError("refused_host", f"{host} is not in {rules.setting}")
    if is_ip_literal(host) and not rules.allow_public and not is_private_address(host):
        raise OutboundError("public_address", f"{host} is not a private address")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as err:
        raise OutboundError("bad_url", f"{url!r}: {err}") from err
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Destination(parts.scheme, host, port, target)


def resolve(destination: Destination, rules: OutboundRules) -> str:
    """The address to connect to: the host itself when it is one, else the first its name resolves
    to, every one of them private unless the rules allow public ones."""
    if is_ip_literal(destination.host):
        return destination.host
    try:
        with name_lookup_allowed(destination.host):  # listed in the rules, checked by check_url
            infos = socket.getaddrinfo(destination.host, destination.port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise OutboundError("unresolvable", f"the name {destination.host} does not resolve ({err})") from err
    addresses = [str(info[4][0]) for info in infos]
    public = [a for a in addresses if not is_private_address(a)]
    if public and not rules.allow_public:
        raise OutboundError(
            "public_address", f"{destination.host} resolves to the public address {public[0]}"
        )
    return addresses[0]


@contextlib.contextmanager
def open_response(
    method: str,
    url: str,
    rules: OutboundRules,
    *,
    timeout: httpx.Timeout,
    json_body: Any = None,
    headers: Mapping[str, str] | None = None,
    on_socket: Callable[[socket.socket], None] | None = None,
) -> Iterator[httpx.Response]:
    """The response to one request, its headers read and its body not yet: read it inside (``read_body``,
    or ``iter_lines`` for a stream). Raises OutboundError before or while connecting. ``on_socket`` is
    given the connection's socket as soon as it is connected (to ``interrupt`` a wait from another
    thread, the wait for the headers included)."""
    destination = check_url(url, rules)
    address = resolve(destination, rules)
    target = httpx.URL(scheme=destination.scheme, host=address, port=destination.port).join(
        destination.target
    )
    sent = {"Host": destination.host_header, "User-Agent": rules.user_agent, **(headers or {})}
    extensions: dict[str, Any] = {}
    if on_socket is not None:
        extensions["trace"] = functools.partial(_report_socket, on_socket)
    if destination.scheme == "https" and not is_ip_literal(destination.host):
        extensions["sni_hostname"] = destination.host  # the certificate is checked against the name
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        request = client.build_request(method, target, headers=sent, json=json_body, extensions=extensions)
        try:
            response = client.send(request, stream=True)
        except httpx.ConnectTimeout as err:
            raise OutboundError(
                "unreachable", f"{destination.host} did not accept a connection in time"
            ) from err
        except httpx.TimeoutException as err:
            raise OutboundError("timeout", f"{destination.host} did not answer in time") from err
        except (httpx.HTTPError, OSError) as err:
            raise OutboundError("unreachable", f"{destination.host}: {err or type(err).__name__}") from err
        try:
            yield response
        finally:
            response.close()


def read_body(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the body (a larger answer is cut there, not read to its end)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)[:limit]


def interrupt(sock: socket.socket) -> None:
    """End a read that is waiting on ``sock``, from another thread (a cancel, or a deadline): the
    socket is shut down, which wakes a blocked read at once (closing it would not)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _report_socket(on_socket: Callable[[socket.socket], None], event: str, info: dict[str, Any]) -> None:
    """httpcore's trace hook: the TCP connection is made."""
    if event == "connection.connect_tcp.complete":
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            on_socket(sock)
