"""Run inside a network and mount namespace of its own (``unshare -n -m``) by tests/test_airgap.py:
`appliance run` with SIP and the admin page on, a real SIPp call asking a question, admin requests,
for at least ``--hold-s`` seconds, while every DNS query and every socket call is recorded.

The namespace has loopback, and one veth interface with a "resolver" (10.53.0.1) that
/etc/resolv.conf points at and a default route, so a library that tried to look up or reach a
host would really send: the recorder counts the queries, strace the connects. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

from engines.audio import load_audio, resample
from tests.test_sip_helpers import SCENARIOS, free_udp_port, run_sipp, write_rtp_pcap

RESOLVER = "10.53.0.1"
QUESTION = "speech/en/google_audio.wav"


def _sh(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


def make_network(tmp: Path) -> None:
    _sh("ip", "link", "set", "lo", "up")
    _sh("ip", "link", "add", "wan0", "type", "veth", "peer", "name", "wan1")  # its far end hears nothing
    _sh("ip", "addr", "add", f"{RESOLVER}/24", "dev", "wan0")
    _sh("ip", "link", "set", "wan1", "up")
    _sh("ip", "link", "set", "wan0", "up")
    _sh("ip", "route", "add", "default", "dev", "wan0")
    resolv = tmp / "resolv.conf"
    resolv.write_text(f"nameserver {RESOLVER}\n")
    _sh("mount", "--bind", str(resolv), "/etc/resolv.conf")


class DnsRecorder:
    """Every datagram and TCP connection to the resolver address, on port 53."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._udp.bind((RESOLVER, 53))
        self._tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._tcp.bind((RESOLVER, 53))
        self._tcp.listen(8)
        for target in (self._serve_udp, self._serve_tcp):
            threading.Thread(target=target, daemon=True).start()

    def _serve_udp(self) -> None:
        while True:
            data, peer = self._udp.recvfrom(4096)
            self.queries.append(f"udp from {peer}: {_qname(data[12:])}")

    def _serve_tcp(self) -> None:
        while True:
            conn, peer = self._tcp.accept()
            self.queries.append(f"tcp from {peer}: {_qname(conn.recv(4096)[14:])}")
            conn.close()


def _qname(question: bytes) -> str:
    labels, index = [], 0
    while index < len(question) and question[index]:
        length = question[index]
        labels.append(question[index + 1 : index + 1 + length].decode(errors="replace"))
        index += 1 + length
    return ".".join(labels)


def write_config(tmp: Path, sip_port: int, admin_port: int) -> Path:
    config = tmp / "appliance.toml"
    config.write_text(
        f"""
[audio]
input = "none"
[llm]
model = "gemma-270m"
max_reply_tokens = 24
[bundle]
verify_on_start = false
[trace]
db_path = "{tmp / "turns.sqlite3"}"
[sip]
enabled = true
bind_host = "127.0.0.1"
port = {sip_port}
allow_from = ["127.0.0.0/8"]
[admin]
enabled = true
bind_host = "127.0.0.1"
port = {admin_port}
metrics_public = true
users_file = "{tmp / "admin-users"}"
password_file = "{tmp / "admin-password"}"
""",
        encoding="utf-8",
    )
    return config


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


def _free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Server:
    def __init__(self, port: int) -> None:
        self.local_port = port


def call(tmp: Path, data_dir: Path, sip_port: int) -> tuple[int, str]:
    audio, rate = load_audio(data_dir / QUESTION)
    question = resample(audio, rate, 8000)
    question = question / float(np.abs(question).max()) * 0.5
    silence = np.zeros(8000 * 6, np.float32)
    pcap = write_rtp_pcap(
        tmp / "question.pcap", np.concatenate([np.zeros(4000, np.float32), question, silence])
    )
    scenario = tmp / "call_until_bye_long.xml"
    scenario.write_text(
        (SCENARIOS / "call_until_bye.xml").read_text().replace('timeout="30000"', 'timeout="40000"')
    )
    result = asyncio.run(
        run_sipp(
            os.path.relpath(scenario, SCENARIOS),
            _Server(sip_port),  # type: ignore[arg-type]
            keys={"rtp_port": str(free_udp_port()), "codecs": "0 101", "pcap": str(pcap)},
            timeout_s=45,
            workdir=tmp,
        )
    )
    return result.returncode, result.output[-1500:]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tmp", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--hold-s", type=float, default=40.0)
    args = parser.parse_args()
    tmp = args.tmp
    make_network(tmp)
    dns = DnsRecorder()
    sip_port, admin_port = free_udp_port(), _free_tcp_port()
    config = write_config(tmp, sip_port, admin_port)
    trace = tmp / "net.trace"
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "NOTIFY_SOCKET")}
    command = ["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace)]
    command += [str(Path(sys.prefix) / "bin" / "appliance"), "run", "--config", str(config)]
    daemon = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{admin_port}"
    started = time.monotonic()
    while _get(f"{base}/readyz") != 200 and time.monotonic() - started < 300 and daemon.poll() is None:
        time.sleep(0.5)
    ready_s = time.monotonic() - started
    sipp_rc, sipp_output = call(tmp, args.data, sip_port)
    pages = {path: _get(base + path) for path in ("/healthz", "/readyz", "/metrics", "/login", "/api/status")}
    while time.monotonic() - started < ready_s + args.hold_s:
        time.sleep(1.0)
    # SIGTERM to the daemon itself: strace, signalled, would only detach and leave it running.
    for child in psutil.Process(daemon.pid).children():
        child.send_signal(signal.SIGTERM)
    try:
        output, _ = daemon.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(daemon.pid).children(recursive=True):
            child.kill()
        output, _ = daemon.communicate(timeout=30)
    with sqlite3.connect(tmp / "turns.sqlite3") as db:
        transcripts = [json.loads(r[0])["transcript"] for r in db.execute("SELECT record FROM turns")]
    lines = trace.read_text().splitlines() if trace.exists() else []
    outside = [
        line
        for line in lines
        if ("AF_INET" in line or "AF_INET6" in line)
        and not any(
            local in line for local in ('"127.', '"::1"', '"::ffff:127.', 'sin_addr=inet_addr("0.0.0.0")')
        )
    ]
    print(
        json.dumps(
            {
                "returncode": daemon.returncode,
                "ready_s": round(ready_s, 1),
                "held_s": round(time.monotonic() - started, 1),
                "dns_queries": dns.queries,
                "outside_connects": outside[:20],
                "inet_calls": sum("AF_INET" in line for line in lines),
                "sipp_returncode": sipp_rc,
                "sipp_output": sipp_output if sipp_rc else "",
                "pages": pages,
                "transcripts": transcripts,
                "daemon_output": output[-3000:],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
