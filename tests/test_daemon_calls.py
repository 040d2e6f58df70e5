"""`appliance run` as a process, called by SIPp as the site's phone system would: a caller who hangs
up while the reply is still playing leaves the turn stored with what was played (outcome hangup),
/metrics counts it, and the daemon takes the next call."""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import pytest

from appliance.auth.passwords import ScryptParams, write_password_file
from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, place_call
from tests.test_service import FakeSystemd
from tests.test_sip_helpers import free_udp_port

# A long story said as the model tells it (no figure checks): these tests are about what a reply cut
# short leaves behind, and a story's invented figures would be withheld.
LONG_ANSWERS = (
    '[agent]\npersona = "You answer every question with a long story of at least eight sentences."\n'
    "grounding = false\n"
)


def _turns_counted(metrics: str) -> float:
    """The sum of ``appliance_turns_total`` over its outcomes."""
    found = re.findall(r'^appliance_turns_total\{outcome="\w+"\} (\S+)$', metrics, re.MULTILINE)
    return sum(float(value) for value in found)


@pytest.mark.slow
def test_a_caller_hanging_up_mid_reply_leaves_the_turn_stored_with_what_was_played(
    tmp_path: Path, data_dir: Path
) -> None:
    config = DaemonConfig(
        tmp_path, free_udp_port(), free_tcp_port(), reply_tokens=96, llm="qwen-1.5b", extra=LONG_ANSWERS
    )
    daemon = DaemonProcess(config)
    try:
        daemon.wait_ready()
        # The question ends 2.3 s into the call; the caller hangs up 5 s in, inside a reply of ~100 tokens.
        hung_up, output = place_call(tmp_path, data_dir, config.sip_port, scenario="call.xml", pause_ms=5000)
        assert hung_up == 0, output
        for _attempt in range(20):  # the turn is stored once the session has closed
            if daemon.stored_turns():
                break
            time.sleep(0.5)
        # The next call is taken and answered (the caller hangs up 15 s in, the long reply may still play).
        answered, output = place_call(
            tmp_path, data_dir, config.sip_port, scenario="call.xml", pause_ms=15000
        )
        assert answered == 0, output
        for _attempt in range(20):  # the second turn is stored (and counted) once its session closed
            with urllib.request.urlopen(f"{daemon.base_url}/metrics", timeout=5) as response:
                assert response.status == 200
                metrics = response.read().decode()
            if _turns_counted(metrics) >= 2:
                break
            time.sleep(0.5)
    finally:
        log = daemon.stop()
    assert daemon.process.returncode == 0, log[-3000:]
    first, *rest = daemon.stored_turns()
    assert "brooklyn" in first["transcript"].lower(), first
    assert first["outcome"] == "hangup", {
        k: first[k]
        for k in (
            "reply",
            "played_reply",
            "reply_audio_s",
            "cancelled",
            "outcome",
            "turn_done",
            "playback_start",
            "speech_end",
        )
    }
    heard, said = first["played_reply"].split(), first["reply"].split()
    assert heard == said[: len(heard)] and len(heard) < len(said), first  # a beginning, not all of it
    assert first["reply_audio_s"] < 6.0
    assert rest and "brooklyn" in rest[0]["transcript"].lower() and rest[0]["played_reply"], rest
    # /metrics counted every stored turn (its series exist at 0 from the start: the values count).
    assert _turns_counted(metrics) == len(daemon.stored_turns()) == 2, metrics[-3000:]
    assert re.search(r"^appliance_event_loop_stalls_total \d", metrics, re.MULTILINE), metrics[-3000:]


@pytest.mark.slow
def test_sigterm_mid_reply_stops_cleanly_and_keeps_the_turn(tmp_path: Path, data_dir: Path) -> None:
    """systemd stopping the daemon while it answers a call: STOPPING is sent, the caller gets a BYE,
    the exit is clean, and the turn is stored with what was played (outcome stopped); the admin API
    showed the call speaking before."""
    password = "stop-mid-reply-7"
    write_password_file(tmp_path / "admin-password", password, ScryptParams(log2_n=10))
    fake = FakeSystemd(str(tmp_path / "notify.sock"))
    config = DaemonConfig(
        tmp_path, free_udp_port(), free_tcp_port(), reply_tokens=96, llm="qwen-1.5b", extra=LONG_ANSWERS
    )
    daemon = DaemonProcess(config, env={**os.environ, "NOTIFY_SOCKET": fake.address})
    call: list[tuple[int, str]] = []
    try:
        daemon.wait_ready()
        caller = threading.Thread(
            target=lambda: call.append(place_call(tmp_path, data_dir, config.sip_port, trailing_s=30.0))
        )
        caller.start()
        with httpx.Client(base_url=daemon.base_url, timeout=5) as admin:
            assert (
                admin.post("/api/login", json={"username": "admin", "password": password}).status_code == 200
            )
            deadline = time.monotonic() + 60
            states: list[str] = []
            while time.monotonic() < deadline and "speaking" not in states:
                states = [s["state"] for s in admin.get("/api/sessions").json()]
                time.sleep(0.2)
        assert "speaking" in states, (states, call)
        time.sleep(1.0)  # a second of the reply is heard
        log = daemon.stop()
        caller.join(60)
    finally:
        if daemon.process.poll() is None:
            daemon.stop()
        fake.close()
    assert daemon.process.returncode == 0, log[-3000:]
    assert any(m.startswith("STOPPING=1") for m in fake.messages), fake.messages
    assert call and call[0][0] == 0, call  # SIPp got the appliance's BYE
    stored = daemon.stored_turns()
    assert len(stored) == 1, log[-4000:]
    (turn,) = stored
    assert turn["outcome"] == "stopped" and "brooklyn" in turn["transcript"].lower(), turn
    heard, said = turn["played_reply"].split(), turn["reply"].split()
    assert heard and heard == said[: len(heard)] and len(heard) < len(said), turn
