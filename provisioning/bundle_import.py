"""Import a signed engine bundle from removable media into the device's bundle folder.

Order of work, so that a bad bundle never replaces a good one:
1. the signature over ``manifest.json`` is checked against the device's trusted key (before any
   large copy); 2. every listed file is copied into a staging folder next to the device bundle while
   its sha256 is computed; 3. only when every checksum matches is the staging folder swapped in
   (two renames; an interrupted swap is repaired by the next run).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from engines.bundle_store import DEFAULT_KEEP, VERSIONS, BundleStore, version_id
from engines.errors import BundleError
from engines.manifest import FORMAT_VERSION, MANIFEST_NAME, Artifact, Manifest
from provisioning.files import atomic_write_bytes, fsync_dir
from provisioning.signing import (
    SIGNATURE_NAME,
    SIGNED_MANIFEST_NAME,
    SignatureError,
    load_public_key,
    public_key_fingerprint,
    read_signature,
    signed_manifest_bytes,
    verify_manifest_bytes,
)

log = logging.getLogger(__name__)

_CHUNK_BYTES = 4 * 1024 * 1024
_RESERVED = (MANIFEST_NAME, SIGNATURE_NAME, SIGNED_MANIFEST_NAME)
FREE_SPACE_MARGIN_BYTES = 512 * 1024 * 1024


class ImportRefused(Exception):
    def __init__(self, message: str, *, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class ImportResult:
    bundle_dir: Path
    artifacts: int
    total_bytes: int
    manifest_sha256: str
    signer_fingerprint: str
    copied: bool  # False when the same bundle was already installed and intact
    ignored_files: int  # files on the media that the manifest does not list
    version: str | None = None  # a versioned bundle root: the version the bundle is (engines.bundle_store)
    activated: bool = False  # ... and it became the active one (the root had none)
    pruned: tuple[str, ...] = ()  # old versions removed to keep ``keep`` of them


def manifest_from_bytes(data: bytes, where: Path) -> Manifest:
    """Parse manifest bytes (the signed copy) the way ``Manifest.read`` parses the file."""
    try:
        payload = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise BundleError(f"the signed manifest in {where} is not JSON: {err}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise BundleError(f"the signed manifest in {where} has an unknown format")
    entries = payload.get("artifacts", [])
    if not isinstance(entries, list):
        raise BundleError(f"the signed manifest in {where}: 'artifacts' must be a list")
    return Manifest([Artifact.from_dict(e) for e in entries], payload.get("meta", {}))


def staging_dir(bundle_dir: Path) -> Path:
    return bundle_dir.with_name(f".{bundle_dir.name}.staging")


def previous_dir(bundle_dir: Path) -> Path:
    return bundle_dir.with_name(f".{bundle_dir.name}.previous")


def recover_interrupted_swap(bundle_dir: Path) -> str | None:
    """Undo what an interrupted import left behind; returns what was repaired, if anything."""
    repaired = None
    previous, staging = previous_dir(bundle_dir), staging_dir(bundle_dir)
    if previous.exists() and not bundle_dir.exists():
        previous.rename(bundle_dir)  # interrupted between the two renames: keep the old bundle
        repaired = f"restored the previous bundle at {bundle_dir}"
    elif previous.exists():
        shutil.rmtree(previous)
        repaired = "removed the previous bundle left by an interrupted import"
    if staging.exists():
        shutil.rmtree(staging)
        repaired = (repaired + "; " if repaired else "") + "removed a half-copied staging folder"
    return repaired


def key_fingerprint(public_key_path: Path) -> str:
    return public_key_fingerprint(load_public_key(public_key_path))


def _safe_relative(art: Artifact) -> PurePosixPath:
    rel = PurePosixPath(art.path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or rel.name in _RESERVED:
        raise ImportRefused(
            f"the manifest lists an unsafe path for {art.name}: {art.path!r}",
            fix="the bundle was not made by the bundle builder; get a signed bundle from the factory",
        )
    return rel


def _listed_files(media_dir: Path, manifest: Manifest) -> set[str]:
    listed = {art.path for art in manifest.artifacts.values()} | set(_RESERVED)
    on_media = {p.relative_to(media_dir).as_posix() for p in media_dir.rglob("*") if p.is_file()}
    return on_media - listed


def _check_media(media_dir: Path, manifest: Manifest) -> None:
    problems = []
    for art in sorted(manifest.artifacts.values(), key=lambda a: a.name):
        path = media_dir / _safe_relative(art)
        if not path.is_file():
            problems.append(f"{art.path}: missing")
        elif path.stat().st_size != art.size_bytes:
            problems.append(f"{art.path}: {path.stat().st_size} bytes, the manifest says {art.size_bytes}")
    if problems:
        raise ImportRefused(
            "the bundle on the media is incomplete or altered: " + "; ".join(problems),
            fix="copy the signed bundle onto the media again from the factory's original",
        )


def _free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists():
        probe = probe.parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def _copy_and_hash(source: Path, target: Path, bar: tqdm) -> str:
    digest = hashlib.sha256()
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as src, target.open("wb") as dst:
        while chunk := src.read(_CHUNK_BYTES):
            digest.update(chunk)
            dst.write(chunk)
            bar.update(len(chunk))
        dst.flush()
        os.fsync(dst.fileno())
    return digest.hexdigest()


def _already_installed(bundle_dir: Path, manifest: Manifest, manifest_bytes: bytes, signature: bytes) -> bool:
    """The same signed bundle is installed and every file it lists is intact (device-built plans,
    recorded in manifest.json since, are kept)."""
    try:
        if signed_manifest_bytes(bundle_dir) != manifest_bytes:
            return False
        if read_signature(bundle_dir / SIGNATURE_NAME) != signature:
            return False
        return manifest.verify(bundle_dir, full=True) == []
    except (OSError, BundleError, SignatureError):
        return False


def import_bundle(
    media_dir: Path,
    bundle_dir: Path,
    trusted_key: Path,
    *,
    signature_file: Path | None = None,
    progress: bool = True,
    keep: int = DEFAULT_KEEP,
) -> ImportResult:
    """Verify and install the bundle on ``media_dir`` as ``bundle_dir`` (a versioned root: as a new
    version, the oldest beyond ``keep`` removed); raises ImportRefused."""
    repaired = recover_interrupted_swap(bundle_dir)
    if repaired:
        log.warning("bundle import: %s", repaired)
    manifest_path = media_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise ImportRefused(
            f"no {MANIFEST_NAME} in {media_dir}",
            fix="mount the removable media and pass the folder that holds manifest.json with --media",
        )
    manifest_bytes = manifest_path.read_bytes()
    try:
        public_key = load_public_key(trusted_key)
        signature = read_signature(signature_file or media_dir / SIGNATURE_NAME)
        verify_manifest_bytes(manifest_bytes, signature, public_key)
    except SignatureError as err:
        raise ImportRefused(f"bundle refused: {err}", fix=_signature_fix(trusted_key)) from err
    fingerprint = key_fingerprint(trusted_key)

    staging = staging_dir(bundle_dir)
    staging.mkdir(parents=True)
    atomic_write_bytes(staging / MANIFEST_NAME, manifest_bytes)  # exactly the bytes that were verified
    atomic_write_bytes(staging / SIGNED_MANIFEST_NAME, manifest_bytes)
    try:
        manifest = Manifest.read(staging)
        for art in manifest.artifacts.values():
            _safe_relative(art)
    except BundleError as err:
        shutil.rmtree(staging)
        raise ImportRefused(
            f"bundle refused: {err}", fix="rebuild the bundle at the factory and sign it"
        ) from err
    except ImportRefused:
        shutil.rmtree(staging)
        raise
    total_bytes = sum(a.size_bytes for a in manifest.artifacts.values())
    manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
    ignored = len(_listed_files(media_dir, manifest))

    store = BundleStore(bundle_dir)
    # A first bundle is installed as the root's first version, active, so that there is something
    # to roll back to after the next one; a bundle folder from before versions stays as it is.
    first = not store.versioned and not (bundle_dir / MANIFEST_NAME).exists()

    def result(
        copied: bool, where: Path = bundle_dir, activated: bool = False, pruned: tuple[str, ...] = ()
    ) -> ImportResult:
        version = version_id(manifest_bytes) if store.versioned else None
        return ImportResult(
            where,
            len(manifest.artifacts),
            total_bytes,
            manifest_sha,
            fingerprint,
            copied,
            ignored,
            version,
            activated,
            pruned,
        )

    installed = store.root / VERSIONS / version_id(manifest_bytes) if store.versioned else bundle_dir
    if _already_installed(installed, manifest, manifest_bytes, signature):
        shutil.rmtree(staging)
        return result(copied=False, where=installed, activated=_activate_if_none(store, installed.name))
    try:
        _check_media(media_dir, manifest)
        free = _free_bytes(bundle_dir.parent)
        if free < total_bytes + FREE_SPACE_MARGIN_BYTES:
            raise ImportRefused(
                f"not enough disk space for the bundle: {free / 1e9:.1f} GB free, "
                f"{(total_bytes + FREE_SPACE_MARGIN_BYTES) / 1e9:.1f} GB needed at {bundle_dir.parent}",
                fix=_space_fix(store),
            )
        _copy_verified(media_dir, staging, manifest, total_bytes, progress)
        atomic_write_bytes(staging / SIGNATURE_NAME, base64.b64encode(signature) + b"\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if store.versioned or first:  # a version beside the others; the active one is not touched
        added = store.add(
            staging,
            label=f"imported from {media_dir}",
            source="import",
            move=True,
            replace=installed.is_dir(),
        )
        activated = _activate_if_none(store, added.id)
        pruned = tuple(v.id for v in store.prune(keep))
        return result(copied=True, where=added.path, activated=activated, pruned=pruned)
    _swap_in(staging, bundle_dir)
    return result(copied=True)


def _space_fix(store: BundleStore) -> str:
    fix = "free disk space on the device (or use a larger storage device) and run again"
    state = store.state()
    spare = [v for v in store.versions() if v.id not in (state.active, state.previous)]
    if spare:
        sizes = ", ".join(f"{v.id} ({v.size_bytes / 1e9:.1f} GB)" for v in spare)
        fix += f"; old bundle versions can go: appliance bundle remove VERSION (not in use: {sizes})"
    return fix


def _activate_if_none(store: BundleStore, version: str) -> bool:
    """A first bundle becomes the active one; a later one waits for ``appliance bundle activate``."""
    if not store.versioned or store.state().active is not None:
        return False
    store.activate(version)
    return True


def _copy_verified(
    media_dir: Path, staging: Path, manifest: Manifest, total_bytes: int, progress: bool
) -> None:
    altered = []
    with tqdm(
        total=total_bytes, unit="B", unit_scale=True, desc="copying bundle", disable=not progress
    ) as bar:
        for art in sorted(manifest.artifacts.values(), key=lambda a: a.path):
            rel = _safe_relative(art)
            if _copy_and_hash(media_dir / rel, staging / rel, bar) != art.sha256:
                altered.append(f"{art.name} ({art.path})")
    if altered:
        raise ImportRefused(
            "bundle refused: content altered (sha256 mismatch against the signed manifest): "
            + ", ".join(altered),
            fix="the media copy is damaged or was tampered with; copy the signed bundle again from the factory",
        )


def _swap_in(staging: Path, bundle_dir: Path) -> None:
    previous = previous_dir(bundle_dir)
    fsync_dir(staging)
    if bundle_dir.exists():
        bundle_dir.rename(previous)
    staging.rename(bundle_dir)
    fsync_dir(bundle_dir.parent)
    if previous.exists():
        shutil.rmtree(previous)


def _signature_fix(trusted_key: Path) -> str:
    return (
        f"use the bundle exactly as signed at the factory; the device trusts the key at {trusted_key} "
        "(sign with its private key: python -m provisioning sign-bundle --key PRIVATE.pem DIR)"
    )
