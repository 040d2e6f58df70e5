"""uvicorn's h11 protocol with a deadline for each request's header fields.

uvicorn closes a connection that stays idle after a response (``timeout_keep_alive``), but not one
that opens and sends nothing, or sends its header fields a byte at a time: a thousand of those hold
the daemon's file descriptors and the page stops answering. Here each request must have its header
fields complete within ``header_timeout_s`` of the connection opening or the previous response.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol


def bounded_h11(header_timeout_s: float) -> type[H11Protocol]:
    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not None and self.cycle is not before:  # a request's header fields are in
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this connection gets the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
