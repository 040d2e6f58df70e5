"""Air-gapped: a full turn (engines loaded from the bundle, then `appliance talk`) while every
connection attempt to a non-loopback address fails loudly."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance import cli
from tests.conftest import REPO
from tests.fixtures.pipeline import english_words

_LOOPBACK_PREFIXES = ("127.", "::1", "localhost")


class NetworkAttempt(AssertionError):
    pass


def _is_loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX paths
        return True
    host = str(address[0]) if isinstance(address, tuple) and address else ""
    return host.startswith(_LOOPBACK_PREFIXES) or host in ("", "0.0.0.0")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_sendto = socket.socket.sendto

    def guard(address: Any, what: str) -> None:
        if not _is_loopback(address):
            attempts.append(f"{what} {address!r}")
            raise NetworkAttempt(f"air-gapped: {what} to {address!r} attempted")

    def connect(self: socket.socket, address: Any) -> None:
        guard(address, "connect")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        guard(address, "connect_ex")
        return real_connect_ex(self, address)

    def sendto(self: socket.socket, data: bytes, *args: Any) -> int:
        guard(args[-1], "sendto")
        return real_sendto(self, data, *args)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        guard((host or "",), "getaddrinfo")
        return real_getaddrinfo(host, *args, **kwargs)

    real_getaddrinfo = socket.getaddrinfo
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket.socket, "sendto", sendto)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts


def test_the_guard_catches_a_real_connection_attempt(no_network: list[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(NetworkAttempt):
        sock.connect(("192.0.2.1", 443))
    with pytest.raises(NetworkAttempt):
        socket.create_connection(("example.com", 443), timeout=1)
    assert len(no_network) == 2
    no_network.clear()


def test_a_full_turn_makes_no_network_connection(
    no_network: list[str], data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)  # prove it without the libraries' own offline switches
    monkeypatch.setenv("APPLIANCE_TRACE__DB_PATH", str(tmp_path / "turns.sqlite3"))
    monkeypatch.setenv("APPLIANCE_LLM__MAX_REPLY_TOKENS", "24")
    monkeypatch.setenv("APPLIANCE_BUNDLE__VERIFY_ON_START", "false")
    reply = tmp_path / "reply.wav"

    code = cli.main(
        ["talk", str(data_dir / "speech/en/google_audio.wav"), "--fast", "--json", "--reply", str(reply)]
    )

    out = capsys.readouterr().out
    assert code == 0, out
    assert no_network == []
    result = json.loads(out.strip().splitlines()[-1])
    assert "brooklyn" in result["transcript"].lower()
    assert english_words(result["reply"])
    assert result["reply_audio_s"] > 0.5 and reply.stat().st_size > 10000
    assert set(result["timestamps_s"]) >= {"speech_end", "endpoint", "asr_done", "playback_start"}


_NATIVE_CHILD = """
import time
from appliance.config import load_settings, override
from appliance.engine_set import asr_engine, echo_canceller, llm_engine, open_bundle, tts_engine, vad_engine
from engines.llm import Message
import numpy as np
settings = override(load_settings(None), llm={{"model": "gemma-270m", "max_reply_tokens": 4, "context_tokens": 256}})
bundle = open_bundle(settings)
engines = [vad_engine(settings, bundle), asr_engine(settings, bundle), tts_engine(settings, bundle)]
engines.append(llm_engine(settings, bundle))
engines.append(echo_canceller(settings, microphone=True))
for engine in engines:
    engine.load()
stream = engines[0].stream()
for _ in range(20):
    stream.probability(np.zeros(512, np.float32))
engines[1].transcribe(np.zeros(16000, np.float32))
list(engines[2].synthesize("Hello there."))
list(engines[3].stream([Message("user", "Hello")]))
echo = engines[4].stream()
for _ in range(100):
    echo.process(np.random.uniform(-0.1, 0.1, 512).astype(np.float32), np.zeros(512, np.float32))
time.sleep({wait_s})
print("done")
"""


@pytest.mark.skipif(
    shutil.which("unshare") is None or shutil.which("strace") is None or os.geteuid() != 0,
    reason="needs unshare, strace and root (a network namespace of its own)",
)
def test_native_runtimes_try_no_network_in_a_namespace_of_their_own(tmp_path: Path) -> None:
    """Python's socket module is not the only way out: native libraries open sockets themselves
    (ONNX Runtime's telemetry resolved its collector about 9 s after the first session). The four real
    engines (ONNX Runtime, Piper, llama.cpp) and the echo canceller (LiveKit's native library) run in a network namespace with only a downed loopback, so nothing can leave even if
    something tries, and strace records every attempt at a non-local socket."""
    trace = tmp_path / "net.trace"
    code = _NATIVE_CHILD.format(wait_s=15)
    # The product must switch ONNX Runtime's telemetry off itself: not inherited from this process.
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    done = subprocess.run(
        ["unshare", "-n", "strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace),
         sys.executable, "-c", code],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    attempts = [line for line in trace.read_text().splitlines() if "AF_INET" in line]
    assert attempts == [], "\n".join(attempts[:10])


@pytest.mark.slow
@pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("unshare", "strace", "ip", "mount")) or os.geteuid() != 0,
    reason="needs unshare, strace, ip, mount and root (network and mount namespaces of its own)",
)
def test_the_daemon_with_a_call_and_the_admin_page_sends_nothing_out(tmp_path: Path, data_dir: Path) -> None:
    """`appliance run` with SIP and the admin page, a real SIPp call asking a question and admin
    requests, INVITEs whose SDP names a host (`c=IN IP4 media.example.net`), held 25 s past READY
    (ONNX Runtime's telemetry looked its collector up ~9 s after the first session, which the call's
    first turn opens ~3 s after READY), in a namespace where a resolver is reachable and records every
    query and a default route exists: no DNS query, no connect or send to any address but loopback;
    the named SDP gets 488 and the daemon stays responsive."""
    done = subprocess.run(
        ["unshare", "-n", "-m", "--propagation", "private", sys.executable, "-m", "tests.airgap_daemon",
         "--tmp", str(tmp_path), "--data", str(data_dir), "--hold-s", "25"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["returncode"] == 0, report["daemon_output"]
    assert report["sipp_returncode"] == 0, report["sipp_output"]
    assert any("brooklyn" in t.lower() for t in report["transcripts"]), report
    assert report["pages"]["/healthz"] == 200 and report["pages"]["/metrics"] == 200, report["pages"]
    assert report["named_sdp_statuses"] == [488] * 5, report["named_sdp_statuses"]
    assert report["slowest_health_s"] < 2.0, report
    assert report["inet_calls"] > 0  # strace saw the daemon's own loopback traffic: it was watching
    assert report["dns_queries"] == [], report["dns_queries"]
    assert report["outside_connects"] == [], "\n".join(report["outside_connects"])
