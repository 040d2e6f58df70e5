"""The fleet's Prometheus configuration (deploy/prometheus) with the real promtool and Prometheus: the
files are valid, the alert rules fire on recorded series as their tests say, and a real Prometheus
scrapes two running appliances over HTTPS (their device certificates as its CA file) with the bearer
token, tells them apart by their labels and raises ApplianceDown for the one that stops."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from appliance.certificates import device_certificate
from tests.fixtures.daemon_proc import DaemonConfig, DaemonProcess, free_tcp_port, http_status
from tests.test_sip_helpers import free_udp_port

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"
TOKEN = "fleet-scrape-token-0123456789"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: ./scripts/setup")


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _copy_deploy(tmp_path: Path) -> Path:
    folder = tmp_path / "prometheus"
    shutil.copytree(DEPLOY, folder)
    (folder / "appliance.token").write_text(TOKEN + "\n")
    return folder


def test_the_shipped_configuration_and_rules_are_valid(tmp_path: Path) -> None:
    folder = _copy_deploy(tmp_path)
    config = _promtool("check", "config", "prometheus.yml", cwd=folder)
    assert config.returncode == 0, config.stdout + config.stderr
    rules = _promtool("check", "rules", "alerts.yml", cwd=folder)
    assert rules.returncode == 0 and "SUCCESS" in rules.stdout, rules.stdout + rules.stderr


def test_the_alerts_fire_on_recorded_series_as_their_unit_tests_say(tmp_path: Path) -> None:
    done = _promtool("test", "rules", "tests/alerts_test.yml", cwd=DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_rule_that_would_never_fire_fails_its_unit_test(tmp_path: Path) -> None:
    folder = _copy_deploy(tmp_path)
    rules = folder / "alerts.yml"
    rules.write_text(rules.read_text().replace('up{job="appliance"} == 0', 'up{job="appliance"} == 2'))
    done = _promtool("test", "rules", "tests/alerts_test.yml", cwd=folder)
    assert done.returncode != 0 and "alertname: ApplianceDown" in done.stdout + done.stderr


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        result: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
    return result


def _firing(base: str) -> list[dict[str, str]]:
    with urllib.request.urlopen(f"{base}/api/v1/alerts", timeout=5) as response:
        alerts = json.loads(response.read())["data"]["alerts"]
    return [a["labels"] for a in alerts if a["state"] == "firing"]


def _wait_for(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_a_real_prometheus_scrapes_two_appliances_and_alerts_on_the_one_that_stops(tmp_path: Path) -> None:
    folder = _copy_deploy(tmp_path)
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN)
    daemons: dict[str, DaemonProcess] = {}
    for device in ("kiosk-east", "kiosk-west"):
        home = tmp_path / device
        home.mkdir()
        extra = f'[agent]\ndevice_id = "{device}"\nsite_name = "Test depot"\n'
        certificate = device_certificate(home / "tls", device, "127.0.0.1")  # what the device makes
        with (folder / "appliances-ca.pem").open("ab") as bundle:  # collected as the config says
            bundle.write(certificate[0].read_bytes())
        daemon_config = DaemonConfig(
            home,
            free_udp_port(),
            free_tcp_port(),
            extra=extra,
            metrics_token_file=token_file,
            admin_tls=certificate,
        )
        daemons[device] = DaemonProcess(daemon_config)
    prometheus = None
    try:
        for daemon in daemons.values():
            daemon.wait_ready()
        targets = [
            {
                "targets": [f"127.0.0.1:{d.config.admin_port}"],
                "labels": {"device_id": name, "site_name": "Test depot"},
            }
            for name, d in daemons.items()
        ]
        (folder / "appliances" / "example.yml").unlink()
        (folder / "appliances" / "test.yml").write_text(json.dumps(targets))
        config = (folder / "prometheus.yml").read_text()
        config = config.replace("scrape_interval: 15s", "scrape_interval: 1s")
        config = config.replace("evaluation_interval: 15s", "evaluation_interval: 1s")
        config = config.replace("scrape_timeout: 10s", "scrape_timeout: 1s")
        (folder / "prometheus.yml").write_text(config)
        # the shipped rules, with ApplianceDown's 2 minutes shortened to keep the test short
        rules = (folder / "alerts.yml").read_text()
        (folder / "alerts.yml").write_text(rules.replace("== 0\n        for: 2m", "== 0\n        for: 1s", 1))
        log = tmp_path / "prometheus.log"
        port = free_tcp_port()
        base = f"http://127.0.0.1:{port}"
        with log.open("w") as sink:  # the child keeps its own descriptor
            prometheus = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={folder / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        _wait_for(
            "Prometheus", lambda: http_status(f"{base}/-/ready") == 200 or prometheus.poll() is not None
        )
        assert prometheus.poll() is None, log.read_text()[-3000:]

        def both_ready() -> list[dict[str, Any]]:
            found = _query(base, "appliance_ready == 1")
            return found if len(found) == 2 else []

        ready = _wait_for("both devices scraped and ready", both_ready)
        assert sorted(s["metric"]["device_id"] for s in ready) == ["kiosk-east", "kiosk-west"]
        info = _query(base, "appliance_device_info")
        # the device's own name for itself, beside the target list's
        assert {s["metric"]["exported_device_id"] for s in info} == {"kiosk-east", "kiosk-west"}
        assert all(s["metric"]["exported_device_id"] == s["metric"]["device_id"] for s in info)

        def both_recorded() -> list[dict[str, Any]]:
            # the rule's first evaluation may come between the two devices' first scrapes
            found = _query(base, "appliance:disk_free:ratio")
            return found if len(found) == 2 else []

        free = _wait_for("a recording rule's result for both devices", both_recorded)
        assert len(free) == 2 and all(0.0 < float(s["value"][1]) < 1.0 for s in free)
        assert not [a for a in _firing(base) if a["alertname"] == "ApplianceDown"]

        daemons.pop("kiosk-west").stop()

        def west_down() -> list[dict[str, str]]:
            return [a for a in _firing(base) if a["alertname"] == "ApplianceDown"]

        down = _wait_for("ApplianceDown for the stopped device", west_down)
        assert [(a["device_id"], a["site_name"], a["severity"]) for a in down] == [
            ("kiosk-west", "Test depot", "critical")
        ]
        assert [s["metric"]["device_id"] for s in _query(base, "up == 1")] == ["kiosk-east"]
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        for daemon in daemons.values():
            daemon.stop()
