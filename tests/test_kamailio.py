"""Calls spread over two appliances by a real Kamailio with deploy/kamailio/kamailio.cfg, on loopback:
SIPp places calls through the proxy and each is answered with speech; an appliance killed with
SIGKILL is skipped and its calls go to the other; restarted, it takes calls again."""

from __future__ import annotations

import secrets
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from appliance.sip.message import SipResponse, parse_message
from bench.fleet import start_kamailio
from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, http_status, place_call
from tests.test_sip_helpers import free_udp_port

pytestmark = pytest.mark.skipif(
    shutil.which("kamailio") is None, reason="kamailio missing: ./scripts/setup installs it"
)


def test_the_shipped_configuration_parses(tmp_path: Path) -> None:
    checked = start_kamailio(tmp_path, [5060], 0, check=True)
    assert checked.wait(timeout=30) == 0, (tmp_path / "kamailio.log").read_text()[-2000:]


def _probe(port: int) -> tuple[int, str] | None:
    """One OPTIONS to an appliance: its status and X-Appliance-State, or None without an answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.3)
        mine = sock.getsockname()[1]
        tag = secrets.token_hex(4)
        sock.sendto(
            (
                f"OPTIONS sip:appliance@127.0.0.1:{port} SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP 127.0.0.1:{mine};branch=z9hG4bK{tag}\r\n"
                f"From: <sip:probe@127.0.0.1>;tag={tag}\r\nTo: <sip:appliance@127.0.0.1>\r\n"
                f"Call-ID: {tag}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
            ).encode(),
            ("127.0.0.1", port),
        )
        try:
            reply = parse_message(sock.recv(65535))
        except TimeoutError:
            return None
    assert isinstance(reply, SipResponse)
    return reply.status, reply.get("X-Appliance-State") or ""


def _answered(daemon: DaemonProcess) -> int:
    """Turns the appliance stored that have a transcript and a reply it played."""
    return sum(1 for t in daemon.stored_turns() if t["transcript"].strip() and t["played_reply"].strip())


def _calls(tmp_path: Path, data_dir: Path, proxy_port: int, count: int, tag: str) -> list[tuple[int, str]]:
    """``count`` calls at once through the proxy, each asking the question and staying 12 s."""
    results: list[tuple[int, str]] = [(-1, "")] * count

    def one(index: int) -> None:
        folder = tmp_path / f"{tag}-{index}"
        folder.mkdir()
        results[index] = place_call(folder, data_dir, proxy_port, scenario="call.xml", pause_ms=12000)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    for thread in threads:
        thread.join(timeout=120)
    return results


def _calls_failed(results: list[tuple[int, str]], tmp_path: Path) -> str:
    """A failure's message, as plain text so that none of it is cut: each failed call's SIPp output
    and errors, then where the proxy sent each call and why it failed over."""
    failed = [
        f"call {i}: SIPp exit {code}\n{output}" for i, (code, output) in enumerate(results) if code != 0
    ]
    proxy = (tmp_path / "kamailio.log").read_text(errors="replace").splitlines()
    routed = [line for line in proxy if any(mark in line for mark in ("<script>", "ERROR", "WARN"))]
    return "\n\n".join([*failed, "proxy:", "\n".join(routed[-40:])])


def _wait_turns(daemons: list[DaemonProcess], total: int, before: int = 0) -> int:
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        counted = sum(_answered(d) for d in daemons) - before
        if counted >= total:
            return counted
        time.sleep(0.5)
    return sum(_answered(d) for d in daemons) - before


@pytest.mark.slow
def test_calls_are_spread_over_two_appliances_and_fail_over_when_one_is_killed(
    tmp_path: Path, data_dir: Path
) -> None:
    configs = []
    for name in ("east", "west"):
        home = tmp_path / name
        home.mkdir()
        configs.append(DaemonConfig(home, free_udp_port(), free_tcp_port()))  # sip.max_calls = 2 each
    daemons = [DaemonProcess(c) for c in configs]
    proxy_port = free_udp_port()
    proxy = None
    try:
        # while its engines load, an appliance's SIP port answers 503 (a proxy sends calls elsewhere)
        seen: list[tuple[int, str]] = []
        deadline = time.monotonic() + 120
        while http_status(f"{daemons[0].base_url}/readyz") != 200 and time.monotonic() < deadline:
            answer = _probe(configs[0].sip_port)
            if answer is not None:
                seen.append(answer)
            time.sleep(0.1)
        for daemon in daemons:
            daemon.wait_ready()
        assert (503, "loading") in seen, seen
        assert _probe(configs[0].sip_port) == (200, "ready")
        proxy = start_kamailio(tmp_path, [c.sip_port for c in configs], proxy_port)
        time.sleep(3)  # the first OPTIONS probes
        east, west = daemons

        # 4 calls at once through the proxy: each answered with speech, two by each appliance
        results = _calls(tmp_path, data_dir, proxy_port, 4, "spread")
        assert [code for code, _ in results] == [0, 0, 0, 0], _calls_failed(results, tmp_path)
        assert _wait_turns(daemons, 4) == 4
        assert (_answered(east), _answered(west)) == (2, 2)

        # west is killed: the next calls are answered by east
        west.process.kill()
        west.process.communicate(timeout=30)  # (and its output pipe closed)
        killed_at = time.monotonic()
        after = _calls(tmp_path, data_dir, proxy_port, 2, "after-kill")
        routed_s = time.monotonic() - killed_at - 12.3  # the calls last 12 s, the second starts 0.3 s later
        assert [code for code, _ in after] == [0, 0], _calls_failed(after, tmp_path)
        assert _wait_turns([east], 2, before=2) == 2  # east: its first 2, then these 2
        print(f"kill to first call answered elsewhere: {routed_s:.1f} s of call setup")

        # west restarted: once its probe answers 200 again it takes calls
        daemons[1] = west = DaemonProcess(configs[1])
        west.wait_ready()
        time.sleep(3)
        before_west = _answered(west)
        results = _calls(tmp_path, data_dir, proxy_port, 2, "restarted")
        assert [code for code, _ in results] == [0, 0], _calls_failed(results, tmp_path)
        deadline = time.monotonic() + 40
        while _answered(west) == before_west and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _answered(west) > before_west
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=30)
        for daemon in daemons:
            if daemon.process.poll() is None:
                daemon.stop()
