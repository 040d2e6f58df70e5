"""The admin page's cost of TLS: one trivial route served the daemon's way (uvicorn on this loop, the
device certificate), requested over HTTP and over HTTPS, each with a new connection per request (a
browser's first request, the handshake included) and over one kept-alive connection."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from appliance.admin.protocol import ConnectionLimits
from appliance.admin.server import bind_socket, serve
from appliance.admin.tls import AdminTls, fingerprint_of
from appliance.certificates import device_certificate
from appliance.config import AdminParams

LOOPBACK = "127.0.0.1"


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "n": len(values)}


async def _timed(url: str, verify: ssl.SSLContext | bool, requests: int, *, fresh: bool) -> list[float]:
    times: list[float] = []
    client = httpx.AsyncClient(verify=verify)
    try:
        for _ in range(requests):
            if fresh:
                await client.aclose()
                client = httpx.AsyncClient(verify=verify)
            started = time.perf_counter()
            (await client.get(url)).raise_for_status()
            times.append(time.perf_counter() - started)
    finally:
        await client.aclose()
    return times


async def admin_over_tls(requests: int = 100) -> dict[str, Any]:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    cert, key = device_certificate(Path(tempfile.mkdtemp(prefix="bench-admin-tls-")), "bench", LOOPBACK)
    results: dict[str, Any] = {}
    for name, tls in (("http", AdminTls()), ("https", AdminTls(cert, key, fingerprint_of(cert), "device"))):
        sock = bind_socket(LOOPBACK, 0)
        started = asyncio.Event()
        limits = ConnectionLimits.of(AdminParams())
        server = asyncio.create_task(
            serve(app, LOOPBACK, 0, limits=limits, sock=sock, started=started, tls=tls)
        )
        await started.wait()
        url = f"{tls.scheme}://{LOOPBACK}:{sock.getsockname()[1]}/healthz"
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(cert)) if tls.enabled else False
        results[f"{name}, new connection"] = _ms(await _timed(url, verify, requests, fresh=True))
        results[f"{name}, kept alive"] = _ms(await _timed(url, verify, requests, fresh=False))
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    return results
