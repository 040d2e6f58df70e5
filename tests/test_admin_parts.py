"""The admin page's pure parts: login limits, sessions, config file merging and writing, host
tool parsing, the accounts file, and the `appliance admin` command."""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from appliance.admin.config_file import (
    apply_changes,
    environment_overrides,
    merge_changes,
    to_toml,
    validate_file_data,
)
from appliance.admin.logins import LoginStore
from appliance.admin.ratelimit import LoginRateLimiter
from appliance.admin.system import HostProbe, parse_nvidia_smi, parse_tegrastats
from appliance.admin.users import UserDirectory, UserFileError, read_users, set_password
from appliance.admin.views import latency_report, turn_view
from appliance.cli import main
from appliance.config import ConfigError, load_settings
from tests.fixtures.admin import recorded_turn, stage_ms

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_blocks_after_the_limit_and_frees_after_the_window() -> None:
    clock = Clock()
    limiter = LoginRateLimiter(3, 60.0, clock=clock)
    keys = ["client:10.0.0.9", "user:tech"]
    for _ in range(3):
        assert limiter.take(keys) == 0
        clock.now += 1
    assert limiter.take(keys) == pytest.approx(57.0)
    assert limiter.retry_after_s(keys) == pytest.approx(57.0)  # a refused attempt is not counted
    assert limiter.retry_after_s(["client:10.0.0.10", "user:other"]) == 0  # others are not affected
    # The name waits only 1 s after its third failure, which has passed (see the test below).
    assert limiter.retry_after_s(["client:10.0.0.10", "user:tech"]) == pytest.approx(0.0)
    clock.now += 57.5
    assert limiter.take(keys) == 0  # the first failure left the window
    limiter.succeeded(keys, forget=["user:tech"])
    assert limiter.retry_after_s(["client:10.0.0.11", "user:tech"]) == 0


def test_attempts_are_counted_before_the_password_is_checked() -> None:
    """Forty guesses at once: only the limit's worth get a password check; a right password gives its
    slot back, so the technician who mistyped twice is not held up by the attempt that worked."""
    limiter = LoginRateLimiter(5, 300.0, clock=Clock())
    keys = ["client:10.0.0.9", "user:admin"]
    admitted = [limiter.take(keys) == 0 for _ in range(40)]
    assert sum(admitted) == 5 and admitted[:5] == [True] * 5
    other = LoginRateLimiter(3, 300.0, clock=Clock())
    for _ in range(2):
        assert other.take(keys) == 0  # two wrong passwords
    assert other.take(keys) == 0
    other.succeeded(keys, forget=["user:admin"])  # the third was right
    assert other.take(["client:10.0.0.9", "user:viewer"]) == 0  # two of three left on the address


def test_a_user_name_is_slowed_down_by_a_doubling_delay_never_locked_out() -> None:
    """Wrong guesses for one name from ever new addresses: past the limit each attempt waits 1, 2, 4,
    ... s (at most max_delay_s) after the last failure; the real user, from a fresh address, gets in
    after that short wait instead of being locked out for the whole window."""
    clock = Clock()
    limiter = LoginRateLimiter(3, 300.0, clock=clock, max_delay_s=8.0)
    waits = []
    for n in range(8):
        keys = [f"client:10.1.0.{n}", "user:tech"]
        waits.append(limiter.retry_after_s(keys))
        clock.now += waits[-1]
        assert limiter.take(keys) == 0
    assert waits == [0, 0, 0, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert limiter.retry_after_s(["client:10.9.9.9", "user:tech"]) == pytest.approx(8.0)
    clock.now += 8.0
    assert limiter.retry_after_s(["client:10.9.9.9", "user:tech"]) == 0  # the real user can try now


def test_rate_limiter_memory_stays_bounded() -> None:
    clock = Clock()
    limiter = LoginRateLimiter(2, 10.0, clock=clock, max_keys=100)
    for index in range(1000):
        limiter.take([f"client:{index}"])
        clock.now += 0.001
    assert len(limiter._failures) <= 100


def test_sessions_expire_and_keep_only_digests_of_tokens() -> None:
    clock = Clock()
    store = LoginStore(ttl_s=60.0, clock=clock, max_logins=2)
    token, session = store.create("tech", "admin")
    assert store.get(token) == session and store.get("other") is None and store.get(None) is None
    assert token not in store._logins  # only its sha256 is kept
    assert session.csrf_matches(session.csrf_token) and not session.csrf_matches("x")
    assert not session.csrf_matches(None)
    clock.now += 61
    assert store.get(token) is None
    first, _ = store.create("a", "viewer")
    second, _ = store.create("b", "viewer")
    third, _ = store.create("c", "viewer")
    assert store.get(first) is None and store.get(second) and store.get(third)  # oldest evicted
    store.delete_user("b")
    assert store.get(second) is None


def test_merge_changes_sets_removes_and_lists_changed_keys() -> None:
    current: dict[str, dict[str, Any]] = {
        "llm": {"temperature": 0.2, "model": "qwen-1.5b"},
        "agent": {"site_name": "A"},
    }
    merged, changed = merge_changes(
        current, {"llm": {"temperature": 0.5, "model": None}, "trace": {"budget_ms": 700}}
    )
    assert merged == {"llm": {"temperature": 0.5}, "agent": {"site_name": "A"}, "trace": {"budget_ms": 700}}
    assert changed == ["llm.model", "llm.temperature", "trace.budget_ms"]
    assert current["llm"]["model"] == "qwen-1.5b"  # the input is not modified
    same, nothing = merge_changes(merged, {"llm": {"temperature": 0.5}})
    assert same == merged and nothing == []


def test_toml_writer_round_trips_every_shape_of_the_schema(tmp_path: Path) -> None:
    data = {
        "agent": {"site_name": 'Hall "B" \\ east', "persona": "line one\nline two\ttab"},
        "llm": {"stop": ["\n\n", "User:"], "temperature": 0.25, "gpu_layers": -1},
        "bundle": {"verify_on_start": False},
    }
    text = to_toml(data)
    assert tomllib.loads(text) == data
    assert validate_file_data(tomllib.loads(text), "test").llm.stop == ("\n\n", "User:")
    # A folder that is no bundle is a problem of its own, not a reason to skip the bundle's checks.
    with pytest.raises(ConfigError, match=r"bundle\.dir: the engine bundle cannot be opened"):
        validate_file_data({"bundle": {"dir": str(tmp_path)}, "llm": {"model": "gpt4"}}, "test")


def test_apply_changes_refuses_bad_values_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "site.toml"
    path.write_text("[llm]\ntemperature = 0.3\n")
    with pytest.raises(ConfigError) as caught:
        apply_changes(path, {"llm": {"model": "gpt4"}, "sip": {"port": 70000}})
    keys = {p.key for p in caught.value.problems}
    assert keys == {"llm.model", "sip.port"}
    assert path.read_text() == "[llm]\ntemperature = 0.3\n"
    settings, changed = apply_changes(path, {"sip": {"port": 5070}})
    assert changed == ["sip.port"] and settings.sip.port == 5070
    assert load_settings(path).sip.port == 5070 and load_settings(path).llm.temperature == 0.3


def test_file_validation_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # An environment override must not hide a bad value in the file.
    monkeypatch.setenv("APPLIANCE_LLM__TEMPERATURE", "0.5")
    with pytest.raises(ConfigError):
        validate_file_data({"llm": {"temperature": 9}}, "test")
    assert environment_overrides({"APPLIANCE_LLM__TEMPERATURE": "1", "HOME": "/"}) == ["llm.temperature"]


def test_nvidia_smi_and_tegrastats_lines_are_read() -> None:
    gpus = parse_nvidia_smi("NVIDIA H200, 37, 1024, 143771, 41\nbroken line\n")
    assert len(gpus) == 1 and gpus[0].name == "NVIDIA H200" and gpus[0].utilization_percent == 37
    assert gpus[0].memory_used_bytes == 1024 * 1024 * 1024 and gpus[0].temperature_c == 41
    assert parse_nvidia_smi("NVIDIA T4, [N/A], 10, 100, 50")[0].utilization_percent is None
    line = (
        "11-30-2026 23:40:01 RAM 5234/15388MB (lfb 2x4MB) SWAP 0/7694MB CPU [12%@1984,8%@1984] "
        "EMC_FREQ 0% GR3D_FREQ 61% cpu@48.5C soc2@46.8C gpu@47.1C tj@49.2C GPU@47.093C VDD_IN 7283mW"
    )
    (jetson,) = parse_tegrastats(line)
    assert jetson.utilization_percent == 61 and jetson.temperature_c == pytest.approx(47.093)
    assert jetson.memory_used_bytes == 5234 * 1024 * 1024 and jetson.memory_total_bytes == 15388 * 1024 * 1024
    assert parse_tegrastats("RAM 1/2MB CPU [1%]") == []


def test_host_probe_reads_this_machine(tmp_path: Path) -> None:
    stats = HostProbe(tmp_path / "not" / "yet" / "there").read()
    assert stats.disk_path == str(tmp_path)  # the nearest existing folder
    assert 0 <= stats.cpu_percent <= 100 and stats.memory_total_bytes > 0
    assert stats.gpu_source in (None, "nvidia-smi", "tegrastats")


def test_users_file_is_0600_and_bad_lines_name_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "users"
    set_password(path, "tech", "admin", "long enough secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_users(path)["tech"].role == "admin"
    with pytest.raises(ValueError, match="role"):
        set_password(path, "tech", "root", "long enough secret")
    with pytest.raises(ValueError, match="user name"):
        set_password(path, "bad name", "admin", "long enough secret")
    path.write_text("tech admin\n")
    with pytest.raises(UserFileError, match=r"line 1.*appliance admin passwd"):
        read_users(path)


def test_user_directory_checks_passwords_and_prefers_the_users_file(tmp_path: Path) -> None:
    from appliance.auth.passwords import write_password_file

    users_file, password_file = tmp_path / "users", tmp_path / "admin-password"
    directory = UserDirectory(users_file, password_file)
    assert directory.users() == {} and directory.authenticate("admin", "anything at all") is None
    write_password_file(password_file, "provisioned secret")
    user = directory.authenticate("admin", "provisioned secret")
    assert user is not None and user.role == "admin"
    set_password(users_file, "admin", "viewer", "another secret 1")
    assert directory.authenticate("admin", "provisioned secret") is None
    demoted = directory.authenticate("admin", "another secret 1")
    assert demoted is not None and demoted.role == "viewer"


def test_views_flag_turns_over_budget_and_skip_failed_turns() -> None:
    slow, fast = recorded_turn(scale=1.0), recorded_turn(scale=0.1)
    failed = recorded_turn(scale=5.0)
    failed.error = "asr failed"
    assert turn_view(slow, 800).over_budget and not turn_view(fast, 800).over_budget
    report = latency_report([slow, fast, failed], 800)
    latency = next(s for s in report.stages if s.stage == "turn_latency")
    assert latency.count == 2  # the failed turn is not in the percentiles
    assert latency.max_ms == pytest.approx(stage_ms(slow, "turn_latency"), abs=0.1)
    assert report.turns == 3 and report.over_budget == 2


def test_admin_command_adds_lists_and_removes_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users"
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough pass\n"))
    args = [
        "admin",
        "passwd",
        "--user",
        "staff",
        "--role",
        "viewer",
        "--password-stdin",
        "--users-file",
        str(path),
    ]
    assert main(args) == 0
    assert UserDirectory(path).authenticate("staff", "a long enough pass") is not None
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(args) == 1
    assert "at least 10" in capsys.readouterr().err
    assert main(["admin", "users", "--users-file", str(path)]) == 0
    assert "staff\tviewer" in capsys.readouterr().out
    assert main(["admin", "remove", "--user", "staff", "--users-file", str(path)]) == 0
    assert main(["admin", "remove", "--user", "staff", "--users-file", str(path)]) == 1
    assert read_users(path) == {}


def test_admin_command_without_a_terminal_asks_for_password_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code = main(["admin", "passwd", "--user", "x", "--role", "admin", "--users-file", str(tmp_path / "u")])
    assert code == 2 and "--password-stdin" in capsys.readouterr().err


def test_users_file_written_by_root_belongs_to_the_folders_owner(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: it is what `sudo appliance admin passwd` does on a device")
    folder = tmp_path / "state"
    folder.mkdir()
    os.chown(folder, 4242, 4243)  # the daemon's user on a device
    set_password(folder / "users", "tech", "admin", "long enough secret")
    owner = (folder / "users").stat()
    assert (owner.st_uid, owner.st_gid) == (4242, 4243)
    assert stat.S_IMODE(owner.st_mode) == 0o600
