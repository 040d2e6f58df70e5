"""Calls through the site's SIP proxy (Kamailio, deploy/kamailio) vs straight to the appliance, and the
time a dead appliance costs the next call.

    .venv/bin/python -m bench fleet [--calls 8] [--llm gemma-270m]

Two appliances (two SIP listeners on the real pipeline, one set of engines) behind a real Kamailio.
``--calls`` loopback calls straight to the first and as many through the proxy, one at a time and
alternating, each asking one recorded question: turn latency at the caller (the media never passes the
proxy) and call setup (INVITE sent -> 200 OK) p50/p95/p99. Then one appliance stops answering and calls
are placed through the proxy at once: the setup of the first (the proxy's INVITE timeout, then the
other appliance) and of the next. Results: ~/.cache/appliance/bench-results/fleet-<time>.json. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from appliance.audio.call import call_session_kwargs
from appliance.config import SipParams, load_settings, override
from appliance.engine_set import build_engines, load_engines, open_bundle, session_config
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session, SessionConfig
from appliance.sip.server import SipServer
from bench.machine import write_result
from bench.sip import DATA, QUESTIONS, Caller, _percentiles
from bench.sip_phone import Phone
from engines.audio import load_audio_16k, resample

CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "kamailio" / "kamailio.cfg"


def start_kamailio(
    workdir: Path, appliances: list[int], port: int, *, ping_s: int = 1, check: bool = False
) -> subprocess.Popen[str]:
    """Kamailio with the shipped configuration over ``appliances`` (SIP ports on loopback)."""
    kamailio = shutil.which("kamailio")
    if kamailio is None:
        raise RuntimeError("kamailio is not installed (./scripts/setup installs it)")
    listing = workdir / "dispatcher.list"
    listing.write_text("".join(f"1 sip:127.0.0.1:{p}\n" for p in appliances))
    command = [kamailio, "-f", str(CONFIG), "-A", f'DISPATCHER_LIST="{listing}"', "-A", f"DS_PING_S={ping_s}"]
    command += ["-w", str(workdir), "-P", str(workdir / "kamailio.pid"), "-m", "32", "-M", "8"]
    command += ["-c"] if check else ["-DD", "-E", "-l", f"udp:127.0.0.1:{port}"]
    with (workdir / "kamailio.log").open("a") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True)


def _free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _appliance(engines: SessionEngines, config: SessionConfig) -> SipServer:
    async def handle(call: Any) -> None:
        await Session(engines=engines, config=config, **call_session_kwargs(call)).run()

    base = 32000 + secrets.randbelow(500) * 20
    server = SipServer(
        SipParams(enabled=True, port=0, max_calls=2, rtp_port_min=base, rtp_port_max=base + 18), handle
    )
    await server.start()
    return server


async def _call(port: int, question: Any) -> tuple[float | None, float | None]:
    caller = Caller([question], 8000)
    phone = Phone(caller)
    await phone.run(port)
    return (caller.latencies_s[0] if caller.latencies_s else None), phone.setup_s


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = override(load_settings(None), llm={"model": args.llm}, sip={"enabled": True})
    engines = build_engines(settings, open_bundle(settings))
    await load_engines(engines)
    config = session_config(settings)
    questions = [resample(load_audio_16k(DATA / q), 16000, 8000) for q in QUESTIONS]
    first, second = await _appliance(engines, config), await _appliance(engines, config)
    proxy_port = _free_udp_port()
    proxy = start_kamailio(workdir, [first.local_port, second.local_port], proxy_port)
    await asyncio.sleep(3)  # the first OPTIONS probes
    latency: dict[str, list[float]] = {"direct": [], "proxy": []}
    setup: dict[str, list[float]] = {"direct": [], "proxy": []}
    try:
        for index in range(args.calls):
            question = questions[index % len(questions)]
            ways = [("direct", first.local_port), ("proxy", proxy_port)]
            for way, port in ways if index % 2 == 0 else ways[::-1]:
                turn_s, setup_s = await _call(port, question)
                if turn_s is not None:
                    latency[way].append(turn_s)
                if setup_s is not None:
                    setup[way].append(setup_s)
        await second.stop()  # the second appliance dies
        stopped = time.monotonic()
        after: list[float | None] = []
        for index in range(2):
            _, setup_s = await _call(proxy_port, questions[index])
            after.append(setup_s)
        first_answered_s = time.monotonic() - stopped
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
        await first.stop()
    results: dict[str, Any] = {"llm": args.llm, "calls_each_way": args.calls}
    for way in ("direct", "proxy"):
        results[way] = {
            "turn_latency_ms": _percentiles(latency[way]),
            "setup_ms": _percentiles(setup[way]),
        }
    results["proxy_over_direct_turn_p50"] = (
        results["proxy"]["turn_latency_ms"]["p50"] / results["direct"]["turn_latency_ms"]["p50"]
    )
    results["after_an_appliance_died"] = {
        "setup_ms_first_call": None if after[0] is None else 1000 * after[0],
        "setup_ms_next_call": None if after[1] is None else 1000 * after[1],
        "both_calls_done_s": first_answered_s,
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=8, help="calls each way")
    parser.add_argument("--llm", default="gemma-270m")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    for way in ("direct", "proxy"):
        turn, setup = results[way]["turn_latency_ms"], results[way]["setup_ms"]
        print(
            f"{way:<7} turn latency p50/p95/p99 {turn['p50']:.0f} / {turn['p95']:.0f} / {turn['p99']:.0f} ms, "
            f"call setup {setup['p50']:.1f} / {setup['p95']:.1f} / {setup['p99']:.1f} ms"
        )
    print(f"proxy / direct turn latency (p50): {results['proxy_over_direct_turn_p50']:.2f}x")
    died = results["after_an_appliance_died"]
    print(
        f"after an appliance died: first call set up in {died['setup_ms_first_call']:.0f} ms, next in {died['setup_ms_next_call']:.0f} ms"
    )
    write_result("fleet", vars(args), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
