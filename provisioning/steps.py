"""The provisioning steps, in order, and what each needs before it can run."""

from __future__ import annotations

from appliance.config import ConfigError, load_settings
from engines.bundle_store import DEFAULT_KEEP, MADE_ON_DEVICE, BundleStore, resolve_bundle_dir
from engines.errors import BundleError
from engines.manifest import MANIFEST_NAME, Manifest
from provisioning.admin_password import password_still_valid, run_admin_password
from provisioning.bundle_import import (
    ImportRefused,
    import_bundle,
    manifest_from_bytes,
    recover_interrupted_swap,
)
from provisioning.context import ProvisioningContext
from provisioning.engine_build import run_engine_build
from provisioning.files import give_to_service_user
from provisioning.framework import StateStore, Step, StepFailed, StepOutcome
from provisioning.preflight import run_preflight
from provisioning.report import run_report
from provisioning.self_test import run_self_test
from provisioning.signing import (
    SIGNATURE_NAME,
    SignatureError,
    load_public_key,
    read_signature,
    signed_manifest_bytes,
    verify_manifest_bytes,
)
from provisioning.site_config import config_still_valid, run_site_config
from provisioning.units import run_units, units_still_valid


def run_bundle_import(ctx: ProvisioningContext) -> StepOutcome:
    if ctx.media_dir is None:
        return _keep_installed_bundle(ctx)
    try:
        result = import_bundle(
            ctx.media_dir,
            ctx.bundle_dir,
            ctx.trusted_key_file,
            signature_file=ctx.signature_file,
            progress=ctx.progress,
            keep=_versions_to_keep(ctx),
        )
    except ImportRefused as err:
        raise StepFailed(err.message, fix=err.fix) from err
    give_to_service_user(ctx.bundle_dir, ctx.system_root)  # the engines unit adds TensorRT plans to it
    how = "copied and verified" if result.copied else "already installed and intact"
    if result.version is not None:
        how += f" as version {result.version}" + (
            ", now active"
            if result.activated
            else f" (not active: appliance bundle activate {result.version})"
        )
    if result.pruned:
        how += f"; removed old version(s) {', '.join(result.pruned)}"
    outputs = {
        "media": str(ctx.media_dir),
        "bundle_dir": str(result.bundle_dir),
        "artifacts": result.artifacts,
        "total_bytes": result.total_bytes,
        "manifest_sha256": result.manifest_sha256,
        "signed_by": result.signer_fingerprint,
        "copied": result.copied,
        "ignored_files_on_media": result.ignored_files,
        "version": result.version,
        "activated": result.activated,
        "pruned": list(result.pruned),
    }
    summary = (
        f"{result.artifacts} artifacts ({result.total_bytes / 1e6:.0f} MB) {how}; "
        f"signature valid ({result.signer_fingerprint})"
    )
    return StepOutcome(summary, outputs)


def _versions_to_keep(ctx: ProvisioningContext) -> int:
    """``bundle.keep`` of the device's configuration (a first provisioning has none yet: the default)."""
    if not ctx.config_file.is_file():
        return DEFAULT_KEEP
    try:
        return load_settings(ctx.config_file).bundle.keep
    except ConfigError:
        return DEFAULT_KEEP


def _keep_installed_bundle(ctx: ProvisioningContext) -> StepOutcome:
    """No --media: accept the installed bundle only if it is intact and signed by a trusted key."""
    recover_interrupted_swap(ctx.bundle_dir)
    fix = "insert the media with the signed bundle and pass its folder with --media"
    try:
        installed = resolve_bundle_dir(ctx.bundle_dir)  # a versioned root: its active version
        made_here = _made_on_this_device(ctx)
        manifest_bytes = (
            (installed / MANIFEST_NAME).read_bytes() if made_here else signed_manifest_bytes(installed)
        )
        if not made_here:
            verify_manifest_bytes(
                manifest_bytes,
                read_signature(ctx.signature_file or installed / SIGNATURE_NAME),
                load_public_key(ctx.trusted_key_file),
            )
        manifest = manifest_from_bytes(manifest_bytes, installed)
    except FileNotFoundError as err:
        raise StepFailed(f"no engine bundle installed at {ctx.bundle_dir}", fix=fix) from err
    except (SignatureError, BundleError, OSError) as err:
        raise StepFailed(f"the installed bundle cannot be trusted: {err}", fix=fix) from err
    problems = manifest.verify(installed, full=True)
    if problems:
        raise StepFailed(f"the installed bundle is damaged: {'; '.join(map(str, problems))}", fix=fix)
    how = "made on this device from a signed one" if made_here else "signed"
    return StepOutcome(
        f"no --media: kept the installed bundle ({len(manifest.artifacts)} artifacts, {how} and intact)",
        {"bundle_dir": str(ctx.bundle_dir), "artifacts": len(manifest.artifacts), "copied": False},
    )


def _made_on_this_device(ctx: ProvisioningContext) -> bool:
    """The active version was made here (``appliance bundle add-model``): trusted on this device, as
    its own work; signatures are for bundles brought on media."""
    store = BundleStore(ctx.bundle_dir)
    return store.versioned and store.active_version().source == MADE_ON_DEVICE


def bundle_still_valid(ctx: ProvisioningContext) -> bool:
    try:
        installed = resolve_bundle_dir(ctx.bundle_dir)
        manifest = Manifest.read(installed)
    except BundleError:
        return False
    return manifest.verify(installed, full=False) == []


TITLES = {
    "preflight": "Preflight checks",
    "bundle": "Import the engine bundle",
    "engines": "Build this device's engines",
    "site-config": "Site configuration",
    "admin-password": "Admin password",
    "units": "Install and enable the systemd units",
    "self-test": "Self-test turn",
}


def build_steps() -> list[Step[ProvisioningContext]]:
    def report(ctx: ProvisioningContext) -> StepOutcome:
        return run_report(ctx, StateStore(ctx.state_dir), TITLES)

    return [
        Step("preflight", TITLES["preflight"], run_preflight),
        Step(
            "bundle",
            TITLES["bundle"],
            run_bundle_import,
            needs=("preflight",),
            still_valid=bundle_still_valid,
        ),
        Step("engines", TITLES["engines"], run_engine_build, needs=("bundle",)),
        Step(
            "site-config",
            TITLES["site-config"],
            run_site_config,
            needs=("preflight",),
            still_valid=config_still_valid,
        ),
        Step(
            "admin-password", TITLES["admin-password"], run_admin_password, still_valid=password_still_valid
        ),
        Step("units", TITLES["units"], run_units, needs=("site-config",), still_valid=units_still_valid),
        Step("self-test", TITLES["self-test"], run_self_test, needs=("engines", "site-config")),
        Step("report", "Report", report, always=True),
    ]


STEP_NAMES = [*TITLES, "report"]
