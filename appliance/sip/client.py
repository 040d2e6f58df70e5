"""Our own requests (RFC 3261 section 17.1, non-INVITE client transactions): REGISTER, BYE, REFER.

One implementation for all of them. A request is sent and, over UDP, sent again at T1, 2*T1, ...
(capped at T2) until a response comes; any response stops the repeats (the peer has it) and a final
one ends the transaction. Without one, it times out after 64*T1 (Timer F) or the timeout given.
Over TCP it is sent once: a stream does not lose it. Responses are matched by the top Via's branch
and the Call-ID.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from appliance.sip.headers import parse_via
from appliance.sip.message import SipRequest, SipResponse
from appliance.sip.transactions import Retransmitter
from appliance.sip.transport import Address

log = logging.getLogger(__name__)

Answered = tuple[SipResponse, Address]  # a final response to one of our requests, and where it came from


class NoAnswer(Exception):
    """The transaction timed out without a final response."""


@dataclass
class _Open:
    call_id: str
    answer: asyncio.Future[Answered] | None
    repeats: Retransmitter | None
    timer: asyncio.TimerHandle


class ClientTransactions:
    def __init__(self, send: Callable[[bytes, Address], None], *, t1_s: float) -> None:
        self._send = send
        self.t1_s = t1_s
        self._open: dict[str, _Open] = {}

    def send(
        self, request: SipRequest, destination: Address, *, over_tcp: bool, timeout_s: float | None = None
    ) -> None:
        """Send ``request`` without waiting for its answer (a BYE)."""
        self._start(request, destination, over_tcp=over_tcp, timeout_s=timeout_s, answer=None)

    async def ask(
        self, request: SipRequest, destination: Address, *, over_tcp: bool, timeout_s: float | None = None
    ) -> Answered:
        """Send ``request``; its final response and where it came from. Raises NoAnswer."""
        answer: asyncio.Future[Answered] = asyncio.get_running_loop().create_future()
        branch = self._start(request, destination, over_tcp=over_tcp, timeout_s=timeout_s, answer=answer)
        try:
            return await answer
        finally:
            self._close(branch)

    def _start(
        self,
        request: SipRequest,
        destination: Address,
        *,
        over_tcp: bool,
        timeout_s: float | None,
        answer: asyncio.Future[Answered] | None,
    ) -> str:
        branch = parse_via(request.get("Via") or "").branch or ""
        data = request.to_bytes()

        def send() -> None:
            self._send(data, destination)

        def timed_out() -> None:
            self._close(branch)
            if answer is not None and not answer.done():
                answer.set_exception(
                    NoAnswer(f"no answer to {request.method} from {destination[0]}:{destination[1]}")
                )

        wait_s = 64 * self.t1_s if timeout_s is None else timeout_s
        timer = asyncio.get_running_loop().call_later(wait_s, timed_out)
        repeats = None
        if over_tcp:
            send()
        else:
            repeats = Retransmitter(send, None, timeout_s=wait_s, t1_s=self.t1_s)
        self._open[branch] = _Open(request.get("Call-ID") or "", answer, repeats, timer)
        return branch

    def on_response(self, response: SipResponse, source: Address) -> bool:
        """A response to one of our requests (True), or not ours (False)."""
        hops = response.get_list("Via")
        try:
            branch = parse_via(hops[0]).branch if hops else None
        except ValueError:
            return False
        found = self._open.get(branch or "")
        if found is None or response.get("Call-ID") != found.call_id:
            return False
        if found.repeats is not None:
            found.repeats.stop()
        if response.status >= 200:
            self._close(branch or "")
            if found.answer is not None and not found.answer.done():
                found.answer.set_result((response, source))
        return True

    def stop(self) -> None:
        for branch in list(self._open):
            self._close(branch)

    def _close(self, branch: str) -> None:
        found = self._open.pop(branch, None)
        if found is None:
            return
        found.timer.cancel()
        if found.repeats is not None:
            found.repeats.stop()
