"""`appliance run` as a process, called by SIPp as the site's phone system would: a caller who hangs
up while the reply is still playing leaves the turn stored with what was played (outcome hangup),
/metrics counts it, and the daemon takes the next call."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, http_status, place_call
from tests.test_sip_helpers import free_udp_port

LONG_ANSWERS = (
    '[agent]\npersona = "You answer every question with a long story of at least eight sentences."\n'
)


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
        metrics = ""
        for _attempt in range(20):  # the turn is stored once the session has closed
            if daemon.stored_turns():
                break
            time.sleep(0.5)
        answered, output = place_call(tmp_path, data_dir, config.sip_port)  # the next call is taken
        assert answered == 0, output
        assert http_status(f"{daemon.base_url}/metrics") == 200
        with urllib.request.urlopen(f"{daemon.base_url}/metrics", timeout=5) as response:
            metrics = response.read().decode()
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
    assert rest and rest[0]["outcome"] == "" and "brooklyn" in rest[0]["transcript"].lower()
    assert 'appliance_turns_total{outcome="ok"}' in metrics
