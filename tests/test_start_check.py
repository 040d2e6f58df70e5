"""Every configuration the admin page accepts starts: the one start check (``appliance.daemon.start_check``)
on its own, and a property test that generates configuration changes, sends each through the admin
page's real write and, when it was accepted, starts the daemon's real serve with it (the engines
loaded once for the test session): it must come up as asked, every listener up, and so become the
last good configuration."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from appliance.admin.backend import LiveRegistry
from appliance.admin.config_file import to_toml
from appliance.admin.local import LocalBackend
from appliance.admin.users import set_password
from appliance.config import ConfigError, Settings, load_settings
from appliance.daemon import last_good
from appliance.daemon.bundle_view import summarize_bundle
from appliance.daemon.service import Daemon, open_store, serve
from appliance.daemon.start_check import check_start
from appliance.daemon.start_plan import plan_start
from appliance.pipeline.engines import SessionEngines
from appliance.service.notify import Notifier
from appliance.service.runner import ServiceControl
from engines.bundle import Bundle
from tests.fixtures.admin import ADMIN_PASSWORD
from tests.test_sip_helpers import free_udp_port


def _free_port() -> int:
    """A port free for both UDP and TCP on loopback."""
    for _ in range(100):
        port = free_udp_port()
        with socket.socket() as tcp:
            try:
                tcp.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port")


def _keys(check: list[Any]) -> set[str]:
    return {problem.key for problem in check}


def test_the_start_check_names_each_thing_that_would_stop_a_start(tmp_path: Path, settings: Settings) -> None:
    config = tmp_path / "site.toml"
    config.write_text("")
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database")
    fake_bundle = tmp_path / "fake-bundle"
    fake_bundle.mkdir()
    (fake_bundle / "manifest.json").write_text("{}")
    port = _free_port()

    def changed(**sections: dict[str, Any]) -> Settings:
        return settings.model_copy(
            update={
                name: getattr(settings, name).model_copy(update=values) for name, values in sections.items()
            }
        )

    fine = changed(trace={"db_path": tmp_path / "turns.sqlite3"})
    assert check_start(fine, config_path=config).all == []
    for db_path, said in (
        (tmp_path, "is a folder"),
        (config, "is the configuration file"),
        (junk, "holds something other than a turn database"),
        (Path("/proc/appliance/turns.sqlite3"), "cannot be written"),
    ):
        problems = check_start(changed(trace={"db_path": db_path}), config_path=config).problems
        assert [p.key for p in problems] == ["trace.db_path"] and said in str(problems[0]), problems
    one_port = changed(
        trace={"db_path": tmp_path / "t.sqlite3"},
        sip={"enabled": True, "port": port, "tcp": True},
        admin={"enabled": True, "port": port},
    )
    problems = check_start(one_port, config_path=config).problems
    assert _keys(problems) == {"admin.port"} and "is sip.port too" in str(problems[0])
    udp_only = changed(
        trace={"db_path": tmp_path / "t.sqlite3"},
        sip={"enabled": True, "port": port, "tcp": False},
        admin={"enabled": True, "port": port},
    )
    assert check_start(udp_only, config_path=config).all == []  # UDP and TCP do not clash
    tls_on_admin = changed(
        trace={"db_path": tmp_path / "t.sqlite3"},
        sip={"enabled": True, "port": 0, "tls": True, "tls_port": port},
        admin={"enabled": True, "port": port},
    )
    problems = check_start(tls_on_admin, config_path=config).problems
    assert _keys(problems) == {"admin.port"} and "is sip.tls_port too" in str(problems[0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", port))
        sip_on_taken = changed(trace={"db_path": tmp_path / "t.sqlite3"}, sip={"enabled": True, "port": port})
        assert _keys(check_start(sip_on_taken, config_path=config).problems) == {"sip.port"}
        assert check_start(sip_on_taken, config_path=config, running=sip_on_taken).all == []  # its own
    fake = check_start(changed(bundle={"dir": fake_bundle}), config_path=config).problems
    assert _keys(fake) == {"bundle.dir"} and "cannot be opened" in str(fake[0])
    mic = check_start(
        changed(audio={"input": "microphone", "input_device": "no-such-capture-device"}), config_path=config
    )
    assert mic.problems == [] and _keys(mic.audio) == {"audio.input_device"}
    auto = changed(audio={"input": "auto", "input_device": "no-such-capture-device"})
    assert check_start(auto, config_path=config).audio == []  # auto: no microphone is the demo turn


def test_an_accounts_file_nobody_can_log_in_with_is_refused(tmp_path: Path, settings: Settings) -> None:
    users = tmp_path / "admin-users"
    set_password(users, "tech", "admin", ADMIN_PASSWORD)
    running = settings.model_copy(
        update={
            "admin": settings.admin.model_copy(
                update={"enabled": True, "users_file": users, "password_file": tmp_path / "none"}
            )
        }
    )
    moved = running.model_copy(
        update={"admin": running.admin.model_copy(update={"users_file": tmp_path / "missing-users"})}
    )
    problems = check_start(moved, running=running, probe_audio=False).problems
    assert _keys(problems) == {"admin.users_file"} and "nobody could log in" in str(problems[0])


# --- the property: accepted implies it starts ------------------------------------------------------


class _Machine:
    """A site folder with a running daemon's configuration, its accounts, a port some other program
    holds, and the folders and files a change may point at."""

    def __init__(self, bundle: Bundle) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="start-check-"))
        self.users = self.root / "admin-users"
        set_password(self.users, "tech", "admin", ADMIN_PASSWORD)
        self.fake_bundle = self.root / "fake-bundle"
        self.fake_bundle.mkdir()
        (self.fake_bundle / "manifest.json").write_text("{}")
        self.junk = self.root / "notes.txt"
        self.junk.write_text("not a database")
        self.real_bundle = bundle.root
        self.ports = [_free_port(), _free_port()]
        self.taken = _free_port()
        self._holders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket()]
        for holder in self._holders:
            holder.bind(("127.0.0.1", self.taken))
        self._holders[1].listen(1)

    def close(self) -> None:
        for holder in self._holders:
            holder.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def base(self, folder: Path) -> dict[str, Any]:
        return {
            "audio": {"input": "none"},
            "bundle": {"verify_on_start": False},
            "llm": {"model": "gemma-270m", "max_reply_tokens": 8},
            "trace": {"db_path": str(folder / "turns.sqlite3")},
            "sip": {
                "enabled": True,
                "bind_host": "127.0.0.1",
                "port": self.ports[0],
                "allow_from": ["127.0.0.0/8"],
            },
            "admin": {
                "enabled": True,
                "bind_host": "127.0.0.1",
                "port": self.ports[1],
                "users_file": str(self.users),
                "password_file": str(folder / "admin-password"),
            },
        }


def _changes(machine: _Machine, folder: Path, config: Path) -> st.SearchStrategy[dict[str, dict[str, Any]]]:
    port = st.sampled_from([*machine.ports, machine.taken])
    sip = st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "port": port, "tcp": st.booleans()})
    admin = st.fixed_dictionaries(
        {},
        optional={"port": port, "users_file": st.sampled_from([str(machine.users), str(folder / "nobody")])},
    )
    db_paths = [folder / "new.sqlite3", folder, config, machine.junk, Path("/proc/appliance/t.sqlite3")]
    trace = st.fixed_dictionaries({}, optional={"db_path": st.sampled_from([str(p) for p in db_paths])})
    bundle = st.fixed_dictionaries(
        {},
        optional={
            "dir": st.sampled_from(
                [str(machine.real_bundle), str(machine.fake_bundle), str(folder / "nothing")]
            )
        },
    )
    audio = st.fixed_dictionaries(
        {},
        optional={
            "input": st.sampled_from(["none", "microphone"]),
            "input_device": st.sampled_from(["no-such-capture-device"]),
        },
    )
    return st.fixed_dictionaries(
        {}, optional={"sip": sip, "admin": admin, "trace": trace, "bundle": bundle, "audio": audio}
    )


async def _serve_until_remembered(daemon: Daemon, timeout_s: float = 20.0) -> bool:
    assert daemon.config_path is not None
    kept = last_good.last_good_path(daemon.config_path)
    task = asyncio.ensure_future(serve(daemon, ServiceControl(Notifier())))
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline and not task.done():
            if kept.is_file() and kept.read_bytes() == daemon.config_path.read_bytes():
                return True
            await asyncio.sleep(0.05)
        return False
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture(scope="module")
def machine(bundle: Bundle) -> Iterator[_Machine]:
    site = _Machine(bundle)
    yield site
    site.close()


@pytest.mark.slow
def test_every_configuration_the_admin_page_accepts_starts(
    machine: _Machine, bundle: Bundle, real_engines: SessionEngines
) -> None:
    outcomes: list[str] = []
    summary = summarize_bundle(bundle)

    @hypothesis_settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def accepted_implies_started(data: st.DataObject) -> None:
        folder = Path(tempfile.mkdtemp(dir=machine.root))
        config = folder / "site.toml"
        config.write_text(to_toml(machine.base(folder)))
        running = load_settings(config)
        store = open_store(running)
        assert store is not None
        backend = LocalBackend(running, store, LiveRegistry(), summary, config_path=config)
        changes = data.draw(_changes(machine, folder, config))
        before = config.read_bytes()
        try:
            backend.update_config(changes)
        except ConfigError:
            store.close()
            assert config.read_bytes() == before  # refused: nothing written
            outcomes.append("refused")
            return
        store.close()
        plan = plan_start(config)
        assert plan.notice is None and plan.local_problem is None, (changes, plan.notice)
        daemon = Daemon(
            settings=plan.settings,
            engines=real_engines,
            store=open_store(plan.settings),
            bundle=summary,
            microphone=plan.microphone,
            no_microphone_reason=plan.no_microphone_reason,
            load_seconds={},
            config_path=config,
        )
        try:
            assert asyncio.run(_serve_until_remembered(daemon)), changes
        finally:
            if daemon.store is not None:
                daemon.store.close()
        outcomes.append("started")

    accepted_implies_started()
    assert "started" in outcomes and "refused" in outcomes, outcomes
