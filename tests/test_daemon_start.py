"""`appliance run` as a process with SIP and the admin page, started with configurations that used to
stop it: the start never dies where it can serve. A microphone that is not there starts the daemon
without its local session, SIP and the admin page up and the problem in STATUS; a turn database that
is a folder starts it on the last configuration that started. Neither becomes the last good one."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, http_status
from tests.test_service import FakeSystemd
from tests.test_sip_helpers import LOOPBACK, free_udp_port


def _options_status(port: int) -> int:
    """The status of a SIP OPTIONS to the daemon (0 when nothing answered)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.settimeout(2.0)
        local = sock.getsockname()[1]
        sock.sendto(
            (
                f"OPTIONS sip:appliance@{LOOPBACK} SIP/2.0\r\nVia: SIP/2.0/UDP {LOOPBACK}:{local};branch=z9hG4bKstart\r\n"
                f"From: <sip:probe@{LOOPBACK}>;tag=start\r\nTo: <sip:appliance@{LOOPBACK}>\r\nCall-ID: start-probe\r\n"
                "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
            ).encode(),
            (LOOPBACK, port),
        )
        try:
            return int(sock.recv(65535).split(b" ", 2)[1])
        except (TimeoutError, ValueError, IndexError):
            return 0


def _run(config: DaemonConfig, tmp_path: Path, name: str) -> tuple[list[str], str, int, int]:
    """Start, probe SIP, stop: (what it told systemd, its output, the OPTIONS status, /healthz)."""
    fake = FakeSystemd(str(tmp_path / f"{name}.sock"))
    daemon = DaemonProcess(config, env={**os.environ, "NOTIFY_SOCKET": fake.address})
    try:
        daemon.wait_ready()
        fake.wait_for("READY=1")
        time.sleep(1.0)  # the listeners' check after READY
        options, health = _options_status(config.sip_port), http_status(f"{daemon.base_url}/healthz")
    finally:
        output = daemon.stop()
        fake.close()
    assert daemon.process.returncode == 0, output[-3000:]
    return fake.messages, output, options, health


@pytest.mark.slow
def test_a_start_that_cannot_be_whole_serves_what_it_can_and_is_not_kept(tmp_path: Path) -> None:
    config = DaemonConfig(tmp_path, free_udp_port(), free_tcp_port(), llm="gemma-270m", reply_tokens=8)
    path = config.write()
    kept = path.with_name(f".{path.name}.last-good")
    kept.write_bytes(path.read_bytes())  # as a start of this file would have left it

    config.audio = 'input = "microphone"\ninput_device = "no-such-capture-device"'
    messages, output, options, health = _run(config, tmp_path, "microphone")
    assert options == 200 and health == 200, output[-3000:]
    degraded = [m for m in messages if m.startswith("STATUS=degraded:")]
    assert degraded and "no local audio session" in degraded[0] and "audio.input_device" in degraded[0]
    assert "Traceback" not in output
    assert kept.read_bytes() != path.read_bytes()  # not the last good one

    config.audio = 'input = "none"'
    config.db_path = tmp_path  # a folder
    messages, output, options, health = _run(config, tmp_path, "folder")
    assert options == 200 and health == 200, output[-3000:]
    assert "running with the last configuration that started" in output, output[-3000:]
    assert "trace.db_path" in output and "is a folder" in output
    assert any(m.startswith("STATUS=degraded:") for m in messages), messages
    assert kept.read_bytes() != path.read_bytes()
    assert (tmp_path / "turns.sqlite3").is_file()  # the kept configuration's store
