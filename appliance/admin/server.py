"""Serving the admin app on the daemon's own event loop (uvicorn, no thread of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from appliance.admin.protocol import ConnectionLimits, bounded_h11
from appliance.admin.tls import AdminTls

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the daemon owns SIGTERM/SIGINT and cancels the task."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket; a clear error when the address is taken or not on this device."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off only on sockets that say they are TCP, and
    # the accepted ones inherit it; with proto 0, every request after the first on a kept-alive
    # connection waited ~40 ms for a delayed acknowledgement.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(
            f"the admin page cannot listen on {host}:{port}: {err.strerror or err} "
            "(fix: set admin.bind_host to an address of this device and admin.port to a free port)"
        ) from err
    sock.listen(64)
    sock.setblocking(False)
    return sock


async def serve(
    app: FastAPI,
    host: str,
    port: int,
    *,
    limits: ConnectionLimits,
    sock: socket.socket | None = None,
    started: asyncio.Event | None = None,
    tls: AdminTls | None = None,
) -> None:
    """Serve ``app`` until cancelled; run it as a task on the daemon's loop.

    ``sock`` (from :func:`bind_socket`) lets the caller bind first, e.g. to port 0; ``started`` is
    set once requests are accepted; ``tls`` (``admin.tls.admin_tls``) serves HTTPS, TLS 1.2 or newer.
    """
    tls = tls or AdminTls()
    listening = sock or bind_socket(host, port)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        http=bounded_h11(limits),
        limit_concurrency=limits.max_connections,
        ws="none",
        timeout_graceful_shutdown=int(SHUTDOWN_TIMEOUT_S),
        # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise: then every forged
        # address would get its own login attempts. Only configured proxies are believed.
        proxy_headers=bool(limits.trusted_proxies),
        forwarded_allow_ips=list(limits.trusted_proxies) or None,
        ssl_certfile=str(tls.cert) if tls.cert else None,
        ssl_keyfile=str(tls.key) if tls.key else None,
    )
    config.load()
    if config.ssl is not None:
        config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
    server = _EmbeddedServer(config)
    task = asyncio.ensure_future(server.serve(sockets=[listening]))
    watcher = None
    if started is not None:
        task.add_done_callback(lambda _t: started.set())
        watcher = asyncio.ensure_future(_signal_started(server, started, task))
    address = listening.getsockname()
    if tls.warning:
        log.warning("%s", tls.warning)
    shown = f" (certificate {tls.fingerprint}, {tls.source})" if tls.enabled else ""
    log.info("admin page on %s://%s:%s/%s", tls.scheme, address[0], address[1], shown)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, SHUTDOWN_TIMEOUT_S + 1.0)
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
        listening.close()


async def _signal_started(server: uvicorn.Server, started: asyncio.Event, task: asyncio.Future[None]) -> None:
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    started.set()
