"""`appliance run` on a machine without a microphone (this one): it still shows one full turn with a
question spoken by the bundle's voice, writes the reply WAV to the state folder, and tells systemd
READY (after the engines are loaded), STATUS and STOPPING."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import soundfile as sf

from appliance.pipeline.engines import SessionEngines
from engines.audio import resample
from tests.conftest import REPO
from tests.fixtures.pipeline import english_words

# The machine's bundle root is shared: a daemon a test kills must not count toward rolling back its
# active version (tests/test_bundle_store.py tests the rollback on a root of its own).
NO_CRASH_ROLLBACK = {"APPLIANCE_BUNDLE__ROLLBACK_AFTER_CRASHES": "0"}


def run_daemon(
    config: Path, tmp_path: Path, *, timeout_s: float, **extra_env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``appliance run --config CONFIG`` as a process, with a notify socket: its result and what it told systemd."""
    notify_path = tmp_path / "notify.sock"
    notify_path.unlink(missing_ok=True)  # a test may start the daemon more than once
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update({"NOTIFY_SOCKET": str(notify_path), **NO_CRASH_ROLLBACK, **extra_env})
    done = subprocess.run(
        [sys.executable, "-m", "appliance", "run", "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    listener.setblocking(False)
    messages: list[str] = []
    while True:
        try:
            messages.append(listener.recv(4096).decode())
        except BlockingIOError:
            break
    listener.close()
    return done, messages


def test_run_without_a_microphone_shows_a_full_turn(tmp_path: Path, real_engines: SessionEngines) -> None:
    state = tmp_path / "state"
    config = tmp_path / "site.toml"
    config.write_text(
        f"""
[bundle]
verify_on_start = false
[audio]
input_device = "no-such-capture-device"  # no microphone, even on a host that has one
[llm]
max_reply_tokens = 24
[trace]
db_path = "{state / "turns.sqlite3"}"
"""
    )
    done, messages = run_daemon(config, tmp_path, timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "No microphone found" in out and "audio.input_device" in out
    assert "transcript:" in out and "reply:" in out and "latency:" in out
    transcript_line = next(line for line in out.splitlines() if line.startswith("transcript:"))
    assert "help" in transcript_line.lower()  # the synthesized question, recognised by Whisper
    reply_wav = state / "last-demo-reply.wav"
    audio, rate = sf.read(str(reply_wav), dtype="float32")
    assert len(audio) / rate > 0.5
    heard = real_engines.asr.transcribe(resample(audio, rate, 16000)).text
    assert len(english_words(heard)) >= 2, heard
    # systemd protocol: READY only after loading, then status lines, then STOPPING.
    ready = [i for i, m in enumerate(messages) if "READY=1" in m]
    stopping = [i for i, m in enumerate(messages) if "STOPPING=1" in m]
    assert ready and stopping and ready[0] < stopping[0], messages
    assert any("STATUS=loading" in m for m in messages[: ready[0]]), messages
    assert any("STATUS=demo turn done" in m for m in messages), messages


def test_run_on_a_llama_build_that_crashes_exits_78_with_the_cause_and_the_fix(tmp_path: Path) -> None:
    """A llama.cpp build this processor cannot run (rehearsed: the smoke child dies on SIGILL) stops
    the daemon before it loads the engines, with one line naming the cause and the fix, never READY,
    and exit 78, which the unit's RestartPreventExitStatus keeps systemd from restarting."""
    config = tmp_path / "site.toml"
    config.write_text(f'[bundle]\nverify_on_start = false\n[trace]\ndb_path = "{tmp_path / "t.sqlite3"}"\n')
    done, messages = run_daemon(config, tmp_path, timeout_s=300, APPLIANCE_LLM_SMOKE_FAULT="SIGILL")
    assert done.returncode == 78, done.stderr[-2000:]
    assert "died on SIGILL" in done.stderr and "./scripts/setup" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not any("READY=1" in m for m in messages), messages
    assert any("SIGILL" in m and m.startswith("STATUS=failed") for m in messages), messages


def test_a_configuration_that_cannot_start_falls_back_to_the_last_one_that_did(tmp_path: Path) -> None:
    """The real daemon, three starts with one configuration file: a good one (kept as the last that
    started), one naming a model the bundle does not have, one that is not TOML at all. Both bad ones
    start on the kept configuration, say so on stderr and in STATUS, and still answer the demo turn;
    without a kept configuration a bad one exits 78."""
    state = tmp_path / "state"
    config = tmp_path / "site.toml"
    good = f"""
[bundle]
verify_on_start = false
[audio]
input_device = "no-such-capture-device"
[llm]
model = "gemma-270m"
max_reply_tokens = 8
[trace]
db_path = "{state / "turns.sqlite3"}"
"""
    kept = tmp_path / ".site.toml.last-good"
    config.write_text(good.replace('model = "gemma-270m"', 'model = "no-such-model"'))
    done, _ = run_daemon(config, tmp_path, timeout_s=300)
    assert done.returncode == 78 and "no-such-model" in done.stderr, done.stderr[-2000:]
    assert not kept.exists()

    config.write_text(good)
    done, _ = run_daemon(config, tmp_path, timeout_s=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert kept.read_text() == good

    for broken in (good.replace('model = "gemma-270m"', 'model = "no-such-model"'), "[llm\nmodel = "):
        config.write_text(broken)
        done, messages = run_daemon(config, tmp_path, timeout_s=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "running with the last configuration that started" in done.stderr, done.stderr[-2000:]
        assert "transcript:" in done.stdout
        assert any(m.startswith("STATUS=degraded:") for m in messages), messages
        assert kept.read_text() == good  # the broken file never replaces the kept one
