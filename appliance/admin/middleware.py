"""A plain ASGI middleware (cheaper than a per-request ``BaseHTTPMiddleware``): refuses oversized
bodies, adds security headers to every answer, and ``Cache-Control: no-store`` to API answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.admin.errors import error_response


class HeadersAndLimits:
    def __init__(self, app: ASGIApp, *, headers: Mapping[str, str], max_body_bytes: int) -> None:
        self.app = app
        self.headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await self._too_large(scope, receive, send)
            return
        extra = list(self.headers)
        if scope["path"].startswith("/api/"):
            extra.append((b"cache-control", b"no-store"))
        received = 0
        too_large = False
        replaced = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:  # a chunked body without Content-Length
                    too_large = True
                    raise _TooLarge
            return message

        async def send_with_headers(message: Message) -> None:
            nonlocal replaced
            if too_large:
                # The framework turned the aborted read into its own error: answer 413 instead.
                if not replaced:
                    replaced = True
                    await self._too_large(scope, receive, send)
                return
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                added = [h for h in extra if h[0] not in present]
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        try:
            await self.app(scope, limited_receive, send_with_headers)
        except _TooLarge:
            if not replaced:
                await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "too_large", f"request body over {self.max_body_bytes} bytes")
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def _header(scope: Scope, name: bytes) -> str | None:
    headers: Any = scope.get("headers", [])
    for key, value in headers:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None
