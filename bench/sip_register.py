"""Registration with a site's registrar (Kamailio with deploy/kamailio/registrar.cfg, digest auth):
how long a REGISTER takes, challenge included, and how punctually the binding is renewed, with the
machine idle and with its cores busy (as while the language model decodes).

    .venv/bin/python -m bench sip_register [--registrations 40] [--renewals 6]

Per digest algorithm (MD5, SHA-256) and load (idle, busy): ``--registrations`` REGISTER transactions
one after another (401 then 200: two round trips), p50/p95/p99 ms; then the appliance's SIP server kept
registered for ``--renewals`` renewals of a 5 s lifetime (renewed at 80%, due every 4.0 s), the lateness
of each renewal against that due time, p50/p95/max ms. Results: ~/.cache/appliance/bench-results/sip_register-<time>.json.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from appliance.config import SipParams
from appliance.sip.register import RENEW_AT
from appliance.sip.server import SipServer
from bench.machine import write_result
from bench.sip import _percentiles

REGISTRAR_CFG = Path(__file__).resolve().parents[1] / "deploy" / "kamailio" / "registrar.cfg"
LIFETIME_S = 5


def _free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free_tcp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class KamailioRegistrar:
    """Kamailio as a registrar on loopback for one extension, granting lifetimes of ``lifetime_s``."""

    def __init__(
        self,
        workdir: Path,
        *,
        extension: str,
        password: str,
        algorithm: str = "MD5",
        lifetime_s: int = LIFETIME_S,
        tcp: bool = False,
        tls_config: Path | None = None,
    ) -> None:
        """``tcp``: it listens on TCP too, on the same port number; ``tls_config``: on TLS too (a Kamailio
        tls.cfg), on ``tls_port``."""
        self.workdir, self.extension, self.password = workdir, extension, password
        self.algorithm, self.lifetime_s, self.tcp = algorithm, lifetime_s, tcp
        self.tls_config = tls_config
        self.port = _free_udp_port()
        self.tls_port = _free_tcp_port() if tls_config is not None else 0
        self.process: subprocess.Popen[str] | None = None

    @property
    def log(self) -> str:
        path = self.workdir / "kamailio.log"
        return path.read_text() if path.exists() else ""

    def start(self) -> None:
        kamailio = shutil.which("kamailio")
        if kamailio is None:
            raise RuntimeError("kamailio is not installed (./scripts/setup installs it)")
        command = [
            kamailio, "-f", str(REGISTRAR_CFG), "-DD", "-E", "-l", f"udp:127.0.0.1:{self.port}",
            "-A", f'EXTENSION="{self.extension}"', "-A", f'PASSWORD="{self.password}"',
            "-A", f'ALGORITHM="{self.algorithm}"',
            "-A", f"MIN_EXPIRES={self.lifetime_s}", "-A", f"MAX_EXPIRES={self.lifetime_s}",
            "-w", str(self.workdir), "-P", str(self.workdir / "kamailio.pid"), "-m", "32", "-M", "8",
        ]  # fmt: skip
        if self.tcp:
            command += ["-l", f"tcp:127.0.0.1:{self.port}"]
        if self.tls_config is not None:
            command += ["-A", "WITH_TLS", "-A", f'TLS_CONFIG="{self.tls_config}"']
            command += ["-l", f"tls:127.0.0.1:{self.tls_port}"]
        started = self.log.count("Listening on")  # the log is appended to across restarts
        with (self.workdir / "kamailio.log").open("a") as sink:
            self.process = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True
            )  # a group of its own: stop() ends its workers too, even when the main process hangs
        deadline = time.monotonic() + 30
        while self.log.count("Listening on") == started and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # its workers start after it prints where it listens

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # Kamailio 5.x now and then hangs in its own shutdown after every child has exited
                # (seen on a loaded 2-core machine): what stops it is the point, not how.
                self.process.kill()
                self.process.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # workers the main process left behind
            self.process = None

    def saved(self) -> int:
        return self.log.count(f"REGISTER of {self.extension} from 127.0.0.1: saved")


def _burn(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextlib.contextmanager
def _busy_cores(busy: bool) -> Iterator[None]:
    """Every core kept busy by a process of its own (the GIL would let one process use one core)."""
    if not busy:
        yield
        return
    stop = multiprocessing.Event()
    workers = [
        multiprocessing.Process(target=_burn, args=(stop,)) for _ in range(multiprocessing.cpu_count())
    ]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)


async def _nothing(call: object) -> None:
    return None


async def _measure(config: SipParams, registrations: int, renewals: int) -> dict[str, Any]:
    server = SipServer(config, _nothing)
    await server.start()
    registration = server.registration
    assert registration is not None
    sent: list[float] = []  # each renewal's first REGISTER (the one without credentials)
    send = registration.send

    def timed_send(data: bytes, addr: tuple[str, int]) -> None:
        if b"\r\nAuthorization:" not in data and b"\r\nExpires: 0\r\n" not in data:
            sent.append(time.monotonic())
        send(data, addr)

    registration.send = timed_send
    try:
        while len(sent) < renewals + 1:
            await asyncio.sleep(0.05)
        due_s = LIFETIME_S * RENEW_AT
        late_s = [b - a - due_s for a, b in itertools.pairwise(sent)]
        took_s = []
        for _ in range(registrations):
            started = time.monotonic()
            await registration.register(LIFETIME_S)
            took_s.append(time.monotonic() - started)
    finally:
        await server.stop()
    return {
        "register_ms": _percentiles(took_s),
        "renewal_late_ms": {**_percentiles(late_s), "max": 1000 * max(late_s)},
        "renewal_due_s": due_s,
    }


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for algorithm in ("MD5", "SHA-256"):
        registrar = KamailioRegistrar(
            workdir / algorithm, extension="kiosk", password="bench-secret", algorithm=algorithm
        )
        registrar.workdir.mkdir()
        password_file = registrar.workdir / "extension.password"
        password_file.write_text("bench-secret\n")
        password_file.chmod(0o600)
        registrar.start()
        config = SipParams(
            enabled=True,
            port=0,
            registrar=f"127.0.0.1:{registrar.port}",
            register_user="kiosk",
            register_password_file=password_file,
            register_expires_s=30,  # asked; the registrar grants LIFETIME_S
            register_min_interval_s=1.0,  # ... which is shorter than the default floor
        )
        try:
            for load in ("idle", "busy"):
                with _busy_cores(load == "busy"):
                    results[f"{algorithm} {load}"] = asyncio.run(
                        _measure(config, args.registrations, args.renewals)
                    )
        finally:
            registrar.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench sip_register", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--registrations", type=int, default=40, help="REGISTER transactions per case")
    parser.add_argument("--renewals", type=int, default=6, help="renewals watched per case (4 s each)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-register-") as tmp:
        results = run(args, Path(tmp))
    for case, figures in results.items():
        took, late = figures["register_ms"], figures["renewal_late_ms"]
        print(
            f"{case:<13} REGISTER (401 + 200) p50/p95/p99 {took['p50']:.1f} / {took['p95']:.1f} / "
            f"{took['p99']:.1f} ms; renewal late p50/p95/max {late['p50']:.1f} / {late['p95']:.1f} / "
            f"{late['max']:.1f} ms (due every {figures['renewal_due_s']:.1f} s)"
        )
    for algorithm in ("MD5", "SHA-256"):
        idle, busy = results[f"{algorithm} idle"], results[f"{algorithm} busy"]
        print(
            f"{algorithm}: busy / idle REGISTER p50 {busy['register_ms']['p50'] / idle['register_ms']['p50']:.2f}x"
        )
    write_result("sip_register", vars(args), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
