"""Admin page benchmark: request latency over real HTTP, and how much the page delays the event loop.

    .venv/bin/python -m bench.admin [--turns 2000] [--requests 40]

The app runs as in the daemon (uvicorn as a task on this process's loop) over a trace store filled
with ``--turns`` recorded turns. For each route: p50/p95/p99 of ``--requests`` sequential requests.
Event-loop lag (how late a 10 ms timer fires) is measured while idle and while the dashboard's four
polling requests run back to back; the ratio shows whether page traffic would delay the pipeline's
own work on the loop. Results go to ~/.cache/appliance/bench-results/admin-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from appliance.admin.app import create_app
from appliance.admin.backend import LiveRegistry
from appliance.admin.daemon import engine_states
from appliance.admin.local import LocalBackend
from appliance.admin.protocol import ConnectionLimits
from appliance.admin.server import bind_socket, serve
from appliance.admin.users import UserDirectory, set_password
from appliance.config import AdminParams, load_settings
from appliance.daemon.bundle_view import summarize_bundle
from appliance.engine_set import open_bundle
from appliance.trace import TIMESTAMPS, TraceStore, TurnTrace, percentile
from bench.paths import RESULTS

REPO = Path(__file__).resolve().parents[1]
USER, PASSWORD = "bench", "bench password 1"
DASHBOARD_POLL = ("/api/status", "/api/sessions", "/api/latency?limit=200", "/api/turns?limit=100")
ROUTES = ("/healthz", *DASHBOARD_POLL, "/metrics")
TIMER_S = 0.01


def _fill(store: TraceStore, turns: int) -> None:
    base = time.monotonic()
    for index in range(turns):
        trace = TurnTrace(turn_id=f"b{index:011d}", session_id="mic", transcript="what time is it")
        at = base + index * 10.0
        for step, name in enumerate(TIMESTAMPS):
            trace.mark(name, at + step * (0.1 + (index % 17) * 0.01))
        store.add(trace)


def _summary(values_ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values_ms, 50), 2),
        "p95_ms": round(percentile(values_ms, 95), 2),
        "p99_ms": round(percentile(values_ms, 99), 2),
        "n": len(values_ms),
    }


async def _loop_lag(stop: asyncio.Event) -> list[float]:
    lags: list[float] = []
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(TIMER_S)
        lags.append((time.perf_counter() - started - TIMER_S) * 1000.0)
    return lags


async def _baseline(requests: int) -> dict[str, float]:
    """The same server and client around an app with one trivial route: what any request costs here."""
    bare = FastAPI()

    @bare.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    sock = bind_socket("127.0.0.1", 0)
    started = asyncio.Event()
    server = asyncio.create_task(
        serve(bare, "127.0.0.1", 0, limits=ConnectionLimits.of(AdminParams()), sock=sock, started=started)
    )
    await started.wait()
    times = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
        for _ in range(requests):
            t0 = time.perf_counter()
            (await client.get("/ping")).raise_for_status()
            times.append((time.perf_counter() - t0) * 1000.0)
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)
    return _summary(times)


async def _measure(turns: int, requests: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-admin-"))
    settings = load_settings(None)
    settings = settings.model_copy(
        update={"trace": settings.trace.model_copy(update={"db_path": root / "turns.sqlite3"})}
    )
    store = TraceStore(root / "turns.sqlite3", max_turns=max(turns, 10))
    fill_started = time.perf_counter()
    _fill(store, turns)
    fill_s = time.perf_counter() - fill_started
    registry = LiveRegistry()
    for state in engine_states(settings):
        registry.set_engine(state)
    set_password(root / "users", USER, "admin", PASSWORD)
    bundle = summarize_bundle(open_bundle(settings))
    app = create_app(
        LocalBackend(settings, store, registry, bundle), settings, users=UserDirectory(root / "users")
    )
    sock = bind_socket("127.0.0.1", 0)
    started = asyncio.Event()
    server = asyncio.create_task(
        serve(app, "127.0.0.1", 0, limits=ConnectionLimits.of(settings.admin), sock=sock, started=started)
    )
    await started.wait()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    results: dict[str, Any] = {"turns_stored": turns, "store_fill_s": round(fill_s, 2), "routes": {}}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        login_ms = []
        for _ in range(5):
            t0 = time.perf_counter()
            response = await client.post("/api/login", json={"username": USER, "password": PASSWORD})
            login_ms.append((time.perf_counter() - t0) * 1000.0)
            response.raise_for_status()
        results["routes"]["POST /api/login (scrypt ln=15)"] = _summary(login_ms)
        t0 = time.perf_counter()
        (await client.get("/metrics")).raise_for_status()
        results["first_metrics_scrape_ms"] = round((time.perf_counter() - t0) * 1000.0, 1)
        for route in ROUTES:
            times = []
            for _ in range(requests):
                t0 = time.perf_counter()
                (await client.get(route)).raise_for_status()
                times.append((time.perf_counter() - t0) * 1000.0)
            results["routes"][f"GET {route}"] = _summary(times)
        poll_ms = []
        for _ in range(requests // 4 or 1):
            t0 = time.perf_counter()
            await asyncio.gather(*(client.get(route) for route in DASHBOARD_POLL))
            poll_ms.append((time.perf_counter() - t0) * 1000.0)
        results["dashboard_refresh (4 requests at once)"] = _summary(poll_ms)

        stop = asyncio.Event()
        idle = asyncio.create_task(_loop_lag(stop))
        await asyncio.sleep(3.0)
        stop.set()
        idle_lag = await idle
        stop = asyncio.Event()
        busy = asyncio.create_task(_loop_lag(stop))
        busy_until = time.monotonic() + 3.0
        while time.monotonic() < busy_until:
            await asyncio.gather(*(client.get(route) for route in DASHBOARD_POLL))
        stop.set()
        busy_lag = await busy
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)
    store.close()
    results["routes"]["GET /ping (bare FastAPI app, baseline)"] = await _baseline(requests)
    idle_summary, busy_summary = _summary(idle_lag), _summary(busy_lag)
    results["loop_lag_idle"] = idle_summary
    results["loop_lag_under_dashboard_load"] = busy_summary
    results["loop_lag_p99_ratio_busy_vs_idle"] = round(
        busy_summary["p99_ms"] / max(idle_summary["p99_ms"], 0.01), 2
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.admin", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="turns in the trace store")
    parser.add_argument("--requests", type=int, default=40, help="requests per route")
    args = parser.parse_args()
    results = asyncio.run(_measure(args.turns, args.requests))
    results["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    print(f"trace store: {results['turns_stored']} turns (filled in {results['store_fill_s']} s)")
    print(f"{'request':48} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'n':>4}")
    rows = dict(results["routes"])
    rows["dashboard refresh (4 requests at once)"] = results["dashboard_refresh (4 requests at once)"]
    rows["event-loop lag, idle"] = results["loop_lag_idle"]
    rows["event-loop lag, dashboard polled flat out"] = results["loop_lag_under_dashboard_load"]
    for name, row in rows.items():
        print(f"{name:48} {row['p50_ms']:9.2f} {row['p95_ms']:9.2f} {row['p99_ms']:9.2f} {row['n']:4d}")
    print(
        f"first /metrics scrape over {results['turns_stored']} turns: {results['first_metrics_scrape_ms']} ms"
    )
    print(f"loop lag p99, busy / idle: {results['loop_lag_p99_ratio_busy_vs_idle']}x")
    baseline = results["routes"]["GET /ping (bare FastAPI app, baseline)"]["p50_ms"]
    for name in ("GET /healthz", "GET /api/status", "GET /api/latency?limit=200", "GET /metrics"):
        print(f"{name} p50 / bare-app p50: {results['routes'][name]['p50_ms'] / baseline:.1f}x")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"admin-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
