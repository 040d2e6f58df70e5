"""A bundle folder opened for the engines: its manifest, checked, and each artifact's path by logical
name. A root that keeps versions side by side (``engines.bundle_store``) opens its active version."""

from __future__ import annotations

from pathlib import Path

from engines.bundle_store import resolve_bundle_dir
from engines.errors import BundleError
from engines.manifest import Manifest, inside


class Bundle:
    """A verified bundle folder; engines ask it for artifact paths by logical name."""

    def __init__(self, root: Path, manifest: Manifest) -> None:
        self.root = root
        self.manifest = manifest

    @classmethod
    def open(cls, root: Path, *, verify: bool = True, full: bool = False) -> Bundle:
        """The bundle at ``root``: an unversioned bundle folder, or a root of versions side by side
        (``engines.bundle_store``), whose active version is opened."""
        root = resolve_bundle_dir(root)
        manifest = Manifest.read(root)
        if verify:
            problems = manifest.verify(root, full=full)
            if problems:
                listed = "; ".join(str(p) for p in problems)
                raise BundleError(
                    f"bundle {root} is damaged: {listed}",
                    fix=f"rebuild it: python -m build_scripts bundle --out {root}",
                )
        return cls(root, manifest)

    def path(self, name: str) -> Path:
        art = self.manifest.get(name)
        if art is None:
            known = ", ".join(sorted(self.manifest.artifacts)) or "none"
            raise BundleError(
                f"bundle {self.root} has no artifact {name!r} (has: {known})",
                fix=f"rebuild it: python -m build_scripts bundle --out {self.root}",
            )
        path = self.root / art.path
        if not inside(self.root, path):
            raise BundleError(
                f"bundle {self.root}: artifact {name!r} ({art.path}) reaches outside the bundle folder",
                fix="remove that version (appliance bundle remove) and import it again from its source",
            )
        return path
