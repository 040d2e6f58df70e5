"""A bundle version activated while the daemon runs: sessions move to it between turns, nobody is
dropped; a version that cannot load leaves the running one serving."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from appliance.audio import ArraySource, MemorySink
from appliance.daemon.bundle_switch import SwitchHow, room_for_both
from appliance.pipeline.engines import SessionEngines
from appliance.pipeline.session import Session
from engines.bundle import Bundle
from engines.bundle_store import BundleStore, BundleVersion
from engines.manifest import Manifest
from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, place_call
from tests.fixtures.pipeline import SILENCE_ONLY, make_fakes, silence, tone
from tests.test_sip_helpers import free_udp_port


def test_a_session_moves_to_the_offered_engines_between_turns_only() -> None:
    """The engines offered change while the first reply plays: that turn finishes on the old ones,
    the next runs on the new ones, and the old LLM forgets the conversation."""
    old, new = (
        make_fakes("The first answer is rather long.", token_delay_s=0.05),
        make_fakes("A second answer."),
    )
    new.engines.bundle_version = "b2"
    offered: list[SessionEngines] = [old.engines]
    source = ArraySource(np.concatenate([tone(0.6), silence(4.0), tone(0.6), silence(1.5)]), realtime=True)
    session = Session(
        engines=old.engines,
        source=source,
        sink=MemorySink(16000, realtime=True),
        config=SILENCE_ONLY,
        engines_offered=lambda: offered[-1],
    )

    async def offer_while_the_first_reply_plays() -> None:
        while not session.turns.playing:
            await asyncio.sleep(0.01)
        offered.append(new.engines)

    async def run() -> None:
        await asyncio.gather(session.run(max_turns=2), offer_while_the_first_reply_plays())

    asyncio.run(asyncio.wait_for(run(), 30))
    first, second = session.turns.traces
    assert first.reply == "The first answer is rather long." and not first.cancelled
    assert (first.bundle_version, second.bundle_version) == ("", "b2")
    assert len(old.asr.calls) == 1 and len(new.asr.calls) == 1
    assert second.reply == "A second answer." and session.engines is new.engines
    assert session.session_id in old.llm.ended


def test_room_for_both_sets_is_what_the_process_holds_and_a_fifth_more() -> None:
    assert room_for_both(available_bytes=6_000_000_000, process_rss_bytes=5_000_000_000)
    assert not room_for_both(available_bytes=5_900_000_000, process_rss_bytes=5_000_000_000)


def _two_versions(
    bundle: Bundle, root: Path, tmp_path: Path
) -> tuple[BundleStore, BundleVersion, BundleVersion]:
    store = BundleStore(root)
    versions = []
    for release in ("running", "next"):
        copy = tmp_path / release
        subprocess.run(["cp", "-al", str(bundle.root), str(copy)], check=True)
        manifest = Manifest.read(copy)
        manifest.meta["release"] = release
        (copy / "manifest.json").unlink()  # a hard link to the installed one: replaced, not written through
        manifest.write(copy)
        versions.append(store.add(copy, label=release, move=True))
    store.activate(versions[0].id)
    return store, versions[0], versions[1]


@pytest.mark.slow
def test_a_call_in_progress_keeps_its_audio_and_turns_while_a_bundle_version_is_activated(
    bundle: Bundle, tmp_path: Path, data_dir: Path
) -> None:
    """`appliance run` answering a SIPp call; `appliance bundle activate` during the first reply: the
    first turn is answered by the running version, the second (asked 20 s in) by the new one, and the
    daemon says what the switch took, the call's longest RTP gap included (a figure: it depends on the
    machine's load, 0.16-0.25 s on an idle one, 2.4 s seen on a busy one)."""
    from appliance.cli import main

    store, running, following = _two_versions(bundle, tmp_path / "root", tmp_path)
    config = DaemonConfig(tmp_path, free_udp_port(), free_tcp_port())
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    daemon = DaemonProcess(config, env={**env, "APPLIANCE_BUNDLE__DIR": str(store.root)})
    call: list[tuple[int, str]] = []
    try:
        daemon.wait_ready()
        caller = threading.Thread(
            target=lambda: call.append(
                place_call(
                    tmp_path,
                    data_dir,
                    config.sip_port,
                    scenario="call.xml",
                    pause_ms=32000,
                    again_at_s=20.0,
                    wait_for_bye_s=45,
                )
            )
        )
        caller.start()
        time.sleep(3.0)  # the first question is being answered
        assert main(["bundle", "activate", following.id, "--dir", str(store.root)]) == 0
        caller.join(120)
        # A crash from now on would count against the version running now (appliance.daemon.crash_guard).
        starts = json.loads((store.root / "starts.json").read_text())["starts"]
        assert [s["version"] for s in starts if s["pid"] == daemon.process.pid] == [following.id]
    finally:
        log = daemon.stop()
    assert call and call[0][0] == 0, call
    turns = daemon.stored_turns()
    assert [t["bundle_version"] for t in turns] == [running.id, following.id], log[-4000:]
    assert all("brooklyn" in t["transcript"].lower() and t["played_reply"] for t in turns), turns
    switched = re.search(
        r"bundle version \w+ serves: loaded in ([\d.]+) s .* ([\d.]+) s later \(peak (\d+) MB\)", log
    )
    gap = re.search(r"call \S+ ended: .*longest gap (\d+) ms", log)
    assert switched is not None and gap is not None, log[-4000:]
    stalls = "\n".join(line for line in log.splitlines() if "event loop was held" in line)
    print(
        f"switch: loaded in {switched[1]} s, sessions moved {switched[2]} s later, peak {switched[3]} MB; "
        f"the call's longest RTP gap {gap[1]} ms\n{stalls or 'no event loop stall'}"
    )


def test_a_version_that_cannot_load_leaves_the_running_one_serving_and_active(
    bundle: Bundle, tmp_path: Path
) -> None:
    """The switch itself on a real daemon's engines (``appliance.daemon.load``): the activated
    version's language model is missing, so the running engines stay, the running version is active
    again, and the problem is named."""
    from appliance.config import load_settings, override
    from appliance.daemon import service as appliance_daemon
    from appliance.daemon.bundle_switch import switch_bundle
    from appliance.service.notify import Notifier
    from appliance.service.runner import ServiceControl

    store, running, following = _two_versions(bundle, tmp_path / "root", tmp_path)
    (following.path / Manifest.read(following.path).artifacts["llm/gemma-270m"].path).unlink()
    settings = override(
        load_settings(None),
        bundle={"dir": str(store.root), "verify_on_start": False},
        llm={"model": "gemma-270m", "context_tokens": 512, "max_reply_tokens": 16},
        audio={"input": "none", "output": "none"},
    )
    loaded = appliance_daemon.load(settings, microphone=None, no_microphone_reason="none", config_path=None)
    try:
        engines = loaded.engines
        store.activate(following.id)
        result = asyncio.run(switch_bundle(loaded, ServiceControl(Notifier()), store, following.id))
        assert (
            result.how == SwitchHow.FAILED
            and f"version {following.id} was activated but cannot load" in result.problem
        )
        assert loaded.engines is engines and loaded.bundle.version == running.id
        assert store.state().active == running.id
    finally:
        appliance_daemon.close(loaded)


def test_without_room_for_both_the_daemon_restarts_cleanly_once_no_call_is_in_progress(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No memory for a second engine set: the switch waits for the call to end, then the service stops
    with EXIT_RESTART (systemd's Restart=on-failure starts it on the new version)."""
    import types

    from appliance.daemon import bundle_switch
    from appliance.service.runner import EXIT_RESTART, Service, ServiceControl

    monkeypatch.setattr(bundle_switch, "room_for_both", lambda *_: False)

    @dataclasses.dataclass(eq=False)
    class Call:  # what the switch reads of a session
        in_use: bool = True

    daemon = types.SimpleNamespace(sessions={Call()}, bundle=types.SimpleNamespace(version="a"))
    results: list[bundle_switch.Switched] = []

    async def serve(_: object, control: ServiceControl) -> None:
        async def hang_up_later() -> None:
            await asyncio.sleep(0.5)
            daemon.sessions.clear()

        hanging_up = asyncio.ensure_future(hang_up_later())
        started = time.monotonic()
        results.append(await bundle_switch.switch_bundle(daemon, control, BundleStore(tmp_path), "b"))  # type: ignore[arg-type]
        results.append(bundle_switch.Switched("waited", SwitchHow.RESTART, time.monotonic() - started))
        await hanging_up
        await asyncio.Event().wait()

    code = asyncio.run(Service(load=lambda: None, serve=serve, watchdog=None).run())
    assert code == EXIT_RESTART
    assert results[0].how == SwitchHow.RESTART and results[1].load_s >= 0.5  # not before the call ended
