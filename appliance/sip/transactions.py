"""Server transaction bookkeeping over UDP (RFC 3261 section 17.2): answer retransmitted requests
with the same response, and retransmit final INVITE responses until the ACK comes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from appliance.sip.headers import MAGIC_COOKIE, HeaderError, parse_cseq, parse_name_addr, parse_via
from appliance.sip.message import SipRequest

log = logging.getLogger(__name__)

T1_S = 0.5
T2_S = 4.0
TRANSACTION_TIMEOUT_S = 64 * T1_S
MAX_CACHED_RESPONSES = 4096


def transaction_key(request: SipRequest, method: str | None = None) -> tuple[str, ...]:
    """Identify a server transaction: the branch (RFC 3261 17.2.3), or RFC 2543 fields without one.

    ``method`` overrides the request's own, so that an ACK or CANCEL can find its INVITE.
    """
    method = method or request.method
    hops = request.get_list("Via")
    try:
        via = parse_via(hops[0]) if hops else None
    except HeaderError:
        via = None
    if via is not None and via.branch and via.branch.startswith(MAGIC_COOKIE) and len(via.branch) > 7:
        return ("3261", via.branch, via.host, str(via.port), method)
    try:
        cseq = str(parse_cseq(request.get("CSeq") or "").number)
        from_tag = parse_name_addr(request.get("From") or "", "From").tag or ""
    except HeaderError:
        cseq, from_tag = request.get("CSeq") or "", ""
    top = hops[0] if hops else ""
    return ("2543", request.get("Call-ID") or "", from_tag, cseq, top, method)


@dataclass
class _Entry:
    data: bytes
    address: tuple[str, int]
    expires_s: float


class ResponseCache:
    """The last response of each recent server transaction, to repeat for a retransmitted request."""

    def __init__(self, clock: Callable[[], float], lifetime_s: float = TRANSACTION_TIMEOUT_S) -> None:
        self._clock = clock
        self._lifetime_s = lifetime_s
        self._entries: dict[tuple[str, ...], _Entry] = {}

    def remember(self, key: tuple[str, ...], data: bytes, address: tuple[str, int]) -> None:
        now = self._clock()
        if len(self._entries) > 256:
            self._entries = {k: e for k, e in self._entries.items() if e.expires_s > now}
        while len(self._entries) >= MAX_CACHED_RESPONSES:  # a flood: forget the oldest first
            del self._entries[next(iter(self._entries))]
        self._entries[key] = _Entry(data, address, now + self._lifetime_s)

    def lookup(self, key: tuple[str, ...]) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None or entry.expires_s < self._clock():
            return None
        return entry

    def __len__(self) -> int:
        return len(self._entries)


class Retransmitter:
    """Send ``data`` now and again at T1, 2*T1, ... (capped at T2) until ``stop()`` or the timeout."""

    def __init__(
        self,
        send: Callable[[], None],
        on_timeout: Callable[[], None] | None = None,
        *,
        timeout_s: float | None = None,
        t1_s: float = T1_S,
        max_sends: int | None = None,
        already_sent: bool = False,
    ) -> None:
        """``timeout_s`` defaults to 64*T1, RFC 3261's timer for a transaction (Timer H, the 2xx's)."""
        self._send = send
        self._on_timeout = on_timeout
        self._t1_s = t1_s
        self._timeout_s = 64 * t1_s if timeout_s is None else timeout_s
        self._max_sends = max_sends
        if not already_sent:
            self._send()  # the first copy goes now, even if the caller stops the repeats at once
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sip-retransmit")

    def stop(self) -> None:
        self._task.cancel()

    @property
    def done(self) -> bool:
        return self._task.done()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        interval, sends = self._t1_s, 1
        while self._max_sends is None or sends < self._max_sends:
            wait = min(interval, deadline - loop.time())
            if wait <= 0:
                break
            await asyncio.sleep(wait)
            if loop.time() >= deadline:
                break
            self._send()
            sends += 1
            interval = min(interval * 2, T2_S)
        if self._max_sends is not None and sends >= self._max_sends:
            return
        if self._on_timeout is not None:
            self._on_timeout()
