"""The systemd units: systemd-analyze verify passes, the sandbox rates well, the user is created."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioning.units import (
    ENGINES_UNIT,
    EXPOSURE_GOAL,
    SERVICE_UNIT,
    SYSUSERS_SOURCE,
    UNIT_FILES,
    exposure_score,
    read_unit_sources,
    render_unit,
    verify_units,
)

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (apt-get install systemd)"
)


def _install(tmp_path: Path, edit: dict[str, str] | None = None) -> list[Path]:
    sources = read_unit_sources()
    paths = []
    for name in UNIT_FILES:
        text = render_unit(sources[name], Path(sys.prefix))
        for old, new in (edit or {}).items():
            text = text.replace(old, new)
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    return paths


def _directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z]+)=(.*)$", line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    result = verify_units(_install(tmp_path))
    assert result.clean, result.output


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"Type=notify": "Type=notfy"}, "Failed to parse service type"),
        ({"/bin/appliance run": "/bin/appliancex run"}, "is not executable"),
    ],
)
def test_verify_is_not_vacuous(tmp_path: Path, edit: dict[str, str], message: str) -> None:
    result = verify_units(_install(tmp_path, edit))
    assert not result.clean
    assert message in result.output


def test_daemon_exposure_is_at_most_the_goal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    service, engines = _install(tmp_path)
    for path in (service, engines):
        score = exposure_score(path)
        assert score is not None
        with capsys.disabled():
            print(f"\nsystemd-analyze security {path.name}: {score[0]} {score[1]}")
        assert score[0] <= EXPOSURE_GOAL


def test_daemon_unit_is_notify_with_watchdog_and_sandbox() -> None:
    unit = _directives(read_unit_sources()[SERVICE_UNIT])
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "Restart": "on-failure",
        "User": "appliance",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "DevicePolicy": "closed",
        "StateDirectory": "appliance",
        "IPAddressDeny": "any",  # the second wall of the air gap: only the site's own networks
    }
    for key, value in expected.items():
        assert unit[key] == [value], key
    assert int(unit["WatchdogSec"][0]) >= 10
    allowed = unit["IPAddressAllow"][0].split()
    assert {"localhost", "10.0.0.0/8", "192.168.0.0/16"} <= set(allowed) and "any" not in allowed
    assert "char-alsa rw" in unit["DeviceAllow"]
    assert any(d.startswith("/dev/nvmap") for d in unit["DeviceAllow"])
    assert unit["ExecStart"][0].startswith(
        "/opt/appliance/venv/bin/appliance run --config /var/lib/appliance/"
    )
    assert unit["Requires"] == [ENGINES_UNIT] and ENGINES_UNIT in unit["After"][0]
    engines = _directives(read_unit_sources()[ENGINES_UNIT])
    assert engines["Type"] == ["oneshot"]
    assert "provisioning build-engines" in engines["ExecStart"][0]


def test_engines_unit_command_runs_here(tmp_path: Path) -> None:
    """The oneshot's command line works as written (on a machine without TensorRT it has nothing to do)."""
    engines = _directives(render_unit(read_unit_sources()[ENGINES_UNIT], Path(sys.prefix)))
    args = engines["ExecStart"][0].split()
    args[args.index("--bundle") + 1] = str(tmp_path)
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "not needed on cpu" in proc.stdout


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers not installed")
def test_sysusers_creates_the_user_in_the_device_groups(tmp_path: Path) -> None:
    conf = tmp_path / "appliance.conf"
    conf.write_text(read_unit_sources()[SYSUSERS_SOURCE])
    (tmp_path / "etc").mkdir()
    proc = subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", str(conf)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    passwd = (tmp_path / "etc/passwd").read_text()
    assert re.search(
        r"^appliance:x:\d+:\d+:Voice appliance:/var/lib/appliance:/usr/sbin/nologin$", passwd, re.M
    )
    groups = (tmp_path / "etc/group").read_text()
    for group in ("audio", "video", "render"):
        assert re.search(rf"^{group}:x:\d+:appliance$", groups, re.M), group
