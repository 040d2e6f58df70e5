"""Step 4: write the site configuration (/var/lib/appliance/appliance.toml), validated by the schema.

It lives in the daemon's own state folder because the admin page changes it (atomically) at run time.
The site file's own text is kept (its comments, order and tables), with the flags' keys changed in it;
a device file it replaces is kept as ``appliance.toml.bak``.

The file starts from ``--site-file`` (any keys of the appliance's configuration), then the flags
(site name, device id, language, persona, audio devices, SIP), then what provisioning knows best:
the device paths and, on a Jetson, the GPU engines (unless the site file chose otherwise).
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

from appliance.config import ConfigError, load_settings
from appliance.config_writer import edited_toml, write_keeping_backup
from engines.files import TOMLDecodeError, loads_toml
from provisioning.context import DEVICE_BUNDLE_DIR, DEVICE_TRACE_DB, ProvisioningContext, SiteOptions
from provisioning.files import give_to_service_user
from provisioning.framework import StepFailed, StepOutcome

DEMO_SITE_NAME = "Demo site"
JETSON_ENGINES: dict[str, dict[str, Any]] = {
    "asr": {"backend": "tensorrt", "device": "cuda", "precision": "fp16"},
    "llm": {"gpu_layers": -1},
}


def _read_site_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = loads_toml(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise StepFailed(f"site file {path} not found", fix="pass the path of the site's TOML file") from err
    except (OSError, UnicodeDecodeError, TOMLDecodeError) as err:
        raise StepFailed(f"site file {path} is not readable TOML: {err}", fix="correct the file") from err
    return {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}


def _set(data: dict[str, dict[str, Any]], section: str, key: str, value: Any) -> None:
    if value is not None:
        data.setdefault(section, {})[key] = value


def compose(site: SiteOptions, target: str) -> dict[str, dict[str, Any]]:
    data = _read_site_file(site.site_file) if site.site_file else {}
    _set(data, "agent", "site_name", site.site_name)
    _set(
        data,
        "agent",
        "device_id",
        site.device_id or data.get("agent", {}).get("device_id") or platform.node(),
    )
    _set(data, "asr", "language", site.language)
    _set(data, "agent", "persona", site.persona)
    if site.no_audio:
        _set(data, "audio", "input", "none")
        _set(data, "audio", "output", "none")
    _set(data, "audio", "input_device", site.input_device)
    _set(data, "audio", "output_device", site.output_device)
    _set(data, "sip", "enabled", site.sip_enabled)
    _set(data, "sip", "bind_host", site.sip_bind_host)
    _set(data, "sip", "port", site.sip_port)
    if site.sip_allow_from:
        _set(data, "sip", "allow_from", list(site.sip_allow_from))
    data.setdefault("bundle", {})["dir"] = DEVICE_BUNDLE_DIR
    data.setdefault("trace", {})["db_path"] = DEVICE_TRACE_DB
    if target == "jetson":
        for section, values in JETSON_ENGINES.items():
            for key, value in values.items():
                data.setdefault(section, {}).setdefault(key, value)
    return data


def validate(text: str, where: Path) -> None:
    """Raise StepFailed listing every problem, as `appliance config check` would."""
    where.parent.mkdir(parents=True, exist_ok=True)
    probe = where.with_name(f".{where.name}.check")
    probe.write_text(text, encoding="utf-8")
    try:
        load_settings(probe)
    except ConfigError as err:
        problems = "; ".join(str(p) for p in err.problems)
        raise StepFailed(
            f"the site configuration is not valid: {problems}",
            fix="correct these keys in the site file or the flags, then run the same command again",
        ) from err
    finally:
        probe.unlink(missing_ok=True)


def run_site_config(ctx: ProvisioningContext) -> StepOutcome:
    data = compose(ctx.site, ctx.target)
    agent = data.get("agent", {})
    if agent.get("site_name") in (None, "", DEMO_SITE_NAME):
        raise StepFailed(
            "no site name given",
            fix='pass --site-name "Plant 3 reception" (or agent.site_name in --site-file)',
        )
    try:
        site_text = ctx.site.site_file.read_text(encoding="utf-8") if ctx.site.site_file else ""
        text = edited_toml(site_text, data, header="Site configuration written by `python -m provisioning`.")
    except ValueError as err:
        raise StepFailed(
            f"the site file has a value that cannot be used: {err}", fix="correct the site file"
        ) from err
    validate(text, ctx.config_file)
    write_keeping_backup(ctx.config_file, text, mode=0o644)
    give_to_service_user(ctx.config_file, ctx.system_root)  # the admin page edits it
    sip = data.get("sip", {})
    audio = data.get("audio", {})
    outputs = {
        "path": str(ctx.config_file),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "site_name": agent.get("site_name"),
        "device_id": agent.get("device_id"),
        "language": agent.get("language", "en"),
        "audio": {k: audio.get(k, "auto" if k in ("input", "output") else None) for k in ("input", "output")}
        | {"input_device": audio.get("input_device"), "output_device": audio.get("output_device")},
        "sip": {
            "enabled": sip.get("enabled", False),
            "bind_host": sip.get("bind_host"),
            "port": sip.get("port"),
        },
    }
    return StepOutcome(f"{ctx.config_file} for {agent['site_name']!r} ({agent['device_id']})", outputs)


def config_still_valid(ctx: ProvisioningContext) -> bool:
    return ctx.config_file.is_file()
