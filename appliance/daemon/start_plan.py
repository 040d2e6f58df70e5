"""What the daemon starts with: the configuration file, or the last one that started when the file
cannot start here, and whether the local audio session can run.

The start never dies where it can serve: a configuration that fails the schema or
``appliance.daemon.start_check`` is replaced by the last good one (``appliance.daemon.last_good``), loudly; a local
audio problem (no microphone, a device name that is not there) starts the daemon without its local
session, SIP and the admin page up and the problem on the page and in STATUS. Only a start with no
notice and every listener up is remembered as the last good one (``appliance.daemon.service.serve``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from appliance.config import ConfigError, Settings, load_settings
from appliance.daemon import last_good
from appliance.daemon.start_check import check_start

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartPlan:
    settings: Settings
    notice: str | None  # why the daemon runs degraded (or on the last good configuration); None: it does not
    microphone: str | None  # the capture device's name when the local session listens to one
    no_microphone_reason: str
    local_problem: str | None  # why the local session does not run at all; None: it runs


def plan_start(config_path: Path | None) -> StartPlan:
    """Raises ConfigError when the file is invalid and no last good configuration can stand in."""
    notice: str | None = None
    try:
        settings = load_settings(config_path)
    except ConfigError as err:
        kept = last_good.fallback(config_path, str(err))
        if kept is None:
            raise
        settings, notice = kept
    check = check_start(settings, config_path=config_path)
    if check.problems and notice is None:
        kept = last_good.fallback(config_path, "; ".join(map(str, check.problems)))
        if kept is not None:
            settings, notice = kept
            check = check_start(settings, config_path=config_path)
    if check.problems:
        listed = "; ".join(map(str, check.problems))
        log.error("starting with problems no other configuration can fix: %s", listed)
        notice = f"{notice} Also: {listed}" if notice else f"{config_path or 'the configuration'}: {listed}"
    local_problem = "; ".join(map(str, check.audio)) or None
    if local_problem is not None:
        log.error("no local audio session: %s", local_problem)
        said = f"no local audio session: {local_problem}"
        notice = f"{notice} Also: {said}" if notice else said
    microphone, reason = _microphone(settings) if local_problem is None else (None, local_problem)
    return StartPlan(settings, notice, microphone, reason, local_problem)


def _microphone(settings: Settings) -> tuple[str | None, str]:
    from appliance.audio.devices import probe_device

    if settings.audio.input == "none":
        return None, "audio.input is 'none'"
    probe = probe_device("input", settings.audio.input_device)
    return (probe.name, "") if probe.available else (None, probe.reason)
