"""The last configuration the daemon started with, kept beside the configuration file.

A change that validates can still stop the daemon from starting (a model the bundle lost, a file
edited by hand). Then the daemon starts with the configuration that last started, says so loudly
(log, systemd STATUS, a banner on the admin page), and the site stays reachable to be fixed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from appliance.config import ConfigError, Settings, load_settings
from engines.files import atomic_write

log = logging.getLogger(__name__)


def last_good_path(config_path: Path) -> Path:
    return config_path.with_name(f".{config_path.name}.last-good")


def remember(config_path: Path | None) -> None:
    """After a start that reached READY: this file is the one to come back to."""
    if config_path is None:
        return
    try:
        text = config_path.read_bytes()
        target = last_good_path(config_path)
        if not target.exists() or target.read_bytes() != text:
            atomic_write(target, text, mode=0o600)
    except OSError as err:
        log.warning("could not keep %s as the last configuration that started: %s", config_path, err)


def fallback(config_path: Path | None, why: str) -> tuple[Settings, str] | None:
    """The last configuration that started, and the notice to show once the daemon has started with
    it, when there is one that differs from ``config_path``; None otherwise."""
    if config_path is None:
        return None
    kept = last_good_path(config_path)
    try:
        if not kept.is_file() or (config_path.is_file() and kept.read_bytes() == config_path.read_bytes()):
            return None
        settings = load_settings(kept)
    except (OSError, ConfigError) as err:
        log.error("the last configuration that started (%s) cannot be used either: %s", kept, err)
        return None
    notice = (
        f"{config_path} could not be used ({why.splitlines()[0]}); running with the last configuration "
        f"that started ({kept}). Fix the file (appliance config check {config_path}) and restart."
    )
    return settings, notice
