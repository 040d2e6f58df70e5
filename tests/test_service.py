"""sd_notify and the watchdog, against a real datagram socket standing in for systemd's."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.service import Notifier, Service, ServiceControl, WatchdogSettings, start_watchdog
from appliance.service.notify import socket_send, watchdog_settings
from appliance.service.runner import EXIT_CANNOT_LOAD
from engines.errors import BackendUnavailable

REPO = Path(__file__).resolve().parents[1]


class FakeSystemd:
    """A bound AF_UNIX datagram socket that records each notification with its arrival time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address if not address.startswith("@") else "\0" + address[1:])
        self.sock.settimeout(0.05)
        self.received: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append((time.monotonic(), data.decode()))

    @property
    def messages(self) -> list[str]:
        return [message for _, message in self.received]

    def wait_for(self, text: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in message for message in self.messages):
                return
            time.sleep(0.02)
        raise AssertionError(f"no notification containing {text!r}; got {self.messages}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def fake_systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSystemd]:
    fake = FakeSystemd(str(tmp_path / "notify.sock"))
    monkeypatch.setenv("NOTIFY_SOCKET", fake.address)
    yield fake
    fake.close()


DAEMON = textwrap.dedent(
    """
    import asyncio, sys, time
    from appliance.service import Notifier, run_service

    def load():
        time.sleep(0.4)  # stands in for loading and warming the engines
        return "engines"

    async def serve(engines, service):
        service.status(f"serving with {engines}")
        await asyncio.Event().wait()

    closed = []
    notifier = Notifier(prefer_systemd=sys.argv[1] == "systemd-python")
    print(notifier.backend, flush=True)
    code = run_service(load, serve, closed.append, notifier=notifier)
    assert closed == ["engines"], closed
    sys.exit(code)
    """
)


@pytest.mark.parametrize("backend", ["systemd-python", "socket"])
def test_daemon_notifies_in_order_and_stops_on_sigterm(fake_systemd: FakeSystemd, backend: str) -> None:
    if backend == "systemd-python":
        pytest.importorskip("systemd.daemon", reason="systemd-python is not installed")
    env = {**os.environ, "NOTIFY_SOCKET": fake_systemd.address, "WATCHDOG_USEC": "200000"}
    with subprocess.Popen(
        [sys.executable, "-c", DAEMON, backend], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == backend
            fake_systemd.wait_for("serving with engines")
            time.sleep(0.35)  # a few watchdog periods while serving
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            proc.kill()
    fake_systemd.wait_for("STOPPING=1")
    lifecycle = [m for m in fake_systemd.messages if m != "WATCHDOG=1"]
    assert lifecycle == [
        "STATUS=loading and warming the engines",
        "READY=1\nSTATUS=ready",
        "STATUS=serving with engines",
        "STOPPING=1\nSTATUS=stopping",
    ]
    messages = fake_systemd.messages
    ready_at = messages.index("READY=1\nSTATUS=ready")
    # the loop pings while the engines load in a worker thread, and keeps pinging while serving
    assert "WATCHDOG=1" in messages[:ready_at]
    assert messages[ready_at:].count("WATCHDOG=1") >= 3
    assert messages[-1] == "STOPPING=1\nSTATUS=stopping"


class RecordingNotifier(Notifier):
    """The real socket protocol, plus the send time of each message (the receiver thread may lag)."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []
        super().__init__(self._send_and_record)

    def _send_and_record(self, message: str) -> bool:
        self.sent.append((time.monotonic(), message))
        return socket_send(message)


def test_watchdog_pings_stop_while_the_loop_is_blocked(fake_systemd: FakeSystemd) -> None:
    notifier = RecordingNotifier()
    marks: dict[str, float] = {}

    async def main() -> None:
        task = start_watchdog(notifier, WatchdogSettings(interval_s=0.1))  # a ping every 0.05 s
        assert task is not None
        await asyncio.sleep(0.4)
        marks["blocked"] = time.monotonic()
        time.sleep(0.8)  # a synchronous call on the loop: nothing else on it can run
        marks["unblocked"] = time.monotonic()
        await asyncio.sleep(0.4)
        task.cancel()

    asyncio.run(main())
    pings = [at for at, message in notifier.sent if message == "WATCHDOG=1"]
    before = [at for at in pings if at < marks["blocked"]]
    during = [at for at in pings if marks["blocked"] <= at < marks["unblocked"]]
    after = [at for at in pings if at >= marks["unblocked"]]
    assert len(before) >= 4
    assert during == []
    assert len(after) >= 4
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) >= 0.75  # longer than WatchdogSec: systemd would restart the daemon
    fake_systemd.wait_for("WATCHDOG=1")
    deadline = time.monotonic() + 5
    while len(fake_systemd.messages) < len(pings) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake_systemd.messages == ["WATCHDOG=1"] * len(pings)  # every ping reached the socket


def test_failed_health_check_withholds_pings(fake_systemd: FakeSystemd) -> None:
    notifier = RecordingNotifier()
    healthy = {"now": True}
    marks: dict[str, float] = {}

    async def main() -> None:
        task = start_watchdog(notifier, WatchdogSettings(0.1), healthy=lambda: healthy["now"])
        assert task is not None
        await asyncio.sleep(0.3)
        healthy["now"] = False
        marks["unhealthy"] = time.monotonic()
        await asyncio.sleep(0.4)
        task.cancel()

    asyncio.run(main())
    pings = [at for at, message in notifier.sent if message == "WATCHDOG=1"]
    assert len(pings) >= 3
    assert all(at < marks["unhealthy"] for at in pings)


def test_failed_load_reports_the_error_and_never_says_ready(fake_systemd: FakeSystemd) -> None:
    def load() -> str:
        raise RuntimeError("bundle /nowhere has no manifest.json")

    async def serve(resources: str, control: ServiceControl) -> None:
        raise AssertionError("serve must not run")

    service = Service(load, serve, notifier=Notifier(prefer_systemd=False), watchdog=None)
    assert asyncio.run(service.run()) == 1
    fake_systemd.wait_for("failed")
    assert fake_systemd.messages == [
        "STATUS=loading and warming the engines",
        "STATUS=failed: bundle /nowhere has no manifest.json",
    ]


def test_engines_that_cannot_load_exit_78_so_systemd_does_not_restart(fake_systemd: FakeSystemd) -> None:
    def load() -> str:
        raise BackendUnavailable("llama.cpp cannot run here: died on SIGILL", fix="rebuild it")

    async def serve(resources: str, control: ServiceControl) -> None:
        raise AssertionError("serve must not run")

    service = Service(load, serve, notifier=Notifier(prefer_systemd=False), watchdog=None)
    assert asyncio.run(service.run()) == EXIT_CANNOT_LOAD == 78
    fake_systemd.wait_for("failed")
    assert "SIGILL (fix: rebuild it)" in fake_systemd.messages[-1]
    unit = (Path(__file__).parents[1] / "systemd" / "appliance.service").read_text()
    assert "RestartPreventExitStatus=78" in unit.splitlines()


def test_a_crashing_daemon_exits_non_zero_so_systemd_restarts_it(fake_systemd: FakeSystemd) -> None:
    async def serve(resources: str, control: ServiceControl) -> None:
        raise OSError("audio device disappeared")

    closed: list[str] = []
    service = Service(lambda: "engines", serve, closed.append, notifier=Notifier(prefer_systemd=False))
    assert asyncio.run(service.run()) == 1
    assert closed == ["engines"]
    fake_systemd.wait_for("audio device disappeared")
    assert fake_systemd.messages[-1] == "STATUS=failed: audio device disappeared"


def test_runs_unchanged_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    served: list[str] = []

    async def serve(resources: str, control: ServiceControl) -> None:
        control.status("serving")
        served.append(resources)

    notifier = Notifier()
    assert notifier.enabled is False
    assert notifier.ready() is False
    assert asyncio.run(Service(lambda: "engines", serve, notifier=notifier).run()) == 0
    assert served == ["engines"]


def test_abstract_socket_address_and_long_status(tmp_path: Path) -> None:
    fake = FakeSystemd(f"@appliance-test-{os.getpid()}")
    try:
        env = {"NOTIFY_SOCKET": fake.address}
        assert socket_send("STATUS=" + "x" * 10, env) is True
        notifier = Notifier(lambda message: socket_send(message, env))
        notifier.status("line one\nline two " + "y" * 500)
        fake.wait_for("line one line two")
        status = fake.messages[-1]
        assert status.startswith("STATUS=line one line two y")
        assert len(status) == len("STATUS=") + 200
    finally:
        fake.close()


def test_notify_to_a_missing_socket_is_a_warning_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}
    assert socket_send("READY=1", env) is False
    assert "cannot notify systemd" in caplog.text


def test_watchdog_settings_follow_systemd_environment() -> None:
    assert watchdog_settings({}) is None
    settings = watchdog_settings({"WATCHDOG_USEC": "30000000"})
    assert settings == WatchdogSettings(30.0)
    assert settings.ping_every_s == 15.0
    assert watchdog_settings({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == settings
    assert watchdog_settings({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_settings({"WATCHDOG_USEC": "soon"}) is None
