"""uvicorn's h11 protocol with a deadline for each whole request and a cap on connections per address.

uvicorn closes a connection that stays idle after a response (``timeout_keep_alive``), but not one
that opens and sends nothing, or sends its header fields or its body a byte at a time: a few dozen of
those hold every connection the page allows and it stops answering, even ``/healthz``. Here each
request, header fields and body, must be complete within ``request_timeout_s`` of the connection
opening or the previous response, and one address may hold at most ``max_per_client`` connections
(a TLS proxy listed in ``admin.trusted_proxies`` excepted: every client comes through it). Refused
connections and uvicorn's own "Exceeded concurrency limit." go to a throttled log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from appliance.config import AdminParams
from appliance.ratelog import ThrottledLog

log = logging.getLogger(__name__)


class _ConcurrencyLogFilter(logging.Filter):
    """uvicorn logs a warning for every connection over its limit: one line per interval instead."""

    def __init__(self, noisy: ThrottledLog, max_connections: int) -> None:
        super().__init__()
        self.noisy = noisy
        self.max_connections = max_connections

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Exceeded concurrency limit.":
            return True
        self.noisy.log(
            logging.WARNING,
            "admin_full",
            "admin page: more than %d connections at once (admin.max_connections); answered 503",
            self.max_connections,
        )
        return False


@dataclass(frozen=True)
class ConnectionLimits:
    request_timeout_s: float
    max_connections: int
    max_per_client: int
    trusted_proxies: tuple[str, ...]

    @classmethod
    def of(cls, admin: AdminParams) -> ConnectionLimits:
        return cls(
            request_timeout_s=admin.request_timeout_s,
            max_connections=admin.max_connections,
            max_per_client=admin.max_connections_per_client,
            trusted_proxies=admin.trusted_proxies,
        )


def bounded_h11(limits: ConnectionLimits) -> type[H11Protocol]:
    request_timeout_s, max_per_client = limits.request_timeout_s, limits.max_per_client
    exempt = limits.trusted_proxies
    noisy = ThrottledLog(log)
    per_client: Counter[str] = Counter()
    uvicorn_log = logging.getLogger("uvicorn.error")
    for old in [f for f in uvicorn_log.filters if isinstance(f, _ConcurrencyLogFilter)]:
        uvicorn_log.removeFilter(old)
    uvicorn_log.addFilter(_ConcurrencyLogFilter(noisy, limits.max_connections))

    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _finished_cycle: Any = None  # the cycle whose request was whole when the deadline was armed
        _client_key: str | None = None
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            peer = transport.get_extra_info("peername")
            host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            if host and host not in exempt:
                if per_client[host] >= max_per_client:
                    noisy.log(
                        logging.WARNING,
                        "admin_per_client",
                        "admin page: %s already holds %d connections; another one refused",
                        host,
                        max_per_client,
                    )
                    self._refused = True
                    transport.abort()
                    return
                per_client[host] += 1
                self._client_key = host
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            cycle = self.cycle
            if cycle is not None and cycle is not self._finished_cycle and not cycle.more_body:
                self._disarm()  # this request is whole; the app has it

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this connection gets the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return  # nothing of uvicorn's was set up for it
            self._disarm()
            if self._client_key is not None:
                per_client[self._client_key] -= 1
                if per_client[self._client_key] <= 0:
                    del per_client[self._client_key]
                self._client_key = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._finished_cycle = self.cycle
            self._deadline = self.loop.call_later(request_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
