"""Engine bundles side by side, by version, with the active one and the one before it recorded.

A bundle root (``bundle.dir``) holds::

    versions/<version>/manifest.json ...   each version a whole bundle; <version>: the first 12 hex
                                           digits of its manifest's sha256, so the same bundle is the
                                           same version wherever it was built or imported
    versions/<version>/version.json        its label, where it came from, when it was added
    bundles.json                           {"active": ..., "previous": ...}, replaced atomically
    bundles.last-good.json                 the same, as the product last wrote it

Adding a version never touches the active one: it is copied (or moved) into a hidden folder beside the
others and renamed into place, so an interruption leaves either nothing or a whole version. Switching
is one atomic write of ``bundles.json``: after a kill at any point the root names a version that is
whole. A folder with a ``manifest.json`` of its own (the layout before versions) is one unversioned
bundle and is opened as before; ``adopt`` makes it the first version.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engines.errors import BundleError
from engines.files import atomic_write, fsync_dir
from engines.manifest import MANIFEST_NAME, Manifest
from engines.setting_files import KIB, FileKind, read_setting_text

log = logging.getLogger(__name__)

VERSIONS = "versions"
STATE = "bundles.json"
# The selection as the product last wrote it: a bundles.json edited by hand into something unusable
# (not JSON, a version that is not there) is reported, and the daemon starts on this one instead.
LAST_GOOD_STATE = "bundles.last-good.json"
VERSION_INFO = "version.json"
EVALUATION = "evaluation.json"  # the canary's verdict on this version: never carried into a copy
_PARTIAL_PREFIX = ".adding-"
BUNDLE_STATE = FileKind("bundle selection", 64 * KIB)
MADE_ON_DEVICE = "device"  # a version's source when appliance bundle add-model made it on the device
DEFAULT_KEEP = 3  # versions kept on disk: the active one, the previous one and one more


def version_id(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()[:12]


@dataclass(frozen=True)
class BundleVersion:
    id: str
    path: Path
    label: str
    source: str  # "build", "import", "adopted", "device" (appliance bundle add-model)
    added: str  # ISO 8601, UTC
    size_bytes: int
    artifacts: int


@dataclass(frozen=True)
class StoreState:
    active: str | None = None
    previous: str | None = None


def version_of(folder: Path) -> str | None:
    """The version id of a bundle folder inside a versioned root; None for an unversioned one."""
    return folder.name if folder.parent.name == VERSIONS else None


def resolve_bundle_dir(root: Path) -> Path:
    """The folder of the bundle to use: ``root`` itself when it is an unversioned bundle, else its
    active version's (a root with versions and none active names the problem)."""
    BundleStore(root).check_layout()
    if (root / MANIFEST_NAME).is_file() or not (root / STATE).is_file():
        return root
    return BundleStore(root).active_version().path


class BundleStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def versioned(self) -> bool:
        return (self.root / STATE).is_file() or (self.root / VERSIONS).is_dir()

    def check_layout(self) -> None:
        """A root is either one bundle or versions side by side, never both: a ``manifest.json`` beside
        ``versions/`` (a model written straight into the root) would open as a bundle holding only
        what that manifest lists."""
        manifest = self.root / MANIFEST_NAME
        if not (manifest.is_file() and self.versioned):
            return
        if (self.root / VERSIONS / f"{_PARTIAL_PREFIX}{version_id(manifest.read_bytes())}").is_dir():
            raise BundleError(
                f"making the bundle at {self.root} its first version was interrupted",
                fix=f"finish it: appliance bundle adopt --dir {self.root}",
            )
        raise BundleError(
            f"{self.root} holds both versions ({VERSIONS}/) and a {MANIFEST_NAME} of its own, "
            "written into the root after it held versions",
            fix=f"move {self.root / MANIFEST_NAME} and the files it lists out of the root, then add a "
            "model as a version: appliance bundle add-model GGUF --name NAME",
        )

    # --- what is there ---------------------------------------------------------------------------

    def state(self) -> StoreState:
        """The selection in ``bundles.json``; when it is not usable (edited by hand: not JSON, not a
        version that is there), the one the product last wrote, with a warning that names the
        problem and the fix; a BundleError when there is none."""
        path = self.root / STATE
        if not path.is_file():
            return StoreState()
        try:
            state = self._read_state(path)
        except BundleError as err:
            kept = self.root / LAST_GOOD_STATE
            try:
                good = self._read_state(kept)
            except BundleError:
                raise err from None
            log.warning("%s; the last good selection in %s is used (active %s)", err, kept, good.active)
            return good
        if not (self.root / LAST_GOOD_STATE).exists():  # a root from before it was kept
            with contextlib.suppress(OSError):
                atomic_write(self.root / LAST_GOOD_STATE, path.read_bytes())
        return state

    def _read_state(self, path: Path) -> StoreState:
        fix = (
            f"activate a version again: appliance bundle activate VERSION (appliance bundle list {self.root})"
        )
        try:
            data = json.loads(read_setting_text(path, BUNDLE_STATE))
        except FileNotFoundError as err:
            raise BundleError(f"{path} does not exist", fix=fix) from err
        except (OSError, ValueError) as err:
            raise BundleError(f"{path} is not readable JSON: {err}", fix=fix) from err
        named = [data.get(key) for key in ("active", "previous")] if isinstance(data, dict) else []
        if len(named) != 2 or not all(value is None or isinstance(value, str) for value in named):
            raise BundleError(f"{path} is not a selection of versions ({str(data)[:80]})", fix=fix)
        present = (
            {p.name for p in (self.root / VERSIONS).iterdir()} if (self.root / VERSIONS).is_dir() else set()
        )
        missing = [value for value in named if value is not None and value not in present]
        if missing:
            raise BundleError(
                f"{path} names version {missing[0][:40]!r}, which is not in {self.root / VERSIONS}", fix=fix
            )
        return StoreState(active=named[0], previous=named[1])

    def versions(self) -> list[BundleVersion]:
        """Every whole version, the newest first."""
        folder = self.root / VERSIONS
        if not folder.is_dir():
            return []
        found = [self._read_version(p) for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
        return sorted((v for v in found if v is not None), key=lambda v: v.added, reverse=True)

    def get(self, version: str) -> BundleVersion:
        matches = [v for v in self.versions() if v.id.startswith(version)] if version else []
        if len(matches) != 1:
            have = ", ".join(v.id for v in self.versions()) or "none"
            what = "is ambiguous" if matches else "is not"
            raise BundleError(
                f"version {version!r} {what} in {self.root} (has: {have})",
                fix=f"name one of them: appliance bundle list {self.root}",
            )
        return matches[0]

    def active_version(self) -> BundleVersion:
        active = self.state().active
        if active is None:
            raise BundleError(
                f"the bundle root {self.root} has no active version",
                fix=f"activate one: appliance bundle list {self.root}, then appliance bundle activate VERSION",
            )
        return self.get(active)

    def _read_version(self, path: Path) -> BundleVersion | None:
        manifest_path = path / MANIFEST_NAME
        if not manifest_path.is_file():
            return None
        info: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):  # a version without its note is still a version
            info = json.loads((path / VERSION_INFO).read_text(encoding="utf-8"))
        try:
            manifest = Manifest.read(path)
        except BundleError:
            return None
        return BundleVersion(
            id=path.name,
            path=path,
            label=str(info.get("label", "")),
            source=str(info.get("source", "")),
            added=str(info.get("added", "")),
            size_bytes=sum(a.size_bytes for a in manifest.artifacts.values()),
            artifacts=len(manifest.artifacts),
        )

    # --- changes ---------------------------------------------------------------------------------

    def add(
        self,
        bundle_dir: Path,
        *,
        label: str = "",
        source: str = "build",
        move: bool = False,
        replace: bool = False,
    ) -> BundleVersion:
        """The bundle at ``bundle_dir`` as a version of its own (moved when ``move``, else copied);
        the same bundle already there is that version, unless ``replace`` (a damaged copy of it:
        swapped for this one). Any other version is not touched."""
        manifest_bytes = (bundle_dir / MANIFEST_NAME).read_bytes()
        version = version_id(manifest_bytes)
        target = self.root / VERSIONS / version
        there = target.is_dir() and (target / MANIFEST_NAME).read_bytes() == manifest_bytes
        if there and not replace:
            return self.get(version)
        (self.root / VERSIONS).mkdir(parents=True, exist_ok=True)
        self.discard_partial()
        partial = self.root / VERSIONS / f"{_PARTIAL_PREFIX}{version}"
        if move:
            bundle_dir.rename(partial)
        else:
            shutil.copytree(bundle_dir, partial)
        (partial / EVALUATION).unlink(missing_ok=True)  # measured as another version, or as this one before
        note = {"label": label, "source": source, "added": _now()}
        atomic_write(partial / VERSION_INFO, json.dumps(note, indent=2) + "\n")
        fsync_dir(partial)
        if target.exists():
            doomed = target.with_name(f".removing-{version}")
            target.rename(doomed)
            partial.rename(target)
            shutil.rmtree(doomed)
        else:
            partial.rename(target)
        fsync_dir(target.parent)
        return self.get(version)

    def activate(self, version: str) -> StoreState:
        """``version`` becomes the active one and the active one the previous (one atomic write)."""
        chosen = self.get(version).id
        state = self.state()
        if state.active == chosen:
            return state
        return self._write(StoreState(active=chosen, previous=state.active))

    def rollback(self) -> StoreState:
        """Back to the previous version; the active one becomes the previous (a second rollback
        undoes the first)."""
        state = self.state()
        if state.previous is None:
            raise BundleError(
                f"{self.root} has no previous version to go back to",
                fix=f"activate a version by name: appliance bundle list {self.root}",
            )
        self.get(state.previous)  # still there
        return self._write(StoreState(active=state.previous, previous=state.active))

    def remove(self, version: str) -> BundleVersion:
        """Delete a version; never the active one, nor the previous one (the rollback's target)."""
        chosen = self.get(version)
        state = self.state()
        if chosen.id in (state.active, state.previous):
            role = "active" if chosen.id == state.active else "previous (the one a rollback returns to)"
            raise BundleError(
                f"version {chosen.id} is the {role} one and stays",
                fix="activate another version first: appliance bundle activate VERSION",
            )
        doomed = chosen.path.with_name(f".removing-{chosen.id}")
        chosen.path.rename(doomed)  # gone from the list at once, even if the delete is interrupted
        shutil.rmtree(doomed)
        return chosen

    def prune(self, keep: int = DEFAULT_KEEP) -> list[BundleVersion]:
        """Remove the oldest versions beyond ``keep`` (never the active or the previous one)."""
        state = self.state()
        spare = [v for v in self.versions() if v.id not in (state.active, state.previous)]
        room = max(0, keep - (len(self.versions()) - len(spare)))
        return [self.remove(v.id) for v in spare[room:]]

    def adopt(self, *, label: str = "adopted") -> BundleVersion:
        """An unversioned bundle at the root becomes its first version, active. Its files are moved
        (renamed, on the same file system), the manifest last: an interrupted adoption is finished by
        running it again."""
        manifest_path = self.root / MANIFEST_NAME
        if not manifest_path.is_file():
            raise BundleError(f"{self.root} holds no unversioned bundle to adopt")
        version = version_id(manifest_path.read_bytes())
        partial = self.root / VERSIONS / f"{_PARTIAL_PREFIX}{version}"
        partial.mkdir(parents=True, exist_ok=True)
        for child in sorted(self.root.iterdir()):
            if child.name not in (VERSIONS, MANIFEST_NAME, STATE, LAST_GOOD_STATE):
                child.rename(partial / child.name)
        manifest_path.rename(partial / MANIFEST_NAME)
        note = {"label": label, "source": "adopted", "added": _now()}
        atomic_write(partial / VERSION_INFO, json.dumps(note, indent=2) + "\n")
        partial.rename(self.root / VERSIONS / version)
        fsync_dir(self.root / VERSIONS)
        self.activate(version)
        return self.get(version)

    def discard_partial(self) -> list[Path]:
        """What an interrupted add or remove left in ``versions/``."""
        folder = self.root / VERSIONS
        leftovers = [p for p in folder.glob(".*") if p.is_dir()] if folder.is_dir() else []
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        return leftovers

    def _write(self, state: StoreState) -> StoreState:
        payload = {"active": state.active, "previous": state.previous, "changed": _now()}
        text = json.dumps(payload, indent=2) + "\n"
        atomic_write(self.root / STATE, text)
        atomic_write(self.root / LAST_GOOD_STATE, text)
        return state


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")
