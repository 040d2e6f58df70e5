"""Everything the provisioning steps need to know, gathered from the command line once."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from provisioning.files import under_root

Target = Literal["jetson", "cpu"]
TARGETS: tuple[str, ...] = ("jetson", "cpu")

# Where things live on the device (inside --system-root, which is "/" on a real device).
DEVICE_STATE_DIR = "/var/lib/appliance"  # StateDirectory=appliance
DEVICE_BUNDLE_DIR = "/var/lib/appliance/bundle"
DEVICE_CONFIG_FILE = "/var/lib/appliance/appliance.toml"
DEVICE_PASSWORD_FILE = "/var/lib/appliance/admin-password"
DEVICE_TRUSTED_KEY = "/etc/appliance/bundle-signing.pub"
DEVICE_SITE_KEY = "/etc/appliance/site-signing.pub"
DEVICE_TRACE_DB = "/var/lib/appliance/turns.sqlite3"
DEVICE_UNIT_DIR = "/etc/systemd/system"
DEVICE_SYSUSERS_DIR = "/etc/sysusers.d"
DEFAULT_STATE_DIR = Path("/var/lib/appliance/provisioning")


@dataclass
class SiteOptions:
    """Site settings from the command line; None means "keep the file's or the default value"."""

    site_file: Path | None = None
    site_name: str | None = None
    device_id: str | None = None
    language: str | None = None
    persona: str | None = None
    input_device: str | None = None
    output_device: str | None = None
    no_audio: bool = False  # phone calls only: no local microphone or speaker
    sip_enabled: bool | None = None
    sip_bind_host: str | None = None
    sip_port: int | None = None
    sip_allow_from: list[str] = field(default_factory=list)


@dataclass
class ProvisioningContext:
    target: Target
    state_dir: Path
    system_root: Path = Path("/")
    media_dir: Path | None = None
    signature_file: Path | None = None  # default: <media>/manifest.json.sig
    trusted_key: Path | None = None  # default: the device's installed key
    site: SiteOptions = field(default_factory=SiteOptions)
    clone_dir: Path | None = None  # a first device's export (provisioning.clone)
    site_key: Path | None = None  # ... checked with the site's public key (default: the device's)
    password_file_in: Path | None = None  # read the new admin password from this file
    password_stdin: bool = False
    interactive: bool = True
    python_prefix: Path = field(default_factory=lambda: Path(sys.prefix))
    self_test_question: str = "What time does the site open tomorrow?"
    self_test_timeout_s: float = 600.0
    progress: bool = True
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def bundle_dir(self) -> Path:
        return under_root(self.system_root, DEVICE_BUNDLE_DIR)

    @property
    def config_file(self) -> Path:
        return under_root(self.system_root, DEVICE_CONFIG_FILE)

    @property
    def password_file(self) -> Path:
        return under_root(self.system_root, DEVICE_PASSWORD_FILE)

    @property
    def trusted_key_file(self) -> Path:
        return self.trusted_key or under_root(self.system_root, DEVICE_TRUSTED_KEY)

    @property
    def site_key_file(self) -> Path:
        return self.site_key or under_root(self.system_root, DEVICE_SITE_KEY)

    @property
    def unit_dir(self) -> Path:
        return under_root(self.system_root, DEVICE_UNIT_DIR)

    @property
    def sysusers_dir(self) -> Path:
        return under_root(self.system_root, DEVICE_SYSUSERS_DIR)

    @property
    def on_live_system(self) -> bool:
        return self.system_root.resolve() == Path("/")

    @property
    def appliance_command(self) -> Path:
        return self.python_prefix / "bin" / "appliance"
