"""Run inside a network and mount namespace of its own (``unshare -n -m``) by tests/test_airgap.py:
`appliance run` with SIP and the admin page on, a real SIPp call asking a question, admin requests,
and INVITEs whose SDP names a host instead of an address (legal SDP a PBX may send: resolving it
froze the daemon and sent DNS queries), for at least ``--hold-s`` seconds, while every DNS query and
every socket call is recorded.

The namespace has loopback, and one veth interface with a "resolver" (10.53.0.1) that
/etc/resolv.conf points at and a default route, so a library that tried to look up or reach a
host would really send: the recorder counts the queries, strace the connects. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, http_status, place_call
from tests.test_sip_helpers import free_udp_port

RESOLVER = "10.53.0.1"
_LOOPBACK = ('"127.', '"::1"', '"::ffff:127.')


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


def named_sdp_invites(sip_port: int, count: int) -> list[int]:
    """``count`` INVITEs with ``c=IN IP4 media.example.net``: the final status of each (0: none)."""
    statuses = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(2.0)
        local = sock.getsockname()[1]
        for n in range(count):
            sdp = (
                "v=0\r\no=pbx 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 media.example.net\r\nt=0 0\r\n"
                "m=audio 40000 RTP/AVP 0\r\n"
            )
            invite = (
                f"INVITE sip:appliance@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{local};branch=z9hG4bKnamed{n}\r\n"
                f"From: <sip:pbx@127.0.0.1>;tag=named{n}\r\nTo: <sip:appliance@127.0.0.1>\r\nCall-ID: named-{n}\r\n"
                f"CSeq: 1 INVITE\r\nContact: <sip:pbx@127.0.0.1:{local}>\r\nContent-Type: application/sdp\r\n"
                f"Content-Length: {len(sdp)}\r\n\r\n{sdp}"
            )
            sock.sendto(invite.encode(), ("127.0.0.1", sip_port))
            status = 0
            try:
                while status < 200:
                    status = int(sock.recv(65535).split(b" ", 2)[1])
            except (TimeoutError, ValueError, IndexError):
                pass
            statuses.append(status)
    return statuses


def slowest_health_s(base: str, count: int) -> float:
    slowest = 0.0
    for _ in range(count):
        started = time.monotonic()
        http_status(base + "/healthz")
        slowest = max(slowest, time.monotonic() - started)
    return slowest


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tmp", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--hold-s", type=float, default=25.0)
    args = parser.parse_args()
    tmp = args.tmp
    make_network(tmp)
    dns = DnsRecorder()
    config = DaemonConfig(tmp, sip_port=free_udp_port(), admin_port=free_tcp_port())
    trace = tmp / "net.trace"
    # The product must switch ONNX Runtime's telemetry off itself: not inherited from this process.
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    strace = ["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace)]
    daemon = DaemonProcess(config, wrapper=strace, env=env)
    started = time.monotonic()
    ready_s = daemon.wait_ready()
    sipp_rc, sipp_output = place_call(tmp, args.data, config.sip_port, scenario="call.xml", pause_ms=10000)
    base = daemon.base_url
    pages = {
        path: http_status(base + path)
        for path in ("/healthz", "/readyz", "/metrics", "/login", "/api/status")
    }
    named = named_sdp_invites(config.sip_port, 5)
    health_s = slowest_health_s(base, 5)
    while time.monotonic() - started < ready_s + args.hold_s:
        time.sleep(1.0)
    output = daemon.stop()
    lines = trace.read_text().splitlines() if trace.exists() else []
    outside = [
        line
        for line in lines
        if ("AF_INET" in line or "AF_INET6" in line) and not any(local in line for local in _LOOPBACK)
    ]
    print(
        json.dumps(
            {
                "returncode": daemon.process.returncode,
                "ready_s": round(ready_s, 1),
                "held_s": round(time.monotonic() - started, 1),
                "dns_queries": dns.queries,
                "outside_connects": outside[:20],
                "inet_calls": sum("AF_INET" in line for line in lines),
                "sipp_returncode": sipp_rc,
                "sipp_output": sipp_output if sipp_rc else "",
                "pages": pages,
                "named_sdp_statuses": named,
                "slowest_health_s": round(health_s, 3),
                "transcripts": [turn["transcript"] for turn in daemon.stored_turns()],
                "daemon_output": output[-3000:],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
