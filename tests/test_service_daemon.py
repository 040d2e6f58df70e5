"""`appliance run` itself under a stand-in for systemd: READY only once the real engines are warm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_service import FakeSystemd


@pytest.mark.slow
def test_real_daemon_is_ready_only_after_loading_and_stops_cleanly(tmp_path: Path) -> None:
    fake = FakeSystemd(str(tmp_path / "notify.sock"))
    env = {
        **os.environ,
        "NOTIFY_SOCKET": fake.address,
        "WATCHDOG_USEC": "2000000",  # a ping every second
        "APPLIANCE_AUDIO__INPUT": "none",  # no microphone session: just serve until stopped
        "APPLIANCE_BUNDLE__ROLLBACK_AFTER_CRASHES": "0",  # the shared bundle root (see test_pipeline_run)
        "APPLIANCE_LLM__MODEL": "gemma-270m",
        "APPLIANCE_TRACE__DB_PATH": str(tmp_path / "turns.sqlite3"),
    }
    env.pop("JOURNAL_STREAM", None)
    command = [str(Path(sys.prefix) / "bin" / "appliance"), "run"]
    try:
        with subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            try:
                fake.wait_for("READY=1", timeout_s=300)
                fake.wait_for("STATUS=ready: no local audio session")
                proc.send_signal(signal.SIGTERM)
                output, _ = proc.communicate(timeout=60)
            finally:
                proc.kill()
        fake.wait_for("STOPPING=1")
    finally:
        fake.close()
    assert proc.returncode == 0, output
    messages = fake.messages
    lifecycle = [m for m in messages if m != "WATCHDOG=1"]
    assert lifecycle == [
        "STATUS=loading and warming the engines",
        "READY=1\nSTATUS=ready",
        "STATUS=ready: no local audio session (audio.input = none)",
        "STOPPING=1\nSTATUS=stopping",
    ]
    # The loop kept pinging while the engines loaded on worker threads.
    assert messages.index("READY=1\nSTATUS=ready") > messages.index("WATCHDOG=1")
    # READY came after every engine was loaded and warmed (the daemon's own log says so first).
    assert "engines loaded:" in output
    assert output.index("engines loaded:") < output.index("appliance.service.runner: ready")
