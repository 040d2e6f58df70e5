"""The admin page served by uvicorn on the caller's own event loop, over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.admin.daemon import engine_states, run_admin_page
from appliance.admin.protocol import ConnectionLimits
from appliance.admin.server import bind_socket, serve
from appliance.config import AdminParams, Settings
from tests.fixtures.admin import ADMIN_PASSWORD, ADMIN_USER, AdminEnv, make_admin_env, recorded_turn
from tests.fixtures.loopwatch import watch_loop
from tests.fixtures.net import closed_within

LIMITS = ConnectionLimits.of(AdminParams())


async def _exercise(env: AdminEnv) -> tuple[list[int], int]:
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    started = asyncio.Event()
    task = asyncio.create_task(serve(env.app, "127.0.0.1", port, limits=LIMITS, sock=sock, started=started))
    await asyncio.wait_for(started.wait(), 10)
    ticks = 0
    stop_ticking = asyncio.Event()

    async def tick() -> None:  # the daemon's own work on the same loop
        nonlocal ticks
        while not stop_ticking.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        codes = [(await client.get("/healthz")).status_code, (await client.get("/api/status")).status_code]
        login = await client.post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
        codes.append(login.status_code)
        codes.append((await client.get("/api/latency")).status_code)
        codes.append((await client.get("/")).status_code)
    stop_ticking.set()
    await ticker
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return codes, ticks


def test_serve_runs_on_the_callers_loop_and_stops_when_cancelled(admin_env: AdminEnv) -> None:
    admin_env.store.add(recorded_turn())
    codes, ticks = asyncio.run(_exercise(admin_env))
    assert codes == [200, 401, 200, 200, 200]
    assert ticks > 0  # the loop kept running its other tasks while requests were served


def test_cancelled_server_releases_its_port(admin_env: AdminEnv) -> None:
    async def run_and_cancel() -> int:
        sock = bind_socket("127.0.0.1", 0)
        port: int = sock.getsockname()[1]
        started = asyncio.Event()
        task = asyncio.create_task(
            serve(admin_env.app, "127.0.0.1", port, limits=LIMITS, sock=sock, started=started)
        )
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return port

    port = asyncio.run(run_and_cancel())
    again = bind_socket("127.0.0.1", port)  # would raise if still held
    again.close()


def test_a_taken_port_gets_a_clear_error() -> None:
    holder = bind_socket("127.0.0.1", 0)
    try:
        port = holder.getsockname()[1]
        with pytest.raises(OSError, match=r"admin\.port"):
            bind_socket("127.0.0.1", port)
        with pytest.raises(OSError, match=r"admin\.bind_host"):
            bind_socket("203.0.113.7", 8080)  # not an address of this machine
    finally:
        holder.close()


def test_run_admin_page_does_nothing_when_disabled(admin_env: AdminEnv) -> None:
    assert not admin_env.settings.admin.enabled
    asyncio.run(
        asyncio.wait_for(
            run_admin_page(admin_env.settings, admin_env.store, admin_env.registry, admin_env.bundle), 5
        )
    )


def test_run_admin_page_serves_on_the_configured_address(
    tmp_path: Path, settings: Settings, admin_users_file: Path
) -> None:
    holder = bind_socket("127.0.0.1", 0)
    port = holder.getsockname()[1]
    holder.close()
    env = make_admin_env(tmp_path, settings, admin_users_file, enabled=True, port=port)
    for state in engine_states(env.settings, {"vad": 0.1, "asr": 1.0, "llm": 2.0, "tts": 1.2}):
        env.registry.set_engine(state)

    async def probe() -> int:
        task = asyncio.create_task(run_admin_page(env.settings, env.store, env.registry, env.bundle))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                for _ in range(200):
                    try:
                        return (await client.get("/readyz")).status_code
                    except httpx.ConnectError:
                        await asyncio.sleep(0.02)
            raise AssertionError("the admin page never answered")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    assert asyncio.run(probe()) == 200
    env.store.close()


@contextlib.asynccontextmanager
async def serving(env: AdminEnv) -> AsyncIterator[int]:
    """The admin page of ``env`` served on its configured port until the block ends; yields the port."""
    task = asyncio.create_task(run_admin_page(env.settings, env.store, env.registry, env.bundle))
    port = env.settings.admin.port
    try:
        for _ in range(200):
            try:
                _, probe = await asyncio.open_connection("127.0.0.1", port)
                probe.close()
                break
            except OSError:
                await asyncio.sleep(0.02)
        yield port
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def served_env(tmp_path: Path, settings: Settings, admin_users_file: Path, **admin: Any) -> AdminEnv:
    holder = bind_socket("127.0.0.1", 0)
    port = holder.getsockname()[1]
    holder.close()
    return make_admin_env(tmp_path, settings, admin_users_file, enabled=True, port=port, **admin)


def test_a_forged_forwarded_for_header_does_not_buy_more_login_attempts(
    tmp_path: Path, settings: Settings, admin_users_file: Path
) -> None:
    """The real server on loopback: each failed login claims another client address in
    X-Forwarded-For; with no trusted proxy configured the limit still counts the real address."""
    env = served_env(tmp_path, settings, admin_users_file)
    limit = env.settings.admin.login_max_failures

    async def attempts() -> list[int]:
        async with serving(env) as port, httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            statuses = []
            for n in range(limit + 2):
                response = await client.post(
                    "/api/login",
                    json={"username": f"guess{n}", "password": "not the password at all"},
                    headers={"X-Forwarded-For": f"203.0.113.{n + 1}"},
                )
                statuses.append(response.status_code)
            return statuses

    statuses = asyncio.run(attempts())
    env.store.close()
    assert statuses[:limit] == [401] * limit
    assert statuses[limit:] == [429, 429], statuses


def test_connections_that_send_no_request_are_closed_and_real_requests_still_work(
    tmp_path: Path, settings: Settings, admin_users_file: Path
) -> None:
    """The real server: a connection that sends nothing, and one that sends its header fields and
    never ends them, are closed after admin.request_timeout_s; a request on a fresh connection, and a
    second request on a kept-alive one, are answered."""
    env = served_env(tmp_path, settings, admin_users_file, request_timeout_s=0.5)

    async def scenario() -> dict[str, bool]:
        async with serving(env) as port:
            silent_r, silent_w = await asyncio.open_connection("127.0.0.1", port)
            slow_r, slow_w = await asyncio.open_connection("127.0.0.1", port)
            slow_w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            kept_r, kept_w = await asyncio.open_connection("127.0.0.1", port)
            kept_w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            first = await asyncio.wait_for(kept_r.readuntil(b"}"), 2.0)
            kept_w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            second = await asyncio.wait_for(kept_r.read(65536), 2.0)
            results = {
                "kept-alive connection answered twice": b" 200 " in first and b" 200 " in second,
                "silent closed": await closed_within(silent_r, 1.5),
                "slow headers closed": await closed_within(slow_r, 1.5),
            }
            for writer in (silent_w, slow_w, kept_w):
                writer.close()
            return results

    results = asyncio.run(scenario())
    env.store.close()
    assert all(results.values()), results


async def _slow_login(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A login whose body says 60,000 bytes and sends one: the header fields are whole, the body is not."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return None
    writer.write(
        b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 60000\r\n\r\n{"
    )
    return reader, writer


def test_slow_request_bodies_cannot_hold_the_page(
    tmp_path: Path, settings: Settings, admin_users_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """63 logins from one address, each sending its body a byte at a time (the attack that kept
    /healthz at 503 for as long as it was held): the address gets admin.max_connections_per_client
    connections and the rest are closed at once, those few are closed when admin.request_timeout_s
    runs out, /healthz answers from another address meanwhile, nothing blocks the event loop, and
    the refusals make a line or two of log, not one each."""
    # Longer than opening the 63 connections takes on a loaded machine (over 2 s once under CI): the
    # kept ones must still be open when they are counted.
    timeout_s = 5.0
    env = served_env(tmp_path, settings, admin_users_file, request_timeout_s=timeout_s)
    per_client = env.settings.admin.max_connections_per_client

    async def scenario() -> dict[str, Any]:
        # The test's own client is made first: building its TLS context reads the CA file, a blocking
        # step of the test's, not the server's, that the watch would report under load.
        client = httpx.AsyncClient(timeout=5.0)
        async with client, watch_loop() as slow, serving(env) as port:
            held = [c for c in [await _slow_login(port, "127.0.0.2") for _ in range(63)] if c is not None]
            await asyncio.sleep(0.3)
            closed_now = [await closed_within(reader, 0.05) for reader, _ in held]
            started = asyncio.get_running_loop().time()
            health = (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code
            health_s = asyncio.get_running_loop().time() - started
            survivors = [reader for (reader, _), closed in zip(held, closed_now, strict=True) if not closed]
            closed_later = [await closed_within(reader, timeout_s + 1.0) for reader in survivors]
            for _, writer in held:
                writer.close()
            return {
                "open_after_refusals": len(survivors),
                "closed_at_deadline": all(closed_later),
                "health": health,
                "health_s": health_s,
                "slow": list(slow),
            }

    with caplog.at_level(logging.INFO, logger="appliance.admin"):
        result = asyncio.run(scenario())
    env.store.close()
    assert result["open_after_refusals"] == per_client, result
    assert result["closed_at_deadline"], result
    assert result["health"] == 200 and result["health_s"] < 2.0, result
    assert result["slow"] == []
    refusals = [r for r in caplog.records if "connections; another one refused" in r.getMessage()]
    assert 1 <= len(refusals) <= 2, [r.getMessage() for r in refusals]


def test_parallel_password_guesses_cost_what_sequential_ones_do(
    tmp_path: Path, settings: Settings, admin_users_file: Path
) -> None:
    """40 wrong logins sent at once from one address (the per-address connection cap raised so that
    all of them reach the login): only admin.login_max_failures passwords are checked, the rest get
    429 at once (each 401 is a password checked); the right password from that address is refused
    until the window passes."""
    env = served_env(tmp_path, settings, admin_users_file, max_connections_per_client=64)
    limit = env.settings.admin.login_max_failures

    async def burst() -> list[int]:
        async with (
            serving(env) as port,
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", timeout=30.0, limits=httpx.Limits(max_connections=64)
            ) as client,
        ):
            guesses = [
                client.post("/api/login", json={"username": ADMIN_USER, "password": f"guess number {n}"})
                for n in range(40)
            ]
            statuses = [r.status_code for r in await asyncio.gather(*guesses)]
            right = await client.post("/api/login", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
            return [*statuses, right.status_code]

    statuses = asyncio.run(burst())
    env.store.close()
    # Each 401 is a password checked and found wrong.
    assert statuses[:-1].count(401) == limit and statuses[:-1].count(429) == 40 - limit, statuses
    assert statuses[-1] == 429
