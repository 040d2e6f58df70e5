"""Serving the admin app on the daemon's own event loop (uvicorn, no thread of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from appliance.admin.protocol import ConnectionLimits, bounded_h11

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
    sock = socket.socket(family, socket.SOCK_STREAM)
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
) -> None:
    """Serve ``app`` until cancelled; run it as a task on the daemon's loop.

    ``sock`` (from :func:`bind_socket`) lets the caller bind first, e.g. to port 0; ``started`` is
    set once requests are accepted.
    """
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
    )
    server = _EmbeddedServer(config)
    task = asyncio.ensure_future(server.serve(sockets=[listening]))
    watcher = None
    if started is not None:
        task.add_done_callback(lambda _t: started.set())
        watcher = asyncio.ensure_future(_signal_started(server, started, task))
    address = listening.getsockname()
    log.info("admin page on http://%s:%s/", address[0], address[1])
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
