"""A second device set up like the first: ``python -m provisioning export`` on the first writes its site
configuration, the facts files it names and the bundle version it runs into a folder (removable media),
signed with the site's key; ``python -m provisioning run --clone FOLDER`` on the second checks the
signature and provisions from it.

What a device keeps to itself is not exported: its device id, its echo delay (measured in its own room),
its LAN address and secrets (the admin password, the SIP password file, the metrics token). The facts
files travel with the configuration, and the configuration names them by their place in the folder;
on the new device they go to ``/var/lib/appliance/site/``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomlkit
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from tomlkit.exceptions import TOMLKitError

from engines.bundle_store import BundleStore, version_of
from engines.bundle_store import resolve_bundle_dir as active_bundle
from engines.errors import BundleError
from provisioning.files import atomic_write_bytes, atomic_write_text, under_root
from provisioning.signing import load_private_key, load_public_key, public_key_fingerprint

EXPORT_NAME = "export.json"
EXPORT_SIGNATURE = EXPORT_NAME + ".sig"
CONFIG_NAME = "appliance.toml"
FILES_DIR = "files"
DEVICE_SITE_DIR = "/var/lib/appliance/site"
MAX_EXPORT_FILE_BYTES = 16 * 1024 * 1024
# Keys that belong to one device, never copied to another.
DEVICE_OWN = {
    "agent": ("device_id",),
    "audio": ("echo_delay_ms", "input_device", "output_device"),
    "sip": ("advertise_host", "register_password_file"),
    "admin": ("metrics_token_file",),
}
SECRETS_NOTE = "set on the new device: the admin password (--admin-password-file), the SIP password file"


class ExportError(Exception):
    """An export that cannot be written or trusted; the message names the fix."""

    def __init__(self, message: str, *, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


@dataclass(frozen=True)
class SiteExport:
    folder: Path
    config_text: str  # the configuration, facts files named relative to the folder
    files: dict[str, str]  # path in the folder -> sha256
    bundle_version: str | None
    from_device: str
    signer: str


def export_site(config_file: Path, out: Path, site_key: Path, *, system_root: Path = Path("/")) -> SiteExport:
    """The device's configuration and facts files into ``out``, signed with ``site_key``."""
    try:
        text = config_file.read_text(encoding="utf-8")
        doc = tomlkit.parse(text)
    except (OSError, UnicodeDecodeError, TOMLKitError) as err:
        raise ExportError(
            f"cannot read the device's configuration {config_file}: {err}",
            fix="check it: appliance config check " + str(config_file),
        ) from err
    key = load_private_key(site_key)
    from_device = str(doc.get("agent", {}).get("device_id", ""))
    for section, keys in DEVICE_OWN.items():
        table = doc.get(section)
        if table is None:
            continue
        for name in keys:
            table.pop(name, None)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for tool in _facts_tools(doc):
        source = under_root(system_root, str(tool["file"]))
        rel = f"{FILES_DIR}/{_unique(source.name, files)}"
        files[rel] = _copy(source, out / rel)
        tool["file"] = rel
    config_text = tomlkit.dumps(doc)
    atomic_write_text(out / CONFIG_NAME, config_text)
    files[CONFIG_NAME] = hashlib.sha256(config_text.encode("utf-8")).hexdigest()
    record = {
        "format": 1,
        "from_device": from_device,
        "exported_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "bundle_version": _bundle_version(doc, system_root),
        "files": files,
    }
    payload = (json.dumps(record, indent=2) + "\n").encode("utf-8")
    atomic_write_bytes(out / EXPORT_NAME, payload)
    atomic_write_text(out / EXPORT_SIGNATURE, base64.b64encode(key.sign(payload)).decode("ascii") + "\n")
    return read_export(out, key.public_key())


def read_export(folder: Path, site_public_key: Path | Ed25519PublicKey) -> SiteExport:
    """The export in ``folder``, every file checked against its signed record; raises ExportError."""
    fix = "copy the export from the first device again (python -m provisioning export), signed with the site's key"
    try:
        payload = (folder / EXPORT_NAME).read_bytes()
        signature = base64.b64decode(
            (folder / EXPORT_SIGNATURE).read_text(encoding="ascii").strip(), validate=True
        )
    except FileNotFoundError as err:
        raise ExportError(f"{folder} is not a device export ({err.filename} is missing)", fix=fix) from err
    except (OSError, ValueError) as err:
        raise ExportError(f"cannot read the export in {folder}: {err}", fix=fix) from err
    public = load_public_key(site_public_key) if isinstance(site_public_key, Path) else site_public_key
    try:
        public.verify(signature, payload)
    except Exception as err:  # cryptography's InvalidSignature, or a malformed one
        raise ExportError(
            f"the export in {folder} is not signed by the site's key (altered, or from another site)", fix=fix
        ) from err
    record = json.loads(payload)
    files = {str(k): str(v) for k, v in record.get("files", {}).items()}
    for rel, digest in files.items():
        path = folder / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute() or not path.is_file():
            raise ExportError(f"the export lists {rel!r}, which is not in {folder}", fix=fix)
        if _sha256(path) != digest:
            raise ExportError(f"{path} was changed after the export was signed", fix=fix)
    return SiteExport(
        folder,
        (folder / CONFIG_NAME).read_text(encoding="utf-8"),
        files,
        record.get("bundle_version"),
        str(record.get("from_device", "")),
        public_key_fingerprint(public),
    )


def installed_config_text(export: SiteExport, system_root: Path) -> str:
    """The export's configuration with its facts files copied to the device's site folder."""

    def carried(rel: str) -> Path:
        if rel not in export.files:
            raise ExportError(
                f"the exported configuration names {rel!r}, which the export does not carry",
                fix="export the first device again",
            )
        return export.folder / rel

    return with_facts_installed(export.config_text, carried, system_root)


def with_facts_installed(text: str, source_of: Callable[[str], Path], system_root: Path) -> str:
    """``text`` (a configuration) with each facts file it names copied to the device's site folder
    (``/var/lib/appliance/site``) and named there: the facts travel with the configuration, never
    left at a path on the technician's laptop. A file already in the site folder stays."""
    doc = tomlkit.parse(text)
    site_dir = under_root(system_root, DEVICE_SITE_DIR)
    placed: dict[str, str] = {}
    for tool in _facts_tools(doc):
        named = str(tool["file"])
        if named.startswith(DEVICE_SITE_DIR + "/"):
            continue
        name = _unique(Path(named).name, placed)
        placed[f"{FILES_DIR}/{name}"] = _copy(source_of(named), site_dir / name)
        tool["file"] = f"{DEVICE_SITE_DIR}/{name}"
    return tomlkit.dumps(doc)


def _facts_tools(doc: Any) -> list[Any]:
    tools = doc.get("agent", {}).get("tools", [])
    return [t for t in tools if isinstance(t, dict) and t.get("kind") == "facts" and t.get("file")]


def _unique(name: str, taken: dict[str, str]) -> str:
    stem, suffix, n = Path(name).stem, Path(name).suffix, 1
    while f"{FILES_DIR}/{name}" in taken:
        n += 1
        name = f"{stem}-{n}{suffix}"
    return name


def _copy(source: Path, target: Path) -> str:
    try:
        size = source.stat().st_size
    except OSError as err:
        raise ExportError(
            f"the facts file {source} cannot be read: {err}",
            fix="correct the tool's file in the configuration, or put the file back",
        ) from err
    if size > MAX_EXPORT_FILE_BYTES:
        raise ExportError(f"{source} is {size} bytes, not a facts file", fix="name the site's facts file")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    shutil.copyfile(source, partial)
    partial.rename(target)
    return _sha256(target)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _bundle_version(doc: Any, system_root: Path) -> str | None:
    root = doc.get("bundle", {}).get("dir")
    if not root:
        return None
    try:
        folder = active_bundle(under_root(system_root, str(root)))
    except BundleError:
        return None
    return version_of(folder) if BundleStore(folder.parent.parent).versioned else None
