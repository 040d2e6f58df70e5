"""Hostile input against `appliance run` as a process (SIP, registration, the admin page), one daemon for
the module: a caller who answers the transfer with its own digest challenge, a keypad flood over SIP INFO
and RFC 4733, media from a stranger, a registrar sending numbers of 5,000 digits, an admin demoted while
logged in, settings that would inject SIP headers. The daemon's responsiveness during the flood
(/healthz, the other call's RTP gap) is printed, and bounded where the machine's load cannot decide it."""

from __future__ import annotations

import itertools
import os
import re
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from appliance.admin.users import set_password
from appliance.auth.passwords import ScryptParams, write_password_file
from appliance.rtp.dtmf import TelephoneEvent
from appliance.sip.message import SipRequest, SipResponse, parse_message
from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port
from tests.test_sip_helpers import LOOPBACK, free_udp_port, requires_sipp

pytestmark = requires_sipp  # the same machine set-up as the SIP call tests (kamailio not needed)

ADMIN_PASSWORD = "hostile-admin-42"
EXTENSION_PASSWORD = "ext-secret-2301"
HUGE = "9" * 5000


class FakeRegistrar(threading.Thread):
    """A registrar on loopback that accepts every REGISTER with a lifetime of 5,000 digits."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.registers = 0
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                data, source = self.sock.recvfrom(65535)
            except OSError:
                continue
            request = parse_message(data)
            if not isinstance(request, SipRequest) or request.method != "REGISTER":
                continue
            self.registers += 1
            headers = "".join(f"{n}: {request.get(n)}\r\n" for n in ("Via", "From", "To", "Call-ID", "CSeq"))
            contact = request.get("Contact") or ""
            answer = f"SIP/2.0 200 OK\r\n{headers}Contact: {contact};expires={HUGE}\r\nExpires: {HUGE}\r\n"
            self.sock.sendto((answer + "Content-Length: 0\r\n\r\n").encode(), source)

    def close(self) -> None:
        self._stopping.set()
        self.join(2)
        self.sock.close()


@dataclass
class Caller:
    """A phone on loopback placing one call: INVITE/ACK, requests in the dialog, and RTP both ways."""

    appliance_port: int
    host: str = LOOPBACK
    call_id: str = field(default_factory=lambda: secrets.token_hex(6))
    received: list[SipRequest | SipResponse] = field(default_factory=list)
    rtp_arrivals: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sip.bind((self.host, 0))
        self.sip.settimeout(0.1)
        self.port = int(self.sip.getsockname()[1])
        self.rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rtp.bind((self.host, 0))
        self.rtp.settimeout(0.1)
        self.rtp_port = int(self.rtp.getsockname()[1])
        self.cseq = 1
        self.to_tag = ""
        self.remote_rtp: tuple[str, int] | None = None
        self._stopping = threading.Event()
        self._listeners = [
            threading.Thread(target=self._speak_silence, daemon=True),
            threading.Thread(target=self._listen, daemon=True),
            threading.Thread(target=self._media, daemon=True),
        ]
        for listener in self._listeners:
            listener.start()

    def _headers(self, method: str, cseq: int, branch: str) -> str:
        to_tag = f";tag={self.to_tag}" if self.to_tag else ""
        return (
            f"Via: SIP/2.0/UDP {self.host}:{self.port};branch=z9hG4bK{branch}\r\n"
            f"From: <sip:caller@{self.host}>;tag={self.call_id}-t\r\nTo: <sip:appliance@{LOOPBACK}>{to_tag}\r\n"
            f"Call-ID: {self.call_id}\r\nCSeq: {cseq} {method}\r\nMax-Forwards: 70\r\n"
            f"Contact: <sip:caller@{self.host}:{self.port}>\r\n"
        )

    def send(self, method: str, body: str = "", content_type: str = "") -> None:
        self.cseq += 1
        branch = secrets.token_hex(6)
        typed = f"Content-Type: {content_type}\r\n" if content_type else ""
        message = f"{method} sip:appliance@{LOOPBACK}:{self.appliance_port} SIP/2.0\r\n"
        message += (
            self._headers(method, self.cseq, branch) + typed + f"Content-Length: {len(body)}\r\n\r\n{body}"
        )
        self.sip.sendto(message.encode(), (LOOPBACK, self.appliance_port))

    def call(self) -> None:
        sdp = (
            f"v=0\r\no=c 1 1 IN IP4 {self.host}\r\ns=-\r\nc=IN IP4 {self.host}\r\nt=0 0\r\n"
            f"m=audio {self.rtp_port} RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n"
        )
        invite = f"INVITE sip:appliance@{LOOPBACK}:{self.appliance_port} SIP/2.0\r\n"
        invite += self._headers("INVITE", 1, "inv" + self.call_id)
        invite += f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}"
        self.sip.sendto(invite.encode(), (LOOPBACK, self.appliance_port))
        ok = self.wait_for(
            lambda m: isinstance(m, SipResponse) and m.status == 200 and "INVITE" in (m.get("CSeq") or ""), 30
        )
        assert isinstance(ok, SipResponse), self.received[-5:]
        self.to_tag = re.search(r";tag=([^;>\s]+)", ok.get("To") or "")[1]  # type: ignore[index]
        media = re.search(r"c=IN IP4 (\S+)[\s\S]*m=audio (\d+)", ok.body.decode())
        assert media is not None
        self.remote_rtp = (media[1], int(media[2]))
        ack = f"ACK sip:appliance@{LOOPBACK}:{self.appliance_port} SIP/2.0\r\n" + self._headers(
            "ACK", 1, "ack" + self.call_id
        )
        self.sip.sendto((ack + "Content-Length: 0\r\n\r\n").encode(), (LOOPBACK, self.appliance_port))

    def wait_for(
        self, wanted: Callable[[SipRequest | SipResponse], bool], timeout_s: float
    ) -> SipRequest | SipResponse | None:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for message in self.received[seen:]:
                if wanted(message):
                    return message
            seen = len(self.received)
            time.sleep(0.05)
        return None

    def answer(
        self,
        request: SipRequest,
        status: int,
        reason: str,
        extra: str = "",
        *,
        via: socket.socket | None = None,
    ) -> None:
        """Respond to ``request``, from this phone's socket or ``via`` another (a source it forges)."""
        headers = "".join(f"{n}: {request.get(n)}\r\n" for n in ("Via", "From", "To", "Call-ID", "CSeq"))
        (via or self.sip).sendto(
            f"SIP/2.0 {status} {reason}\r\n{headers}{extra}Content-Length: 0\r\n\r\n".encode(),
            (LOOPBACK, self.appliance_port),
        )

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                data, _ = self.sip.recvfrom(65535)
            except OSError:
                continue
            message = parse_message(data)
            self.received.append(message)
            if isinstance(message, SipRequest) and message.method in ("BYE", "NOTIFY", "OPTIONS"):
                self.answer(message, 200, "OK")

    def _speak_silence(self) -> None:
        """A phone sends media all through a call (the appliance's session runs on its frames)."""
        sequence = 0
        while not self._stopping.is_set():
            if self.remote_rtp is not None:
                self.send_rtp(0, b"\xff" * 160, 30000 + sequence, 160 * sequence)
                sequence += 1
            time.sleep(0.02)

    def _media(self) -> None:
        while not self._stopping.is_set():
            try:
                self.rtp.recvfrom(2048)
            except OSError:
                continue
            self.rtp_arrivals.append(time.monotonic())

    def send_rtp(
        self,
        payload_type: int,
        payload: bytes,
        sequence: int,
        timestamp: int,
        source: socket.socket | None = None,
    ) -> None:
        assert self.remote_rtp is not None
        header = struct.pack("!BBHII", 0x80, payload_type, sequence & 0xFFFF, timestamp & 0xFFFFFFFF, 0x1234)
        (source or self.rtp).sendto(header + payload, self.remote_rtp)

    def longest_rtp_gap_s(self, since: float) -> float:
        times = [t for t in self.rtp_arrivals if t >= since]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def hang_up(self) -> None:
        self.send("BYE")
        time.sleep(0.3)
        self._stopping.set()
        for listener in self._listeners:
            listener.join(1)
        self.sip.close()
        self.rtp.close()


@dataclass
class Running:
    daemon: DaemonProcess
    config: DaemonConfig
    registrar: FakeRegistrar
    admin: httpx.Client
    folder: Path


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp("hostile")
    write_password_file(folder / "admin-password", ADMIN_PASSWORD, ScryptParams(log2_n=10))
    extension = folder / "extension.password"
    extension.write_text(EXTENSION_PASSWORD + "\n")
    extension.chmod(0o600)
    registrar = FakeRegistrar()
    registrar.start()
    sip = (
        f'registrar = "127.0.0.1:{registrar.port}"\nregister_user = "2301"\n'
        f'register_password_file = "{extension}"\n'
    )
    call = '[call]\noperator_digit = "0"\noperator_target = "desk"\ntransfer_targets = { desk = "2100" }\n\n'
    config = DaemonConfig(folder, free_udp_port(), free_tcp_port(), extra="")
    text = config.write().read_text().replace("[sip]\n", call + "[sip]\n" + sip, 1)
    (folder / "appliance.toml").write_text(text)
    config.write = lambda: folder / "appliance.toml"  # type: ignore[method-assign]
    daemon = DaemonProcess(config)
    try:
        daemon.wait_ready()
        with httpx.Client(base_url=daemon.base_url, timeout=10) as admin:
            yield Running(daemon, config, registrar, admin, folder)
    finally:
        log = daemon.stop()
        registrar.close()
        (folder / "daemon.log").write_text(log)


def _log(running: Running) -> str:
    return (running.folder / "daemon.log").read_text() if (running.folder / "daemon.log").exists() else ""


def _login(client: httpx.Client, user: str, password: str) -> str:
    response = client.post("/api/login", json={"username": user, "password": password})
    assert response.status_code == 200, response.text
    return str(response.json()["csrf_token"])


@pytest.mark.parametrize("source", ["caller", "forged-registrar"])
def test_a_caller_who_challenges_the_transfer_gets_no_digest_of_the_extensions_password(
    running: Running, source: str
) -> None:
    """The caller answers the REFER sent to it with a 401, from its own address or from a packet whose
    source is the registrar's address and port (on a LAN anyone can forge a UDP source; here it is sent
    from the registrar's own socket). Either way the REFER went to the caller, so nothing is sent again."""
    caller = Caller(running.config.sip_port)
    via = running.registrar.sock if source == "forged-registrar" else None
    try:
        caller.call()
        caller.send("INFO", "Signal=0\r\nDuration=160\r\n", "application/dtmf-relay")  # the operator key
        refer = caller.wait_for(lambda m: isinstance(m, SipRequest) and m.method == "REFER", 30)
        assert isinstance(refer, SipRequest), caller.received[-5:]
        assert "sip:2100@127.0.0.1:" in (refer.get("Refer-To") or "")  # the registrar's port is kept
        caller.answer(
            refer,
            401,
            "Unauthorized",
            'WWW-Authenticate: Digest realm="anything", nonce="fixed", qop="auth"\r\n',
            via=via,
        )
        again = caller.wait_for(
            lambda m: isinstance(m, SipRequest) and m.method == "REFER" and m is not refer, 5
        )
        assert again is None, again  # with or without an Authorization, nothing more is sent to it
    finally:
        caller.hang_up()


def test_a_keypad_flood_is_capped_and_the_daemon_and_the_other_call_stay_responsive(running: Running) -> None:
    victim, flooder = Caller(running.config.sip_port), Caller(running.config.sip_port)
    try:
        victim.call()
        flooder.call()
        started = time.monotonic()
        healthz: list[float] = []
        bad = 0
        for index in range(3000):
            if index % 300 == 0:
                asked = time.monotonic()
                assert running.admin.get("/healthz").status_code == 200
                healthz.append(time.monotonic() - asked)
            if index % 100 == 0:  # not a key, and an absurd duration: refused with 400
                flooder.send("INFO", "Signal=hello\r\n", "application/dtmf-relay")
                flooder.send("INFO", "Signal=5\r\nDuration=99999999999\r\n", "application/dtmf-relay")
                bad += 2
            flooder.send("INFO", f"Signal={index % 10}\r\nDuration=100\r\n", "application/dtmf-relay")
            # RFC 4733 keys too: one end packet per key, 1 ms apart in RTP time
            flooder.send_rtp(101, TelephoneEvent(index % 10, True, 10, 800).to_bytes(), index, 8 * index)
            flooder.send_rtp(101, b"\x01", index, 8 * index)  # a bad telephone-event packet
        flood_s = time.monotonic() - started
        time.sleep(1.0)
        gap = victim.longest_rtp_gap_s(started)
        refused = [m for m in flooder.received if isinstance(m, SipResponse) and m.status == 400]
        metrics = running.admin.get("/metrics").text
        print(
            f"flood of 3000 INFO + 6000 RTP in {flood_s:.1f} s: /healthz longest {max(healthz) * 1000:.0f} ms, "
            f"the other call's longest RTP gap {gap * 1000:.0f} ms"
        )
        # UDP under a flood loses datagrams (either side's buffer): some of each refusal came back.
        reasons = {m.reason.split("(")[1].split()[0] for m in refused if isinstance(m, SipResponse)}
        assert 0 < len(refused) <= bad and reasons == {"Signal", "Duration"}, reasons
        keys = re.search(r'appliance_sip_events_total\{kind="keys_refused"\} (\S+)', metrics)
        assert keys is not None and float(keys[1]) > 0, metrics[-2000:]  # many were over the limits
        assert max(healthz) < 2.0  # a bound a loaded machine meets; the figure is printed
        time.sleep(2.5)  # the gate's second lets keys through again: # ends the number typed
        flooder.send("INFO", "Signal=#\r\nDuration=100\r\n", "application/dtmf-relay")
        deadline = time.monotonic() + 60
        typed: list[dict[str, object]] = []
        while not typed and time.monotonic() < deadline:
            typed = [t for t in running.daemon.stored_turns() if t.get("endpoint_by") == "keypad"]
            time.sleep(0.5)
        # The typed turn was answered and stored (the call went on), with at most 32 keys of it.
        assert typed, running.daemon.stored_turns()
        digits = re.sub(r"\D", "", str(typed[0].get("transcript") or ""))
        assert 0 < len(digits) <= 32, typed[0]
        assert flooder.wait_for(lambda m: isinstance(m, SipRequest) and m.method == "BYE", 0.1) is None
    finally:
        flooder.hang_up()
        victim.hang_up()


def test_media_from_a_stranger_is_dropped_logged_and_counted(running: Running) -> None:
    caller = Caller(running.config.sip_port)
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.2", 0))
    try:
        caller.call()
        before = running.admin.get("/metrics").text
        for index in range(50):
            caller.send_rtp(0, b"\xff" * 160, index, 160 * index, source=stranger)
        time.sleep(0.5)
        after = running.admin.get("/metrics").text
    finally:
        stranger.close()
        caller.hang_up()

    def dropped(metrics: str) -> float:
        found = re.search(r'appliance_sip_events_total\{kind="media_dropped"\} (\S+)', metrics)
        assert found is not None, metrics[-2000:]
        return float(found[1])

    assert dropped(after) - dropped(before) == 50


def test_a_registrar_granting_5000_digits_does_not_stop_the_registration(running: Running) -> None:
    _login(running.admin, "admin", ADMIN_PASSWORD)
    deadline = time.monotonic() + 20
    shown: dict[str, object] = {}
    while time.monotonic() < deadline:
        shown = running.admin.get("/api/status").json()["sip_registration"]
        if shown["state"] == "registered":
            break
        time.sleep(0.3)
    assert shown["state"] == "registered", shown
    assert shown["expires_s"] == 7 * 86400, shown  # bounded, not a 5,000-digit integer


def test_a_demoted_or_removed_admin_loses_the_right_at_once(running: Running) -> None:
    users = running.folder / "admin-users"
    set_password(users, "ops", "admin", "ops-password-77")
    with httpx.Client(base_url=running.daemon.base_url, timeout=10) as ops:
        csrf = _login(ops, "ops", "ops-password-77")
        assert ops.get("/api/session").json()["role"] == "admin"
        set_password(users, "ops", "viewer", "ops-password-77")  # `appliance admin passwd --role viewer`
        change = {"changes": {"agent": {"site_name": "demoted"}}}
        put = ops.put("/api/config", json=change, headers={"X-CSRF-Token": csrf})
        assert put.status_code == 401 and put.json()["error"] == "account_changed", put.text
        assert ops.get("/api/session").status_code == 401
        csrf = _login(ops, "ops", "ops-password-77")
        assert ops.get("/api/session").json()["role"] == "viewer"
        set_password(users, "ops", "viewer", "a-new-password-88")  # a password change
        assert ops.get("/api/session").status_code == 401


def test_the_admin_page_refuses_settings_that_would_break_calls(running: Running) -> None:
    csrf = _login(running.admin, "admin", ADMIN_PASSWORD)
    for key, value, problem in (
        ("transfer_targets", {"desk": "2100>\r\nRefer-To: <sip:9@10.9.9.9"}, "neither an extension"),
        ("transfer_preamble", "{oops}", "not a placeholder"),
    ):
        changed = {"changes": {"call": {key: value}}}
        answer = running.admin.put("/api/config", json=changed, headers={"X-CSRF-Token": csrf})
        assert answer.status_code in (400, 422) and problem in answer.text and key in answer.text, answer.text


def _hostile_facts_files(running: Running) -> dict[str, Path]:
    """Files a remote admin could name as the site's facts: each must be refused at once."""
    folder = running.folder / "hostile-facts"
    folder.mkdir(exist_ok=True)
    pipe = folder / "pipe.md"
    if not pipe.exists():
        os.mkfifo(pipe)  # nobody writes to it: reading it would wait for ever
    large = folder / "large.md"
    with large.open("wb") as out:  # sparse: 400 MB said, nothing written
        out.truncate(400 * 1024 * 1024)
    return {
        "a named pipe": pipe,
        "/dev/zero": Path("/dev/zero"),
        "a 400 MB file": large,
        "the SIP password file": running.folder / "extension.password",
        "the admin users file": running.folder / "admin-users",
    }


def test_hostile_facts_files_are_refused_at_once_and_config_writes_keep_working(running: Running) -> None:
    """A named pipe held a config write (and every later one) for ever; /dev/zero and a 405 MB file
    took gigabytes and the event loop; the SIP password file put a secret into the model's prompt. Each
    is refused with its reason, the daemon answers /healthz meanwhile, its memory stays flat, and a
    plain change is written afterwards."""
    csrf = _login(running.admin, "admin", ADMIN_PASSWORD)
    set_password(running.folder / "admin-users", "facts-probe", "viewer", "probe-password-99")  # it exists
    process = psutil.Process(running.daemon.process.pid)
    rss_before = process.memory_info().rss
    problems = {
        "a named pipe": "named pipe",
        "/dev/zero": "a device",
        "a 400 MB file": "more than the",
        "the SIP password file": "sip.register_password_file",
        "the admin users file": "admin.users_file",
    }
    timings = []
    for what, path in _hostile_facts_files(running).items():
        tool = {"name": "site", "kind": "facts", "file": str(path), "description": "the site's facts"}
        change = {"changes": {"agent": {"tools": [tool]}}}
        started = time.monotonic()
        put = running.admin.put("/api/config", json=change, headers={"X-CSRF-Token": csrf}, timeout=30)
        took = time.monotonic() - started
        asked = time.monotonic()
        assert running.admin.get("/healthz").status_code == 200
        timings.append((what, took, time.monotonic() - asked))
        assert put.status_code == 422 and problems[what] in put.text, (what, put.text)
        assert "agent.tools[0].file" in put.text, put.text
    grown_mb = (process.memory_info().rss - rss_before) / 1e6
    print(
        "; ".join(
            f"{what}: refused in {t * 1000:.0f} ms, /healthz {h * 1000:.0f} ms" for what, t, h in timings
        )
    )
    print(f"the daemon's memory grew {grown_mb:.1f} MB")
    assert (
        max(took for _, took, _ in timings) < 10.0
    )  # the pipe held it for ever; a loaded machine meets this
    assert grown_mb < 100
    ok = running.admin.put(
        "/api/config",
        json={"changes": {"agent": {"site_name": "after the attack"}}},
        headers={"X-CSRF-Token": csrf},
    )
    assert ok.status_code == 200, ok.text


def test_sentences_with_format_specs_and_targets_with_line_breaks_or_headers_are_refused(
    running: Running,
) -> None:
    """ "{target:d}" passed and then failed every operator-key call; "{target:>100000000}" wrote 100 MB
    to the log per key press; a target ending in a line break put a bare LF into Refer-To; a target URI
    carrying "?Replaces=" would take over another call."""
    csrf = _login(running.admin, "admin", ADMIN_PASSWORD)
    for key, value, problem in (
        ("transfer_preamble", "{target:d}", "has a format of its own"),
        ("transfer_preamble", "{target:>100000000}", "has a format of its own"),
        ("transfer_failed_reply", "{target!r} is busy", "has a format of its own"),
        ("transfer_preamble", "x" * 400, "characters long"),
        ("transfer_targets", {"desk": "2100\n"}, "neither an extension"),
        ("transfer_targets", {"desk": "sip:2100@127.0.0.1?Replaces=abc%3Bto-tag%3D1"}, "headers"),
    ):
        changed = {"changes": {"call": {key: value}}}
        answer = running.admin.put("/api/config", json=changed, headers={"X-CSRF-Token": csrf})
        assert answer.status_code in (400, 422) and problem in answer.text and key in answer.text, answer.text
