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
from provisioning.clone import (
    DEVICE_SITE_DIR,
    ExportError,
    installed_config_text,
    read_export,
    with_facts_installed,
)
from provisioning.context import DEVICE_BUNDLE_DIR, DEVICE_TRACE_DB, ProvisioningContext, SiteOptions
from provisioning.files import give_to_service_user, under_root
from provisioning.framework import StepFailed, StepOutcome
from provisioning.signing import SignatureError

DEMO_SITE_NAME = "Demo site"
JETSON_ENGINES: dict[str, dict[str, Any]] = {
    "asr": {"backend": "tensorrt", "device": "cuda", "precision": "fp16"},
    "llm": {"gpu_layers": -1},
}


def _read_site_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise StepFailed(f"site file {path} not found", fix="pass the path of the site's TOML file") from err
    except (OSError, UnicodeDecodeError) as err:
        raise StepFailed(f"site file {path} is not readable: {err}", fix="correct the file") from err
    return _site_data(text, f"site file {path}")


def _site_data(text: str, what: str) -> dict[str, dict[str, Any]]:
    try:
        data = loads_toml(text)
    except TOMLDecodeError as err:
        raise StepFailed(f"{what} is not readable TOML: {err}", fix="correct the file") from err
    return {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}


def _site_text(ctx: ProvisioningContext) -> tuple[str, dict[str, Any]]:
    """The text the device's file starts from (a first device's export, the site file, or nothing),
    and what the report says of where it came from."""
    if ctx.clone_dir is None:
        return _site_file_text(ctx), {}
    if ctx.site.site_file is not None:
        raise StepFailed("both --clone and --site-file were given", fix="pass one of them")
    try:
        export = read_export(ctx.clone_dir, ctx.site_key_file)
        text = installed_config_text(export, ctx.system_root)
    except ExportError as err:
        raise StepFailed(err.message, fix=err.fix) from err
    except SignatureError as err:
        raise StepFailed(
            f"the export cannot be checked: {err}", fix="pass the site's public key with --site-key FILE"
        ) from err
    give_to_service_user(under_root(ctx.system_root, DEVICE_SITE_DIR), ctx.system_root)
    cloned = {
        "from_device": export.from_device,
        "signed_by": export.signer,
        "bundle_version": export.bundle_version,
    }
    return text, {"cloned": cloned}


def _set(data: dict[str, dict[str, Any]], section: str, key: str, value: Any) -> None:
    if value is not None:
        data.setdefault(section, {})[key] = value


def compose(site: SiteOptions, target: str, site_text: str | None = None) -> dict[str, dict[str, Any]]:
    """The device's settings: ``site_text`` (else the site file), then the flags, then the device's paths."""
    if site_text is not None:
        data = _site_data(site_text, "the exported configuration")
    else:
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


def _site_file_text(ctx: ProvisioningContext) -> str:
    """The site file's text, its facts files copied onto the device (a relative path is from the
    site file's folder)."""
    site_file = ctx.site.site_file
    if site_file is None:
        return ""
    try:
        text = site_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""  # compose names the problem

    def source(named: str) -> Path:
        path = Path(named).expanduser()
        return path if path.is_absolute() else site_file.parent / path

    try:
        installed = with_facts_installed(text, source, ctx.system_root)
    except ExportError as err:
        raise StepFailed(
            f"the site file names a facts file that cannot be used: {err.message}", fix=err.fix
        ) from err
    except ValueError:  # not TOML: compose names the problem
        return text
    give_to_service_user(under_root(ctx.system_root, DEVICE_SITE_DIR), ctx.system_root)
    return installed


def run_site_config(ctx: ProvisioningContext) -> StepOutcome:
    site_text, origin = _site_text(ctx)
    data = compose(ctx.site, ctx.target, site_text if site_text else None)
    agent = data.get("agent", {})
    if agent.get("site_name") in (None, "", DEMO_SITE_NAME):
        raise StepFailed(
            "no site name given",
            fix='pass --site-name "Plant 3 reception" (or agent.site_name in --site-file)',
        )
    try:
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
    certificate = _admin_certificate(ctx)
    if certificate:
        outputs["admin_certificate"] = certificate
    summary = f"{ctx.config_file} for {agent['site_name']!r} ({agent['device_id']})"
    if certificate:
        summary += f"; admin page certificate {certificate}"
    if origin:
        cloned = origin["cloned"]
        summary += f"; set up like {cloned['from_device'] or 'the first device'} (export signed {cloned['signed_by']})"
    return StepOutcome(summary, outputs | origin)


def _admin_certificate(ctx: ProvisioningContext) -> str | None:
    """The admin page's device certificate, made now where the page will serve a LAN address without
    the site's own: its fingerprint goes into the report for the technician to compare."""
    from appliance.certificates import device_certificate, fingerprint_of, is_loopback

    settings = load_settings(ctx.config_file)
    admin = settings.admin
    if not admin.enabled or admin.tls_cert_file or admin.allow_plain_http or is_loopback(admin.bind_host):
        return None
    folder = under_root(ctx.system_root, admin.tls_dir)
    cert, _ = device_certificate(folder, settings.agent.device_id, admin.bind_host)
    give_to_service_user(folder, ctx.system_root)
    return fingerprint_of(cert)


def config_still_valid(ctx: ProvisioningContext) -> bool:
    return ctx.config_file.is_file()
