"""What every bundle build step works on: the bundle folder and its manifest, recorded as it goes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from engines.manifest import Artifact, Manifest, sha256_of


@dataclass(frozen=True)
class BuildContext:
    out: Path
    manifest: Manifest
    force: bool = False
    pip_args: tuple[str, ...] = ()

    def save(self) -> None:
        self.manifest.meta["updated_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.manifest.write(self.out)

    def is_current(
        self, name: str, *, source: dict[str, str], build: dict[str, object] | None = None
    ) -> bool:
        """True when ``name`` is recorded with this source/build and its file is intact."""
        if self.force:
            return False
        art = self.manifest.get(name)
        if art is None or art.source != source or (build is not None and art.build != build):
            return False
        return not self.manifest.verify_one(self.out, art, full=True)

    def record(
        self,
        name: str,
        path: Path,
        kind: str,
        *,
        source: dict[str, str],
        build: dict[str, object] | None = None,
    ) -> Artifact:
        art = Artifact(
            name=name,
            path=path.relative_to(self.out).as_posix(),
            kind=kind,
            sha256=sha256_of(path),
            size_bytes=path.stat().st_size,
            source=source,
            build=dict(build or {}),
        )
        self.manifest.add(art)
        self.save()
        return art
